package region

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// simEnvoy is one Envoy of an RLQS simulation: its offered load and the
// token bucket it enforces, as Envoy 1.40 does (continuous refill; a first
// assignment starts full, a changed one keeps its tokens).
type simEnvoy struct {
	rate           float64 // offered, requests per second
	carry          float64
	fill, tokens   float64
	max            float64
	assigned, seen bool
}

// install enforces tb from now on.
func (e *simEnvoy) install(tb quota.TokenBucket) {
	e.fill, e.max = tb.Rate(), float64(tb.MaxTokens)
	if !e.assigned {
		e.tokens, e.assigned = e.max, true
	}
	e.tokens = min(e.tokens, e.max)
}

// step admits what e's bucket lets through of dt's arrivals.
func (e *simEnvoy) step(dt time.Duration) (admitted int64) {
	e.tokens = min(e.tokens+e.fill*dt.Seconds(), e.max)
	for e.carry += e.rate * dt.Seconds(); e.carry >= 1; e.carry-- {
		if e.tokens >= 1 {
			e.tokens--
			admitted++
		}
	}
	return admitted
}

// quotaSim is a sim whose regions' traffic is all RLQS: each region's
// Envoys enforce shares of what its RLQS server may assign of a global
// limit (Store.QuotaBudget, or the rule's whole rate before the wiring),
// refreshed every RLQS tick.
type quotaSim struct {
	*sim
	limit   ratelimit.Limit
	stores  []*Store
	envoys  [][]*simEnvoy
	budgets []float64
	// regional divides the rule's whole rate in each region, as RLQS did
	// before global limits were wired (the figure to compare with).
	regional bool
	// overCap counts RLQS ticks whose budget over a window and a burst
	// exceeded the region's cap.
	overCap int
}

const (
	quotaTick  = time.Second
	quotaBurst = time.Second
)

func newQuotaSim(t *testing.T, l ratelimit.Limit, offered [][]float64) *quotaSim {
	t.Helper()
	names := make([]string, len(offered))
	for i := range offered {
		names[i] = string(rune('a' + i))
	}
	s := &quotaSim{limit: l, budgets: make([]float64, len(names))}
	s.sim = newSim(t, Rule{Limit: l.Requests, Period: l.Period, Floor: l.Floor}, time.Second, 3*time.Second, names...)
	for i, r := range s.regions {
		inner, err := memstore.New(memstore.Options{Now: s.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		st, err := NewStore(inner, r.ex)
		if err != nil {
			t.Fatal(err)
		}
		s.stores = append(s.stores, st)
		var es []*simEnvoy
		for _, rate := range offered[i] {
			es = append(es, &simEnvoy{rate: rate})
		}
		s.envoys = append(s.envoys, es)
	}
	s.key = globalKey("tenant-a|api", l)
	return s
}

// assign is one RLQS tick in region i: the Envoys' demand (their offered
// load, as their reports measure it) in, their shares out.
func (s *quotaSim) assign(ctx context.Context, i int) {
	demands := map[string]float64{}
	var total float64
	for j, e := range s.envoys[i] {
		d := e.rate
		if !e.seen {
			d = quota.Unknown
		}
		e.seen = true
		demands[fmt.Sprint(j)] = d
		total += d
	}
	budget := quota.RateOf(s.limit.Requests, s.limit.Period)
	if !s.regional {
		var err error
		budget, err = s.stores[i].QuotaBudget(ctx, "tenant-a|api", s.limit, QuotaAsk{Demand: total, Burst: quotaBurst, Horizon: 3 * quotaTick})
		if err != nil {
			s.t.Fatalf("%s: quota budget: %v", s.regions[i].name, err)
		}
		res, err := s.regions[i].ex.local.Decide(ctx, s.key, s.rule, s.topo, 0, "n")
		if err != nil {
			s.t.Fatal(err)
		}
		if budget*(s.rule.Period+quotaBurst).Seconds() > float64(res.Cap)+1e-6 {
			s.overCap++
		}
	}
	s.budgets[i] = budget
	for j, sh := range quota.Allocate(budget, demands, quota.Config{}) {
		var n int
		fmt.Sscan(j, &n)
		s.envoys[i][n].install(sh.Bucket)
	}
}

// run advances the simulation by d: exchanges every tick, RLQS
// assignments every quotaTick (half a tick after the exchanges), Envoys
// admitting every dt.
func (s *quotaSim) run(d time.Duration) {
	ctx := context.Background()
	perTick := int64(tick(s.topo) / s.dt)
	perQuota := int64(quotaTick / s.dt)
	for end := s.clock.Now().Add(d); s.clock.Now().Before(end); s.clock.Advance(s.dt) {
		if s.steps%perTick == 0 {
			for _, r := range s.regions {
				out, done, err := r.ex.Tick(ctx, s.key, s.rule)
				if done && err == nil {
					r.last = out
				}
			}
		}
		if s.steps%perQuota == perTick/2 {
			for i := range s.regions {
				s.assign(ctx, i)
			}
		}
		s.steps++
		w := s.window()
		for i, r := range s.regions {
			for _, e := range s.envoys[i] {
				r.admitted[w] += e.step(s.dt)
			}
		}
	}
}

// TestSimQuotaNeverOver: two regions whose traffic is all RLQS, demand 3:1
// (900/s : 300/s, two Envoys each) against a global limit of 10,000 per
// 10 s window (1,000/s). Each region's Envoys are assigned at most its
// grant over a window and a burst, the exchanger divides the limit by the
// Envoys' demand, and no window admits above the limit: connected, with
// region b cut off from the global store, and after it rejoins. Before the
// wiring (each region's Envoys dividing the rule's whole rate) every
// window admitted 12,000.
func TestSimQuotaNeverOver(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Requests: 10000, Period: 10 * time.Second, Algorithm: ratelimit.FixedWindow, Scope: ratelimit.Global, Floor: 0.05}
	offered := [][]float64{{600, 300}, {200, 100}}

	before := newQuotaSim(t, l, offered)
	before.regional = true
	before.run(60 * time.Second)
	w0 := before.window()
	t.Logf("before (each region divides the rule's rate): windows %v", before.totals(w0-4, w0))

	s := newQuotaSim(t, l, offered)
	start := s.window()
	s.run(60 * time.Second)
	w := s.window()
	a, b := s.regions[0], s.regions[1]
	t.Logf("connected: windows %v; a %d b %d in the last; budgets a %.1f/s b %.1f/s; demand reported a %.0f b %.0f",
		s.totals(start, w), a.admitted[w-1], b.admitted[w-1], s.budgets[0], s.budgets[1], a.last.Demand, b.last.Demand)
	// The exchanger sees the Envoys' demand (hits per window): none of it
	// is asked through decisions here.
	if math.Abs(a.last.Demand-9000) > 1 || math.Abs(b.last.Demand-3000) > 1 {
		t.Errorf("demand reported: a %.1f, b %.1f; want the Envoys' 9000 and 3000", a.last.Demand, b.last.Demand)
	}
	// Shares by demand (7000 : 3000), each used over a window and a burst.
	if a.last.Target != 7000 || b.last.Target != 3000 {
		t.Errorf("targets a %d b %d, want 7000 and 3000", a.last.Target, b.last.Target)
	}
	if n := a.admitted[w-1] + b.admitted[w-1]; n < 9000 {
		t.Errorf("last connected window admitted %d, want at least 9000 (the burst allowance costs 1/11)", n)
	}

	b.link.cut.Store(true)
	cut := s.window()
	s.run(40 * time.Second)
	t.Logf("b cut off: windows %v (b %v)", s.totals(cut, s.window()), b.admitted)
	if n := b.admitted[s.window()-1]; n > s.rule.FloorHits() {
		t.Errorf("b cut off admitted %d in a window after its grants lapsed, above its floor %d", n, s.rule.FloorHits())
	}
	b.link.cut.Store(false)
	s.run(40 * time.Second)
	s.checkNeverOver(start, s.window())
	if s.overCap > 0 {
		t.Errorf("%d RLQS ticks assigned more than the region's cap over a window and a burst", s.overCap)
	}
	if got := before.total(w0 - 1); got <= l.Requests {
		t.Errorf("before: %d admitted in a window; the harness should show the regional division over the limit", got)
	}
}
