package region

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// TestQuotaReservationSharesTheCap: what RLQS reserves of a window counts
// as admitted for the region's decisions and for the exchanger's lowering,
// and is never lowered within its window; RLQS gets at most what the
// decisions left.
func TestQuotaReservationSharesTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := ratelimit.Limit{Requests: 1000, Period: 10 * time.Second, Algorithm: ratelimit.FixedWindow, Scope: ratelimit.Global, Floor: 0.1}
	s := newSim(t, Rule{Limit: l.Requests, Period: l.Period, Floor: l.Floor}, time.Second, 3*time.Second, "a", "b")
	a := s.regions[0]
	inner, err := memstore.New(memstore.Options{Now: s.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewStore(inner, a.ex)
	if err != nil {
		t.Fatal(err)
	}
	k := globalKey("t|api", l)
	// a alone reports: 900 (the limit less b's floor) once it has a grant.
	if _, err := a.ex.Step(ctx, k, s.rule); err != nil {
		t.Fatal(err)
	}
	for range 100 { // 100 decisions first
		if _, err := st.Allow(ctx, "t|api", l, 1); err != nil {
			t.Fatal(err)
		}
	}
	ask := QuotaAsk{Demand: 50, Burst: time.Second, Horizon: 2 * time.Second}
	rate, err := st.QuotaBudget(ctx, "t|api", l, ask)
	if err != nil {
		t.Fatal(err)
	}
	// 50/s over 11 s, with headroom: ceil(550 × 1.25) + 2 = 690 reserved.
	if want := 690.0 / 11; math.Abs(rate-want) > 1e-9 {
		t.Errorf("budget %.3f/s, want %.3f (690 reserved over a window and a burst)", rate, want)
	}
	admitted := 0
	for range 200 {
		res, err := st.Allow(ctx, "t|api", l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 900-100-690 {
		t.Errorf("decisions admitted %d after the reservation, want %d", admitted, 900-100-690)
	}
	// More demand than room: the reservation takes what is left, never
	// more, and a lower demand does not give any back within the window.
	if rate, err = st.QuotaBudget(ctx, "t|api", l, QuotaAsk{Demand: 1000, Burst: time.Second, Horizon: 2 * time.Second}); err != nil || rate != 690.0/11 {
		t.Errorf("budget with no room left: %.3f, %v; want the 690 reserved over 11 s", rate, err)
	}
	if rate, err = st.QuotaBudget(ctx, "t|api", l, QuotaAsk{Demand: 1, Burst: time.Second, Horizon: 2 * time.Second}); err != nil || rate != 690.0/11 {
		t.Errorf("budget after demand fell: %.3f, %v; want the 690 still reserved", rate, err)
	}
	// The exchanger's lowering never goes below admitted plus reserved.
	c0, _, err := a.ex.local.setCaps(ctx, k, a.ex.owner, "lower", s.rule, s.topo, s.window(), 0, 0)
	if err != nil || c0 != 900 {
		t.Errorf("lowered to %d, %v; want 900 (admitted 210 + reserved 690)", c0, err)
	}
	// The exchanger reports the Envoys' demand, recorded per window.
	out, err := a.ex.Step(ctx, k, s.rule)
	if err != nil {
		t.Fatal(err)
	}
	if out.Demand < 10 { // 1/s over a 10 s window, plus the decisions' own
		t.Errorf("demand reported %.1f, want the Envoys' 10 per window at least", out.Demand)
	}
}
