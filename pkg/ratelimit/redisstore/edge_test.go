package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// edgePeriods are the periods whose window edges TestWindowEdges visits:
// the smallest valid one, round ones, one that does not divide a day, and
// long ones (where now/period in a Lua double is least roomy).
var edgePeriods = []time.Duration{
	time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 30 * 24 * time.Hour,
}

// edgeStep is one call at an instant near a window edge.
type edgeStep struct {
	now  int64
	hits int64
	// onEdge: the first call at the edge itself, where a fresh window
	// starts whole: its ResetAfter is exactly one period.
	onEdge bool
	// before: the first call one microsecond before the edge, where the
	// window has exactly 1us left.
	before bool
}

// edgeSteps visits three consecutive edges e = k*p after t0, each at e-1,
// e, e-1 again (the clock stepping back across the edge) and e+1, with
// hits that fill a window of 3 right at the edge, leave some room, and
// probe with 0.
func edgeSteps(p int64) []edgeStep {
	k := (t0 + p - 1) / p // the first edge at or after t0
	hits := [][4]int64{{1, 3, 1, 1}, {0, 2, 1, 0}, {1, 1, 0, 2}}
	var steps []edgeStep
	for i, h := range hits {
		e := (k + int64(i)) * p
		steps = append(steps,
			edgeStep{now: e - 1, hits: h[0], before: true},
			edgeStep{now: e, hits: h[1], onEdge: true},
			edgeStep{now: e - 1, hits: h[2]},
			edgeStep{now: e + 1, hits: h[3]},
		)
	}
	return steps
}

// TestWindowEdges: the instants where a window algorithm can be off by one
// are its edges, which the random differential tests never land on. Calls
// at k*P-1, k*P and k*P+1 us (and back across the edge) are decided by
// every script that decides fixed_window (single.lua alone and as a batch,
// decide.lua's fixed_window-only script and decide.lua whole) and by
// decide.lua's sliding_window, and must match ratelimit.Decide to the
// microsecond. At the edge itself a fresh window is whole (ResetAfter =
// period); a microsecond before, 1us is left.
func TestWindowEdges(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	fixed := func(p time.Duration) ratelimit.Limit { return limitFor(ratelimit.FixedWindow, 3, p) }
	cases := []struct {
		name   string
		limits func(p time.Duration) []ratelimit.Limit
		batch  bool // through single.lua's batch script
	}{
		{"single.lua", func(p time.Duration) []ratelimit.Limit { return []ratelimit.Limit{fixed(p)} }, false},
		{"single.lua batch", func(p time.Duration) []ratelimit.Limit { return []ratelimit.Limit{fixed(p)} }, true},
		{"decide.lua fixed_window", func(p time.Duration) []ratelimit.Limit {
			return []ratelimit.Limit{fixed(p), limitFor(ratelimit.FixedWindow, 5, 2*p)}
		}, false},
		{"decide.lua mixed", func(p time.Duration) []ratelimit.Limit {
			return []ratelimit.Limit{fixed(p), limitFor(ratelimit.GCRA, 4, p)}
		}, false},
		{"decide.lua sliding_window", func(p time.Duration) []ratelimit.Limit {
			return []ratelimit.Limit{limitFor(ratelimit.SlidingWindow, 3, p)}
		}, false},
	}
	for _, tc := range cases {
		for _, p := range edgePeriods {
			t.Run(fmt.Sprintf("%s/%s", tc.name, p), func(t *testing.T) {
				s, clk := fixedStore(t, c)
				ref := &reference{states: map[string]ratelimit.State{}}
				key, limits := randomKey(t), tc.limits(p)
				for i, st := range edgeSteps(p.Microseconds()) {
					clk.now = st.now
					reqs := []ratelimit.Request{{Key: key, Limits: limits, Hits: st.hits}}
					if tc.batch { // and a probe of the state it left, in the same call
						reqs = append(reqs, ratelimit.Request{Key: key, Limits: limits})
					}
					got := decideAt(t, s, reqs, st.now, tc.batch)
					for j, req := range reqs {
						if want := ref.decide(t, req, st.now); !equalDecision(got[j], want) {
							t.Fatalf("step %d (request %d) at edge%+dus, hits %d:\n redis %+v\n    go %+v",
								i, j, edgeOffset(st.now, p), req.Hits, got[j], want)
						}
					}
					if limits[0].Algorithm != ratelimit.FixedWindow {
						continue
					}
					if r := got[0].Results[0].ResetAfter; (st.onEdge && r != p) || (st.before && r != time.Microsecond) {
						t.Fatalf("step %d at edge%+dus: fixed_window resets after %s", i, edgeOffset(st.now, p), r)
					}
				}
			})
		}
	}
}

// decideAt decides reqs at now: through the store (one script call each;
// the test's requests go out alone), or together in one call of
// single.lua's batch script.
func decideAt(t *testing.T, s *Store, reqs []ratelimit.Request, now int64, batch bool) []ratelimit.Decision {
	t.Helper()
	if !batch {
		got, err := s.AllowBatch(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	var out []ratelimit.Decision
	for i, c := range runBatch(t, s, reqs, now) {
		if c.err != nil {
			t.Fatalf("request %d: %v", i, c.err)
		}
		out = append(out, c.dec[0])
	}
	return out
}

// edgeOffset is now's distance in us from the nearest window edge of p.
func edgeOffset(now int64, p time.Duration) int64 {
	pu := p.Microseconds()
	off := now % pu
	if off > pu/2 {
		off -= pu
	}
	return off
}

// TestSlidingLogClockStepsBackToAnAdmission: Redis's clock (a failed-over
// node's) steps back to the exact microsecond of an earlier admission
// whose older neighbours were pruned since. The hit admitted then must be
// logged beside the earlier one, not in its place: the log must hold every
// admission, or one more request than the limit gets through.
func TestSlidingLogClockStepsBackToAnAdmission(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s, clk := fixedStore(t, c)
	ref := &reference{states: map[string]ratelimit.State{}}
	key, p := randomKey(t), time.Second
	limits := []ratelimit.Limit{limitFor(ratelimit.SlidingLog, 3, p)}
	pu := p.Microseconds()
	steps := []struct {
		at      int64 // after t0, in us
		allowed bool
	}{
		{0, true},
		{1, true},
		{5, true},       // logged third
		{pu + 2, true},  // prunes the first two, logged second
		{5, true},       // the clock steps back: third again, at the third's instant
		{5, false},      // three in the window
		{pu + 2, false}, // still three
	}
	for i, st := range steps {
		clk.now = t0 + st.at
		req := ratelimit.Request{Key: key, Limits: limits, Hits: 1}
		want := ref.decide(t, req, clk.now)
		got := decideAt(t, s, []ratelimit.Request{req}, clk.now, false)[0]
		if got.Allowed != st.allowed || !equalDecision(got, want) {
			t.Fatalf("step %d at t0%+dus: allowed %v, want %v:\n redis %+v\n    go %+v", i, st.at, got.Allowed, st.allowed, got, want)
		}
	}
}
