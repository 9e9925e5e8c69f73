package allotment

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestExactPassesThrough: a batch without allotment limits reaches the inner
// store unchanged, in one call.
func TestExactPassesThrough(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := ratelimit.Limit{Requests: 2, Period: time.Second}
	reqs := []ratelimit.Request{{Key: "a", Limits: []ratelimit.Limit{l}, Hits: 1}, {Key: "b", Limits: []ratelimit.Limit{l}, Hits: 3}}
	d, err := g.s.AllowBatch(g.ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if calls := g.rec.taken(); len(calls) != 2 || calls[0].Hits != 1 || calls[1].Hits != 3 {
		t.Errorf("inner saw %+v, want the two requests as sent", calls)
	}
	if !d[0].Allowed || d[1].Allowed || d[0].Results[0].Remaining != 1 {
		t.Errorf("decisions %+v, want the inner store's", d)
	}
}

// TestHotKeyGrowsSlices: a burst of demand at one instant grows the lease to
// the maximum slice, and the next requests are local.
func TestHotKeyGrowsSlices(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 1600, time.Second) // max slice 100
	g.warm(t, "k", l)
	var sizes []int64
	for _, c := range g.rec.taken() {
		sizes = append(sizes, c.Hits)
	}
	if len(sizes) < 2 || sizes[0] != 1 || sizes[len(sizes)-1] != 100 {
		t.Fatalf("lease sizes %v, want 1 then the maximum 100", sizes)
	}
	for range 40 {
		g.allow(t, "k", 1, l)
	}
	if calls := g.rec.taken(); len(calls) != 0 {
		t.Errorf("40 requests within a slice asked the store %d times", len(calls))
	}
	if local := g.counter("extauthz_ratelimit_allotment_decisions_total", "source", "local"); local < 40 {
		t.Errorf("local decisions %v, want at least 40", local)
	}
}

// TestFixedWindowTokensLapseAtWindowEnd: tokens leased in a window are not
// used in the next one.
func TestFixedWindowTokensLapseAtWindowEnd(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 1600, time.Second)
	end := g.clk.Now().Truncate(time.Second).Add(time.Second)
	g.warm(t, "k", l)
	g.rec.taken()
	g.clk.Add(end.Sub(g.clk.Now()) - time.Microsecond) // the window's last instant
	g.allow(t, "k", 1, l)
	if calls := g.rec.taken(); len(calls) != 0 {
		t.Fatalf("at the window's last instant: %d leases, want the slice used", len(calls))
	}
	g.clk.Add(time.Microsecond) // the next window
	g.allow(t, "k", 1, l)
	if calls := g.rec.taken(); len(calls) == 0 {
		t.Fatal("in the next window the old window's tokens were used")
	}
	if lapsed := g.counter("extauthz_ratelimit_allotment_tokens_lapsed_total", "algorithm", "fixed_window"); lapsed <= 0 {
		t.Errorf("lapsed tokens %v, want the old slice counted", lapsed)
	}
}

// TestSlidingWindowLapse: a sliding_window lot lapses at the end of the
// window it was charged in (ResetAfter - Period after the lease).
func TestSlidingWindowLapse(t *testing.T) {
	t.Parallel()
	clk := newClock()
	g := newRig(t, clk, nil, Options{})
	l := allot(ratelimit.SlidingWindow, 1000, time.Second)
	clk.Add(300 * time.Millisecond)
	sent := clk.Now()
	res, err := g.mem.Allow(g.ctx, "k", ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Requests: 1000, Period: time.Second}, 5)
	if err != nil {
		t.Fatal(err)
	}
	o := newLot(l, 5, res, sent)
	windowEnd := sent.Truncate(time.Second).Add(time.Second)
	if !o.lapse.Equal(windowEnd) {
		t.Errorf("lapse %v, want the window's end %v (ResetAfter %v)", o.lapse, windowEnd, res.ResetAfter)
	}
	if o.available(windowEnd.Add(-time.Microsecond)) != 5 || o.available(windowEnd) != 0 {
		t.Error("tokens must be usable until the window's end and not from it")
	}
}

// TestGCRASlots: token k of a gcra lease may be used up to its slot
// newTAT - (n-k)*T and not after.
func TestGCRASlots(t *testing.T) {
	t.Parallel()
	clk := newClock()
	g := newRig(t, clk, nil, Options{})
	l := allot(ratelimit.GCRA, 1000, time.Second) // T = 1ms
	sent := clk.Now()
	res, err := g.mem.Allow(g.ctx, "k", ratelimit.Limit{Requests: 1000, Period: time.Second}, 4)
	if err != nil {
		t.Fatal(err)
	}
	o := newLot(l, 4, res, sent) // TAT was now: slots now, +1ms, +2ms, +3ms
	for _, tc := range []struct {
		after time.Duration
		next  int64
	}{{0, 0}, {time.Microsecond, 1}, {time.Millisecond, 1}, {time.Millisecond + 1, 2}, {3 * time.Millisecond, 3}, {3*time.Millisecond + 1, 4}} {
		if got := o.next(sent.Add(tc.after)); got != tc.next {
			t.Errorf("%v after the lease: next usable token %d, want %d", tc.after, got, tc.next)
		}
	}
	took, lapsed, from := o.take(1, sent.Add(2*time.Millisecond))
	if took != 1 || lapsed != 2 || from != 2 {
		t.Errorf("take at +2ms: took %d lapsed %d from %d, want 1, 2, 2", took, lapsed, from)
	}
}

// TestRefusalRemembered: a key over its limit asks the store once per retry
// period, and the client sees the exact refusal.
func TestRefusalRemembered(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 3, time.Minute)
	g.clk.Add(g.clk.Now().Truncate(time.Minute).Add(time.Minute).Sub(g.clk.Now())) // a window's start
	for range 3 {
		if !g.allow(t, "k", 1, l).Allowed {
			t.Fatal("denied within the limit")
		}
	}
	d := g.allow(t, "k", 1, l)
	if d.Allowed || d.Results[0].RetryAfter != time.Minute || d.Results[0].Remaining != 0 {
		t.Fatalf("over the limit: %+v, want denied, retry after the window", d)
	}
	g.rec.taken()
	g.clk.Add(10 * time.Second)
	d = g.allow(t, "k", 1, l)
	if calls := g.rec.taken(); len(calls) != 0 || d.Allowed || d.Results[0].RetryAfter != 50*time.Second {
		t.Errorf("remembered refusal: %d calls, %+v; want none, denied, retry 50s", len(calls), d)
	}
	g.clk.Add(50 * time.Second)
	if !g.allow(t, "k", 1, l).Allowed {
		t.Error("the next window was denied")
	}
}

// TestMixedLimitsAllOrNothing: an exact limit that denies gives the reserved
// allotment tokens back to the slice, and an allotment limit that denies
// leaves the exact limit uncharged.
func TestMixedLimitsAllOrNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	al := allot(ratelimit.FixedWindow, 1600, time.Hour)
	ex := ratelimit.Limit{Requests: 1, Period: time.Hour}
	g.warm(t, "k", al)
	if d := g.allow(t, "k", 1, al, ex); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	before := g.s.table.held(sliceID("k", al), g.clk.Now())
	if d := g.allow(t, "k", 1, al, ex); d.Allowed || d.Results[1].Allowed {
		t.Fatalf("second: %+v, want denied by the exact limit", d)
	}
	if after := g.s.table.held(sliceID("k", al), g.clk.Now()); after != before {
		t.Errorf("slice held %d before, %d after a request the exact limit denied; want the token back", before, after)
	}
	// An allotment limit that denies: the exact limit is not charged.
	tight := allot(ratelimit.FixedWindow, 1, time.Hour)
	ex2 := ratelimit.Limit{Requests: 5, Period: time.Hour, Algorithm: ratelimit.SlidingWindow}
	g.allow(t, "j", 1, tight)
	if d := g.allow(t, "j", 1, tight, ex2); d.Allowed || d.Results[0].Allowed || d.Results[1].Remaining != 5 {
		t.Errorf("allotment denial: %+v, want denied with the exact limit untouched (5 remaining)", d)
	}
	if got := g.shared(t, "j", ex2).Remaining; got != 5 {
		t.Errorf("exact limit charged: %d remaining, want 5", got)
	}
}

// TestChecksAskTheStore: Hits 0 charges nothing and reports the store's
// remaining plus the tokens this replica holds.
func TestChecksAskTheStore(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 1600, time.Hour)
	g.warm(t, "k", l)
	held := g.s.table.held(sliceID("k", l), g.clk.Now())
	shared := g.shared(t, "k", l).Remaining
	g.rec.taken()
	d := g.allow(t, "k", 0, l)
	if calls := g.rec.taken(); len(calls) != 1 || calls[0].Hits != 0 {
		t.Errorf("check: inner saw %+v, want one check", calls)
	}
	if d.Results[0].Remaining != shared+held || held == 0 {
		t.Errorf("check remaining %d, want shared %d + held %d", d.Results[0].Remaining, shared, held)
	}
	if g.s.table.held(sliceID("k", l), g.clk.Now()) != held {
		t.Error("a check took tokens")
	}
}

// TestPrefetchSingleFlight: while a lease is in flight no other starts, and
// requests that find the slice empty wait for it.
func TestPrefetchSingleFlight(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 160, time.Hour) // max slice 10
	g.warm(t, "k", l)
	g.rec.taken()
	g.rec.mu.Lock()
	gate := make(chan struct{})
	g.rec.gate = gate
	g.rec.mu.Unlock()
	open := sync.OnceFunc(func() { // also on failure, or Close would wait forever
		g.rec.mu.Lock()
		g.rec.gate = nil
		g.rec.mu.Unlock()
		close(gate)
	})
	defer open()
	// 40 requests use the slice down past half: a prefetch starts and
	// blocks at the gate, and those that find the slice empty wait for it.
	results := make(chan bool, 40)
	for range 40 {
		go func() {
			d, err := g.s.AllowBatch(g.ctx, []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: 1}})
			results <- err == nil && d[0].Allowed
		}()
	}
	e := g.s.table.lookup(sliceID("k", l))
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.mu.Lock()
		settled := len(results)+int(e.s.waiting) == 40 && g.rec.count() > 0
		e.mu.Unlock()
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the requests neither finished nor waited")
		}
		runtime.Gosched()
	}
	if calls := g.rec.count(); calls != 1 {
		t.Errorf("%d leases started while one was in flight, want 1", calls)
	}
	open()
	for range 40 {
		if !<-results {
			t.Error("a request was denied or failed within the limit")
		}
	}
}

// TestInnerError: a failed lease fails the request and leaves no tokens.
func TestInnerError(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	boom := errors.New("redis down")
	g.rec.err = boom
	l := allot(ratelimit.GCRA, 100, time.Second)
	if _, err := g.s.AllowBatch(g.ctx, []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: 1}}); !errors.Is(err, boom) {
		t.Fatalf("error %v, want the inner store's", err)
	}
	g.rec.err = nil
	if d := g.allow(t, "k", 1, l); !d.Allowed || d.Results[0].Remaining != 99 {
		t.Errorf("after recovery: %+v, want a fresh lease, 99 remaining", d)
	}
}

// TestResetDropsSlices: Reset forgets the local slice as well as the store.
func TestResetDropsSlices(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 1600, time.Hour)
	g.warm(t, "k", l)
	if g.s.table.held(sliceID("k", l), g.clk.Now()) == 0 {
		t.Fatal("no slice to reset")
	}
	if err := g.s.Reset(g.ctx, []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}}}); err != nil {
		t.Fatal(err)
	}
	if g.s.table.held(sliceID("k", l), g.clk.Now()) != 0 {
		t.Error("Reset left the slice")
	}
	if got := g.shared(t, "k", l).Remaining; got != 1600 {
		t.Errorf("shared state after Reset: %d remaining, want 1600", got)
	}
	if keys := g.s.StateKeys(ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{l}}); len(keys) != 1 {
		t.Errorf("StateKeys %v, want the inner store's one key", keys)
	}
}

// TestFleetNeverOverAdmits: two replicas over one store, random demand on a
// moving clock; every admission, replayed in time order through the exact
// algorithm, is admitted: the fleet never admits what exact would not.
func TestFleetNeverOverAdmits(t *testing.T) {
	t.Parallel()
	for _, l := range []ratelimit.Limit{
		allot(ratelimit.GCRA, 200, time.Second),
		{Algorithm: ratelimit.GCRA, Requests: 100, Period: time.Second, Burst: 40, Consistency: ratelimit.Allotment},
		{Algorithm: ratelimit.GCRA, Requests: 400, Period: time.Second, Burst: 16, Consistency: ratelimit.Allotment},
		allot(ratelimit.FixedWindow, 200, time.Second),
		allot(ratelimit.SlidingWindow, 200, time.Second),
	} {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			a := newRig(t, clk, nil, Options{})
			b := newRig(t, clk, a.mem, Options{})
			rng := rand.New(rand.NewPCG(1, 2))
			var ref ratelimit.State
			exact := l
			exact.Consistency = ""
			admitted, denied := 0, 0
			for range 20000 {
				// Mostly above the limit's rate, with pauses that refill it.
				step := time.Duration(rng.IntN(4000)) * time.Microsecond
				if rng.IntN(50) == 0 {
					step = time.Duration(rng.IntN(300)) * time.Millisecond
				}
				clk.Add(step)
				g := a
				if rng.IntN(3) == 0 {
					g = b
				}
				if !g.allow(t, "k", 1, l).Allowed {
					denied++
					continue
				}
				admitted++
				res, err := ref.Apply(exact, clk.Now().UnixMicro(), 1)
				if err != nil || !res.Allowed {
					t.Fatalf("admission %d at %v is one the exact %s would refuse", admitted, clk.Now(), l.Algorithm)
				}
			}
			if admitted == 0 || denied == 0 {
				t.Errorf("admitted %d, denied %d: the limit was not reached", admitted, denied)
			}
			t.Logf("admitted %d, denied %d", admitted, denied)
		})
	}
}

// TestRejectsWhatTheStoreWould: an invalid limit, or two limits sharing a
// state, fail before any lease.
func TestRejectsWhatTheStoreWould(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	for _, ls := range [][]ratelimit.Limit{
		{allot(ratelimit.GCRA, 0, time.Second)},
		{allot(ratelimit.FixedWindow, 5, time.Second), allot(ratelimit.FixedWindow, 9, time.Second)},
		{{Algorithm: ratelimit.SlidingLog, Requests: 5, Period: time.Second, Consistency: ratelimit.Allotment}},
	} {
		_, err := g.s.AllowBatch(g.ctx, []ratelimit.Request{{Key: "k", Limits: ls, Hits: 1}})
		if !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("%+v: %v, want ErrInvalidLimit", ls, err)
		}
	}
	if calls := g.rec.taken(); len(calls) != 0 {
		t.Errorf("invalid requests leased: %+v", calls)
	}
}

// TestHitsAboveOne: a request of h hits takes h tokens from the slice, and
// leases at least h when the slice holds fewer.
func TestHitsAboveOne(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.FixedWindow, 160, time.Hour) // max slice 10
	g.warm(t, "k", l)
	g.rec.taken()
	before := g.s.table.held(sliceID("k", l), g.clk.Now())
	g.allow(t, "k", 3, l)
	if calls := g.rec.taken(); len(calls) != 0 {
		t.Fatalf("3 hits with %d held: %d leases", before, len(calls))
	}
	if after := g.s.table.held(sliceID("k", l), g.clk.Now()); after != before-3 {
		t.Errorf("held %d then %d, want 3 taken", before, after)
	}
	d := g.allow(t, "k", 25, l) // more than a slice
	calls := g.rec.taken()
	if !d.Allowed || len(calls) == 0 || calls[0].Hits < 25 {
		t.Errorf("25 hits: %+v, leases %+v; want admitted by a lease of at least 25", d, calls)
	}
	if got := g.shared(t, "k", l).Remaining; got < 0 || got > 160-1-1-25-3 {
		t.Errorf("shared remaining %d: the hits were not charged", got)
	}
}

// TestMaxSlice: a slice is at most MaxFraction of the limit (of the burst
// for gcra), and at least one token.
func TestMaxSlice(t *testing.T) {
	t.Parallel()
	s := &Store{fraction: DefaultMaxFraction}
	for _, tc := range []struct {
		l    ratelimit.Limit
		want int64
	}{
		{allot(ratelimit.FixedWindow, 1600, time.Second), 100},
		{allot(ratelimit.SlidingWindow, 5, time.Second), 1},
		{allot(ratelimit.GCRA, 1600, time.Second), 100},
		{ratelimit.Limit{Requests: 1600, Period: time.Second, Burst: 160}, 10},
	} {
		if got := s.maxSlice(tc.l); got != tc.want {
			t.Errorf("%+v: max slice %d, want %d", tc.l, got, tc.want)
		}
	}
}

// TestMixedBatch: a batch of allotment, exact and check requests answers
// each in its place, the exact ones in one inner call.
func TestMixedBatch(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	al := allot(ratelimit.FixedWindow, 1600, time.Hour)
	ex := ratelimit.Limit{Requests: 7, Period: time.Hour}
	reqs := []ratelimit.Request{
		{Key: "a", Limits: []ratelimit.Limit{al}, Hits: 2},
		{Key: "b", Limits: []ratelimit.Limit{ex}, Hits: 1},
		{Key: "c", Limits: []ratelimit.Limit{al}, Hits: 1},
		{Key: "a", Limits: []ratelimit.Limit{al}, Hits: 0},
		{Key: "d", Limits: []ratelimit.Limit{ex}, Hits: 3},
	}
	d, err := g.s.AllowBatch(g.ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1598, 6, 1599, -1, 4} // -1: a check, depends on the order
	for i, w := range want {
		if !d[i].Allowed || (w >= 0 && d[i].Results[0].Remaining != w) {
			t.Errorf("request %d: %+v, want allowed with %d remaining", i, d[i], w)
		}
	}
	if r := d[3].Results[0].Remaining; r != 1600 && r != 1598 {
		t.Errorf("check on a: %d remaining, want 1600 or 1598", r)
	}
}

// TestSwitchingModesKeepsTheCount: exact and allotment decide on one state,
// so a limit moved from one mode to the other keeps its usage.
func TestSwitchingModesKeepsTheCount(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	for _, alg := range leasable {
		key := "k|" + string(alg)
		al := allot(alg, 5, time.Hour)
		ex := al
		ex.Consistency = ratelimit.Exact
		g.allow(t, key, 2, ex)
		if d := g.allow(t, key, 1, al); !d.Allowed || d.Results[0].Remaining != 2 {
			t.Errorf("%s: allotment after 2 exact hits: %+v, want 2 remaining", alg, d)
		}
		if d := g.allow(t, key, 1, ex); !d.Allowed || d.Results[0].Remaining != 1 {
			t.Errorf("%s: exact after 3 hits: %+v, want 1 remaining", alg, d)
		}
	}
}

// TestGCRALeaseCoversTheHorizon: a gcra key far below a high limit (T =
// 1µs, one request a millisecond). Its tokens may be used only until their
// slots, 1µs apart from now, so leases sized by demand alone (50 tokens in
// a 50ms horizon) would lapse before the next request and cost a round trip
// each; a lease covering the horizon in slot time lasts the horizon.
func TestGCRALeaseCoversTheHorizon(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.GCRA, 1_000_000, time.Second) // T = 1µs, max slice 62,500
	for range 3 {                                      // demand: one request a millisecond
		g.allow(t, "k", 1, l)
		g.clk.Add(time.Millisecond)
	}
	g.rec.taken()
	for range 40 {
		if d := g.allow(t, "k", 1, l); !d.Allowed {
			t.Fatalf("refused %+v far below the limit", d)
		}
		g.clk.Add(time.Millisecond)
	}
	if calls := g.rec.taken(); len(calls) > 2 {
		t.Errorf("40 requests over 40ms asked the store %d times, want at most 2 (one horizon's lease and its prefetch)", len(calls))
	}
}

// TestGCRAColdKeyLeasesNothing: a gcra key with less than one request per
// horizon (one a second) gets no slice and asks for its one hit each time,
// as exact does: a lease covering the horizon would lapse unused and only
// count as lapsed.
func TestGCRAColdKeyLeasesNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	l := allot(ratelimit.GCRA, 1_000_000, time.Second)
	for range 5 {
		g.allow(t, "k", 1, l)
		g.clk.Add(time.Second)
	}
	calls := g.rec.taken()
	for _, c := range calls {
		if c.Hits != 1 {
			t.Errorf("a key at one request a second asked for %d hits, want 1", c.Hits)
		}
	}
	if len(calls) != 5 || g.s.table.len() != 0 {
		t.Errorf("%d calls, %d slices; want 5 calls and no slice", len(calls), g.s.table.len())
	}
	if n := g.counter("extauthz_ratelimit_allotment_tokens_leased_total"); n != 0 {
		t.Errorf("%v tokens leased, want none", n)
	}
}
