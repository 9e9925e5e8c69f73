package region

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// The store decides a request's global limit from the region's share and
// its other limits in the inner store; a request the global limit denies
// charges nothing to the others.
func TestStoreSplitsGlobalFromRegional(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	l, g := newTestPair(t, redistest.Standalone(t).Client(), clock, "eu")
	ex, err := NewExchanger(testTopo, l, g, "replica-1")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := memstore.New(memstore.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(inner, ex)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	global := ratelimit.Limit{Name: "g", Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Minute, Scope: ratelimit.Global, Floor: 0.02}
	regional := ratelimit.Limit{Name: "r", Algorithm: ratelimit.FixedWindow, Requests: 1000, Period: time.Hour}
	req := ratelimit.Request{Key: "tenant-a", Limits: []ratelimit.Limit{regional, global}, Hits: 1}
	// Before any exchange the region may admit its floor: 2.
	for i := range 3 {
		ds, err := s.AllowBatch(ctx, []ratelimit.Request{req})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; ds[0].Allowed != want || ds[0].Results[1].Allowed != want || ds[0].Results[1].Limit != 100 {
			t.Fatalf("decision %d before any exchange: %+v, want allowed=%v (floor 2)", i, ds[0], want)
		}
	}
	// The denied third request charged nothing to the regional limit.
	if res, _ := inner.Allow(ctx, "tenant-a", regional, 0); res.Remaining != 998 {
		t.Errorf("regional limit remaining %d, want 998 (the denied request not charged)", res.Remaining)
	}
	// One exchange: the region alone reports demand and gets the limit
	// less us's floor.
	if _, err := ex.Step(ctx, globalKey("tenant-a", global), s.ruleOf(global)); err != nil {
		t.Fatal(err)
	}
	res, err := s.Allow(ctx, "tenant-a", global, 1)
	if err != nil || !res.Allowed || res.Remaining != 98-3 {
		t.Fatalf("after the exchange: %+v, %v; want allowed with 95 left of 98", res, err)
	}
	// Reset forgets the region's count of the window.
	if err := s.Reset(ctx, []ratelimit.Request{req}); err != nil {
		t.Fatal(err)
	}
	if res, _ := s.Allow(ctx, "tenant-a", global, 0); res.Remaining != 98 {
		t.Errorf("after reset: remaining %d, want 98", res.Remaining)
	}
	if keys := s.StateKeys(req); keys[1] != l.Key(globalKey("tenant-a", global)) || keys[0] == "" {
		t.Errorf("state keys %q", keys)
	}
}

// With floor × regions = 1 the floors are a static split: each region
// admits its part with no exchange, and the key is never tracked.
func TestStaticSplitIsNeverExchanged(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	l, g := newTestPair(t, redistest.Standalone(t).Client(), clock, "eu")
	ex, _ := NewExchanger(testTopo, l, g, "replica-1")
	inner, _ := memstore.New(memstore.Options{Now: clock.Now})
	s, _ := NewStore(inner, ex)
	defer func() { _ = s.Close() }()
	half := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 10, Period: time.Second, Scope: ratelimit.Global, Floor: 0.5}
	for i := range 6 {
		res, err := s.Allow(ctx, "k", half, 1)
		if err != nil || res.Allowed != (i < 5) {
			t.Fatalf("decision %d: %+v, %v; want the first 5 (half of 10) admitted", i, res, err)
		}
	}
	if n := len(ex.snapshot()); n != 0 {
		t.Errorf("%d keys tracked for exchange, want none for a static split", n)
	}
}

// The region's Redis down: a global limit is decided by the inner store
// (its failure mode applies) as a regional limit of the floor, not failed.
func TestStoreRegionRedisDownDecidesTheFloor(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	srv := redistest.Standalone(t)
	l, g := newTestPair(t, srv.Client(), clock, "eu")
	ex, _ := NewExchanger(testTopo, l, g, "replica-1")
	inner, _ := memstore.New(memstore.Options{Now: clock.Now})
	s, _ := NewStore(inner, ex)
	defer func() { _ = s.Close() }()
	srv.Stop()
	global := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Minute, Scope: ratelimit.Global, Floor: 0.03}
	for i := range 4 {
		res, err := s.Allow(ctx, "k", global, 1)
		if err != nil || res.Allowed != (i < 3) || res.Limit != 100 {
			t.Fatalf("decision %d with the region's Redis down: %+v, %v; want the floor (3) admitted, then denied", i, res, err)
		}
	}
}

// The charge modes in the region's script: a check charges nothing, a
// forced charge passes the cap and a refund comes back, a reservation is
// admitted on one hit left and charges all its hits.
func TestLocalChargeModes(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	l, _ := newTestPair(t, redistest.Standalone(t).Client(), clock, "eu")
	r := Rule{Limit: 100, Period: time.Minute, Floor: 0.1} // cap 10 without a grant
	step := func(hits int64, mode string, wantAllowed bool, wantRemaining int64) {
		t.Helper()
		res, err := l.Decide(ctx, "k", r, testTopo, hits, mode)
		if err != nil || res.Allowed != wantAllowed || res.Remaining != wantRemaining {
			t.Fatalf("%d hits mode %s: %+v, %v; want allowed=%v remaining=%d", hits, mode, res, err, wantAllowed, wantRemaining)
		}
	}
	step(8, "n", true, 10) // a check: nothing charged
	step(8, "i", true, 2)  // charged
	step(3, "i", false, 2) // refused, nothing charged
	step(5, "r", true, 0)  // one hit left: reserved, all 5 charged (13 of 10)
	step(1, "r", false, 0) // no hit left: refused
	step(-6, "a", true, 3) // a refund
	step(4, "a", false, 0) // a forced charge past the cap
	chargeModes := map[ratelimit.ChargeMode]string{ratelimit.ChargeIfAdmitted: "i", ratelimit.ChargeNever: "n", ratelimit.ChargeAlways: "a", ratelimit.ChargeAlways + 1: "r"}
	for m, want := range chargeModes {
		if got := chargeMode(m); got != want {
			t.Errorf("chargeMode(%d) = %q, want %q", m, got, want)
		}
	}
}
