package allotment

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.UnixMicro(1_700_000_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// recorder is an inner store that records the requests it is asked, and
// can hold them at a gate or fail them.
type recorder struct {
	ratelimit.Store
	mu      sync.Mutex
	calls   []ratelimit.Request
	batches int           // AllowBatch calls
	gate    chan struct{} // when set, each call waits for one receive
	err     error
}

func (r *recorder) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	r.mu.Lock()
	r.calls = append(r.calls, reqs...)
	r.batches++
	gate, err := r.gate, r.err
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err != nil {
		return nil, err
	}
	return r.Store.AllowBatch(ctx, reqs)
}

func (r *recorder) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, r, key, l, hits)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) StateKeys(q ratelimit.Request) []string {
	return r.Store.(nopCloser).Store.(ratelimit.Resetter).StateKeys(q)
}

func (r *recorder) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	return r.Store.(nopCloser).Store.(ratelimit.Resetter).Reset(ctx, reqs)
}

// taken returns and forgets the requests recorded so far.
func (r *recorder) taken() []ratelimit.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls, r.batches = nil, 0
	return c
}

// takenBatches returns and forgets the requests recorded so far and the
// number of calls that carried them.
func (r *recorder) takenBatches() ([]ratelimit.Request, int) {
	r.mu.Lock()
	n := r.batches
	r.mu.Unlock()
	return r.taken(), n
}

type rig struct {
	clk *clock
	mem *memstore.Store
	rec *recorder
	s   *Store
	reg *prometheus.Registry
	ctx context.Context
}

// newRig builds an allotment store over a recorder over a memstore on a
// fake clock; others share the memstore (more replicas of one fleet).
func newRig(t *testing.T, clk *clock, mem *memstore.Store, opts Options) *rig {
	t.Helper()
	if clk == nil {
		clk = newClock()
	}
	if mem == nil {
		var err error
		if mem, err = memstore.New(memstore.Options{Now: clk.Now, SweepInterval: -1}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mem.Close() })
	}
	rec := &recorder{Store: nopCloser{mem}}
	reg := prometheus.NewRegistry()
	opts.Registerer, opts.Now = reg, clk.Now
	s, err := New(rec, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &rig{clk: clk, mem: mem, rec: rec, s: s, reg: reg, ctx: context.Background()}
}

// nopCloser keeps a shared memstore open when one replica closes.
type nopCloser struct{ ratelimit.Store }

func (nopCloser) Close() error { return nil }

// allow decides hits of limits on key and waits for any prefetch it began.
func (g *rig) allow(t *testing.T, key string, hits int64, limits ...ratelimit.Limit) ratelimit.Decision {
	t.Helper()
	d, err := g.s.AllowBatch(g.ctx, []ratelimit.Request{{Key: key, Limits: limits, Hits: hits}})
	if err != nil {
		t.Fatal(err)
	}
	g.s.wg.Wait()
	return d[0]
}

// warm grows the slice of l on key to its largest: three requests 10µs
// apart measure a demand of 100,000 hits per second.
func (g *rig) warm(t *testing.T, key string, l ratelimit.Limit) {
	t.Helper()
	for range 3 {
		g.allow(t, key, 1, l)
		g.clk.Add(10 * time.Microsecond)
	}
}

// shared is the exact state of l on key in the memstore (a check).
func (g *rig) shared(t *testing.T, key string, l ratelimit.Limit) ratelimit.Result {
	t.Helper()
	l.Consistency = ""
	r, err := g.mem.Allow(g.ctx, key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (g *rig) counter(name string, labels ...string) float64 {
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				ok = ok && found
			}
			if ok {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	return -1
}

func allot(alg ratelimit.Algorithm, requests int64, period time.Duration) ratelimit.Limit {
	return ratelimit.Limit{Algorithm: alg, Requests: requests, Period: period, Consistency: ratelimit.Allotment}
}
