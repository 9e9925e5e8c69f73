package allotment

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// exactOf is l decided exact.
func exactOf(l ratelimit.Limit) ratelimit.Limit {
	l.Consistency = ratelimit.Exact
	return l
}

// TestColdKeyDecidedAsExact: a key's first request creates no slice and is
// one inner call charging its hits, answered as exact mode answers it
// (another store on the same clock, deciding the limit exact).
func TestColdKeyDecidedAsExact(t *testing.T) {
	t.Parallel()
	for _, alg := range leasable {
		clk := newClock()
		g, x := newRig(t, clk, nil, Options{}), newRig(t, clk, nil, Options{})
		l := allot(alg, 100, time.Second)
		for _, hits := range []int64{3, 200} { // admitted, then refused
			key := "k" + string(rune('0'+hits%10))
			got, want := g.allow(t, key, hits, l), x.allow(t, key, hits, exactOf(l))
			if got.Allowed != want.Allowed || got.Results[0] != want.Results[0] {
				t.Errorf("%s, %d hits: %+v, want exact's %+v", alg, hits, got, want)
			}
			if calls, n := g.rec.takenBatches(); n != 1 || len(calls) != 1 || calls[0].Hits != hits {
				t.Errorf("%s, %d hits: %d calls of %+v, want one of the request's hits", alg, hits, n, calls)
			}
		}
		if n := g.s.table.len(); n != 0 {
			t.Errorf("%s: %d slices after cold requests, want none", alg, n)
		}
		if got := g.shared(t, "k3", l).Remaining; got != 97 {
			t.Errorf("%s: the shared count has %d remaining, want 97 (the hits charged)", alg, got)
		}
		if c := g.counter("extauthz_ratelimit_allotment_decisions_total", "source", "cold"); c != 2 {
			t.Errorf("%s: %v cold decisions counted, want 2", alg, c)
		}
	}
}

// TestDoorkeeperHorizon: a second request within the horizon (its last
// instant included) gets a slice; one after more than the horizon of
// silence is cold again.
func TestDoorkeeperHorizon(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{Horizon: 20 * time.Millisecond})
	l := allot(ratelimit.FixedWindow, 1600, time.Hour)
	g.allow(t, "late", 1, l)
	g.allow(t, "soon", 1, l)
	g.clk.Add(20 * time.Millisecond)
	g.allow(t, "soon", 1, l)
	if n := g.s.table.len(); n != 1 || g.s.table.lookup(sliceID("soon", l)) == nil {
		t.Fatalf("%d slices, want the one of the key seen again within the horizon", n)
	}
	g.clk.Add(20*time.Millisecond + time.Microsecond)
	g.rec.taken()
	g.allow(t, "late", 1, l)
	if g.s.table.lookup(sliceID("late", l)) != nil {
		t.Error("a key silent for more than the horizon got a slice")
	}
	if calls := g.rec.taken(); len(calls) != 1 || calls[0].Hits != 1 {
		t.Errorf("cold request: inner saw %+v, want its one hit", calls)
	}
}

// TestQuietSliceGoesCold: a slice found empty after more than the horizon
// of silence is dropped and the request decided as exact; a slice that
// still holds tokens after the silence is used.
func TestQuietSliceGoesCold(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 1600, time.Hour)
	g.warm(t, "full", l)
	g.allow(t, "empty", 1, l)
	g.allow(t, "empty", 1, l) // within the horizon: a slice of one token, used
	if g.s.table.lookup(sliceID("empty", l)) == nil {
		t.Fatal("no slice for a key seen twice within the horizon")
	}
	g.clk.Add(time.Second)
	g.rec.taken()
	g.allow(t, "full", 1, l)
	if calls := g.rec.taken(); len(calls) != 0 {
		t.Errorf("a slice holding tokens after a silence: %+v asked, want a local decision", calls)
	}
	stale := g.s.table.lookup(sliceID("empty", l))
	d := g.allow(t, "empty", 2, l)
	if g.s.table.lookup(sliceID("empty", l)) != nil {
		t.Error("an empty slice after a silence was kept")
	}
	if calls := g.rec.taken(); !d.Allowed || len(calls) != 1 || calls[0].Hits != 2 || d.Results[0].Remaining != 1600-4 {
		t.Errorf("%+v after %+v, want one exact call of the 2 hits, %d remaining", d, calls, 1600-4)
	}
	// A request that found the slice before it was dropped leases nothing
	// into it (its tokens would be lost with it).
	if tk, err := g.s.take(g.ctx, stale, "empty", l, 1); err != nil || !tk.cold {
		t.Errorf("a dropped slice: %+v, %v; want the key cold", tk, err)
	}
}

// TestMixedColdAndExactLimits: a request with a cold allotment limit and an
// exact one is one inner call deciding both, all or nothing: denied by
// either, neither is charged; a warm allotment limit of the same request
// gets its token back.
func TestMixedColdAndExactLimits(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	cold := allot(ratelimit.SlidingWindow, 5, time.Hour)
	warm := allot(ratelimit.GCRA, 1600, time.Hour)
	ex := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1, Period: time.Hour}
	g.warm(t, "k", warm)
	g.rec.taken()
	if d := g.allow(t, "k", 1, cold, ex); !d.Allowed || d.Results[0].Remaining != 4 {
		t.Fatalf("first: %+v, want allowed, the cold limit charged", d)
	}
	if calls, n := g.rec.takenBatches(); n != 1 || len(calls[0].Limits) != 2 {
		t.Errorf("%d inner calls of %+v, want one deciding both limits", n, calls)
	}
	held := g.s.table.held(sliceID("k", warm), g.clk.Now())
	g.clk.Add(time.Second) // cold again
	if d := g.allow(t, "k", 1, warm, cold, ex); d.Allowed {
		t.Fatalf("second: %+v, want denied by the exact limit", d)
	}
	if got := g.shared(t, "k", cold).Remaining; got != 4 {
		t.Errorf("cold limit charged by a denied request: %d remaining, want 4", got)
	}
	if got := g.s.table.held(sliceID("k", warm), g.clk.Now()); got != held {
		t.Errorf("warm slice held %d before, %d after a denied request; want its token back", held, got)
	}
	g.allow(t, "k", 4, exactOf(cold)) // the cold limit exhausted
	g.clk.Add(time.Second)
	held = g.s.table.held(sliceID("k", warm), g.clk.Now())
	if d := g.allow(t, "k", 1, warm, cold); d.Allowed || d.Results[1].Allowed {
		t.Fatalf("third: %+v, want denied by the cold limit", d)
	}
	if got := g.s.table.held(sliceID("k", warm), g.clk.Now()); got != held {
		t.Errorf("warm slice held %d before, %d after a request the cold limit denied; want its token back", held, got)
	}
	g.allow(t, "j", 5, exactOf(cold))
	g.clk.Add(time.Second)
	if d := g.allow(t, "j", 1, cold, exactOf(warm)); d.Allowed || d.Results[0].Allowed {
		t.Fatalf("fourth: %+v, want denied by the cold limit", d)
	}
	if got := g.shared(t, "j", warm).Remaining; got != 1600 {
		t.Errorf("exact limit charged by a request the cold limit denied: %d remaining, want 1600", got)
	}
	if g.s.table.lookup(sliceID("k", cold)) != nil || g.s.table.lookup(sliceID("j", cold)) != nil {
		t.Error("a cold limit got a slice")
	}
}

// TestBatchColdJoinsExactCall: in a batch, requests whose allotment limit's
// key is cold go to the inner store in the one call of the exact requests;
// a warm one is decided from its slice.
func TestBatchColdJoinsExactCall(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	al := allot(ratelimit.FixedWindow, 1600, time.Hour)
	ex := ratelimit.Limit{Requests: 7, Period: time.Hour}
	g.warm(t, "w", al)
	g.rec.taken()
	reqs := []ratelimit.Request{
		{Key: "a", Limits: []ratelimit.Limit{al}, Hits: 2},
		{Key: "b", Limits: []ratelimit.Limit{ex}, Hits: 1},
		{Key: "w", Limits: []ratelimit.Limit{al}, Hits: 1},
		{Key: "c", Limits: []ratelimit.Limit{ex, al}, Hits: 3},
	}
	d, err := g.s.AllowBatch(g.ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	calls, n := g.rec.takenBatches()
	if n != 1 || len(calls) != 3 || calls[0].Key != "a" || calls[1].Key != "b" || calls[2].Key != "c" {
		t.Errorf("%d inner calls of %+v, want one of the cold and exact requests", n, calls)
	}
	for i, want := range []int64{1598, 6, -1, 4} {
		if !d[i].Allowed || (want >= 0 && d[i].Results[0].Remaining != want) {
			t.Errorf("request %d: %+v, want allowed with %d remaining", i, d[i], want)
		}
	}
	if r := d[3].Results[1].Remaining; r != 1597 {
		t.Errorf("cold limit of a two-limit request: %d remaining, want 1597", r)
	}
	if n := g.s.table.len(); n != 1 {
		t.Errorf("%d slices, want the warm key's only", n)
	}
	if c := g.counter("extauthz_ratelimit_allotment_decisions_total", "source", "cold"); c != 2+1 {
		t.Errorf("%v cold decisions, want 3 (one in warm's first request)", c)
	}
}

// TestDoorkeeperSlots: a key is warm when its own tag is in its slot within
// the horizon; another key in the same slot makes it neither warm (the
// tag differs) nor, once it is seen again, lose its next sighting; a clock
// that went back makes it cold.
func TestDoorkeeperSlots(t *testing.T) {
	t.Parallel()
	d := newDoorkeeper(50 * time.Millisecond)
	slot := uint64(5) << (64 - doorBits)
	a, b := slot|1<<(64-doorBits-tagBits), slot|2<<(64-doorBits-tagBits)
	t0 := newClock().Now()
	for _, step := range []struct {
		h    uint64
		at   time.Duration
		warm bool
		prev time.Duration
	}{
		{a, 0, false, 0},
		{b, time.Millisecond, false, 0}, // same slot, another key: not a's sighting
		{a, 2 * time.Millisecond, false, 0},
		{a, 52 * time.Millisecond, true, 2 * time.Millisecond}, // the horizon's last instant
		{a, 102*time.Millisecond + time.Microsecond, false, 0},
		{a, 50 * time.Millisecond, false, 0}, // the clock went back
	} {
		prev, warm := d.seen(step.h, t0.Add(step.at))
		if warm != step.warm || (warm && !prev.Equal(t0.Add(step.prev))) {
			t.Errorf("key %x at %v: warm %v since %v, want %v since %v", step.h>>(64-doorBits-tagBits), step.at,
				warm, prev.Sub(t0), step.warm, step.prev)
		}
	}
}
