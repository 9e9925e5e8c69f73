package ratelimit

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// t0 is a fixed instant aligned to a day (2023-11-15T00:00:00Z), hence to
// every window used in these tests. Instants are t0 + offset.
const t0 = int64(1_700_006_400_000_000)

const (
	ms = time.Millisecond
	us = time.Microsecond
)

// step is one call of a decision table: hits at t0+at, and what it must give.
type step struct {
	at   time.Duration
	hits int64
	want Result
}

// ok and deny build expected Results tersely: remaining, reset after and,
// for deny, retry after.
func ok(limit, remaining int64, reset time.Duration) Result {
	return Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func deny(limit, remaining int64, reset, retry time.Duration) Result {
	return Result{Limit: limit, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

// run plays steps in order against one state, storing the next state
// whenever a step is admitted with hits > 0, as a store does.
func run(t *testing.T, l Limit, steps []step) State {
	t.Helper()
	var s State
	for i, st := range steps {
		got, next, err := Decide(l, t0+st.at.Microseconds(), s, st.hits)
		if err != nil {
			t.Fatalf("step %d (+%v, hits %d): %v", i, st.at, st.hits, err)
		}
		if got != st.want {
			t.Errorf("step %d (+%v, hits %d):\n got %+v\nwant %+v", i, st.at, st.hits, got, st.want)
		}
		if got.Allowed && st.hits > 0 {
			s = next
		}
	}
	return s
}

func TestDecideRejectsBadInput(t *testing.T) {
	t.Parallel()
	good := Limit{Requests: 1, Period: time.Second}
	bad := []Limit{
		{Requests: 0, Period: time.Second},
		{Requests: 1, Period: 0},
		{Requests: 1, Period: 1500 * us},
		{Requests: 1, Period: time.Second, Burst: -1},
		{Algorithm: "leaky", Requests: 1, Period: time.Second},
	}
	for _, l := range bad {
		if _, _, err := Decide(l, t0, State{}, 1); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Decide(%+v) error = %v, want ErrInvalidLimit", l, err)
		}
	}
	for _, a := range Algorithms() {
		good.Algorithm = a
		if _, _, err := Decide(good, t0, State{}, -1); !errors.Is(err, ErrInvalidHits) {
			t.Errorf("%s: hits -1 error = %v, want ErrInvalidHits", a, err)
		}
	}
}

// TestHitsBeyondRangeNeverWrap drives every algorithm with extreme values:
// answers must stay denials with non-negative, saturated durations.
func TestHitsBeyondRangeNeverWrap(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms() {
		most := int64(math.MaxInt64) // the largest valid Requests
		if a == SlidingLog {
			most = MaxSlidingLogRequests
		}
		for _, l := range []Limit{
			{Algorithm: a, Requests: 1, Period: time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond},
			{Algorithm: a, Requests: most, Period: time.Millisecond, Burst: math.MaxInt64},
		} {
			for _, hits := range []int64{math.MaxInt64, math.MaxInt64 / 2} {
				res, _, err := Decide(l, t0, State{}, hits)
				if err != nil {
					t.Fatalf("%s: %v", a, err)
				}
				if res.RetryAfter < 0 || res.ResetAfter < 0 || res.Remaining < 0 {
					t.Errorf("%s %+v hits %d: negative field in %+v", a, l, hits, res)
				}
				if res.Allowed && hits > l.Requests && (a != GCRA || hits > l.Burst) {
					t.Errorf("%s %+v hits %d admitted", a, l, hits)
				}
			}
		}
	}
}

// TestExpiredStateIsEmpty checks the contract stores rely on: a State past
// its Expires decides exactly like the zero State.
func TestExpiredStateIsEmpty(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms() {
		l := Limit{Algorithm: a, Requests: 5, Period: time.Second}
		_, s, err := Decide(l, t0+123, State{}, 3)
		if err != nil {
			t.Fatal(err)
		}
		if s.Expires <= t0+123 {
			t.Fatalf("%s: charged state expires at %d, not after now", a, s.Expires)
		}
		later := s.Expires
		got, _, _ := Decide(l, later, s, 1)
		want, _, _ := Decide(l, later, State{}, 1)
		if got != want {
			t.Errorf("%s at Expires: got %+v, empty state gives %+v", a, got, want)
		}
		// One microsecond earlier the state must still count.
		before, _, _ := Decide(l, later-1, s, 0)
		if before == want {
			t.Errorf("%s: state already empty 1µs before Expires: %+v", a, before)
		}
	}
}

// TestBoundaryBurst: R hits just before a window edge and R just after.
// fixed_window admits all 2R; sliding_log and gcra admit R (plus at most
// what 1µs refills); sliding_window admits fewer than 2R.
func TestBoundaryBurst(t *testing.T) {
	t.Parallel()
	const r = 100
	edge := t0 + time.Minute.Microseconds()
	want := map[Algorithm]func(n int64) bool{
		FixedWindow:   func(n int64) bool { return n == 2*r },
		SlidingLog:    func(n int64) bool { return n == r },
		GCRA:          func(n int64) bool { return n == r },
		SlidingWindow: func(n int64) bool { return n >= r && n < 2*r },
	}
	for _, a := range Algorithms() {
		l := Limit{Algorithm: a, Requests: r, Period: time.Minute}
		var s State
		var admitted int64
		for i := 0; i < 2*r; i++ {
			now := edge - 1
			if i >= r {
				now = edge
			}
			res, next, err := Decide(l, now, s, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
				s = next
			}
		}
		if !want[a](admitted) {
			t.Errorf("%s admitted %d of %d across the edge", a, admitted, 2*r)
		}
	}
}

func TestMicrosSaturates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   int64
		want time.Duration
	}{
		{-5, 0}, {0, 0}, {1, us}, {math.MaxInt64, math.MaxInt64},
		{math.MaxInt64/1000 + 1, math.MaxInt64},
	} {
		if got := micros(c.in); got != c.want {
			t.Errorf("micros(%d) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := floorDiv(-1, 1000); got != -1 {
		t.Errorf("floorDiv(-1, 1000) = %d, want -1", got)
	}
}

// TestApplyMatchesDecide: Apply in place gives the Results and states that
// Decide plus "store when admitted with hits > 0" gives.
func TestApplyMatchesDecide(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	for _, a := range Algorithms() {
		l := Limit{Algorithm: a, Requests: 6, Period: 250 * ms, Burst: 4}
		var viaDecide, viaApply State
		now := t0
		for i := range 3000 {
			now += rng.Int64N(60_000)
			hits := rng.Int64N(4)
			want, next, err := Decide(l, now, viaDecide, hits)
			if err != nil {
				t.Fatal(err)
			}
			if want.Allowed && hits > 0 {
				viaDecide = next
			}
			before := viaApply
			got, err := viaApply.Apply(l, now, hits)
			if err != nil || got != want {
				t.Fatalf("%s step %d: Apply %+v, %v; Decide %+v", a, i, got, err, want)
			}
			if (!got.Allowed || hits == 0) && before.Expires > now && !reflect.DeepEqual(before, viaApply) {
				t.Fatalf("%s step %d: Apply wrote without charging: %+v -> %+v", a, i, before, viaApply)
			}
		}
	}
	var s State
	if _, err := s.Apply(Limit{}, t0, 1); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("Apply with a zero Limit: %v", err)
	}
}

func TestSaturatingArithmetic(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ a, b, mul, add int64 }{
		{0, 5, 0, 5},
		{3, 7, 21, 10},
		{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 2, math.MaxInt64, math.MaxInt64},
		{1 << 32, 1 << 30, 1 << 62, 1<<32 + 1<<30},
		{1 << 32, 1 << 31, math.MaxInt64, 1<<32 + 1<<31}, // exactly 2^63
		{1 << 32, 1 << 32, math.MaxInt64, 1<<32 + 1<<32},
	} {
		if got := mulSat(c.a, c.b); got != c.mul {
			t.Errorf("mulSat(%d, %d) = %d, want %d", c.a, c.b, got, c.mul)
		}
		if got := addSat(c.a, c.b); got != c.add {
			t.Errorf("addSat(%d, %d) = %d, want %d", c.a, c.b, got, c.add)
		}
	}
	if got := subSat(math.MinInt64+1, 5); got != math.MinInt64 {
		t.Errorf("subSat underflow = %d", got)
	}
	if got := subSat(0, math.MinInt64); got != math.MaxInt64 {
		t.Errorf("subSat(0, MinInt64) = %d", got)
	}
}
