package ratelimit

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// cstep is one call of a charge table: hits charged in mode at t0+at.
type cstep struct {
	at   time.Duration
	mode ChargeMode
	hits int64
	want Result
}

// Shorthands for a table's modes.
const (
	never  = ChargeNever
	always = ChargeAlways
	admit  = ChargeIfAdmitted
)

// runCharge plays steps against one state, storing the next state as a
// store does: always for ChargeAlways, when admitted for ChargeIfAdmitted,
// never for ChargeNever.
func runCharge(t *testing.T, l Limit, steps []cstep) State {
	t.Helper()
	var s State
	for i, st := range steps {
		got, next, err := DecideCharge(l, t0+st.at.Microseconds(), s, st.hits, st.mode)
		if err != nil {
			t.Fatalf("step %d (+%v, %s %d): %v", i, st.at, st.mode, st.hits, err)
		}
		if got != st.want {
			t.Errorf("step %d (+%v, %s %d):\n got %+v\nwant %+v", i, st.at, st.mode, st.hits, got, st.want)
		}
		if st.mode == ChargeAlways || st.mode == ChargeIfAdmitted && got.Allowed {
			s = next
		}
	}
	return s
}

// A budget of 1000 a minute charged 300 after each request: four requests
// pass the check, the fourth charge takes the count to 1200, and the check
// refuses until the next window, which starts empty.
func TestFixedWindowChargesAccumulateOverTheLimit(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: FixedWindow, Requests: 1000, Period: time.Minute}
	s := 1 * time.Second
	var steps []cstep
	for i := range 4 {
		at := time.Duration(i+1) * s
		left := int64(1000 - 300*i)
		steps = append(steps, cstep{at, never, 1, ok(1000, left-1, time.Minute-at)})
		if i < 3 {
			steps = append(steps, cstep{at, always, 300, ok(1000, left-300, time.Minute-at)})
		}
	}
	steps = append(steps,
		cstep{4 * s, always, 300, deny(1000, 0, 56*s, 56*s)},      // 1200 counted
		cstep{5 * s, never, 1, deny(1000, 0, 55*s, 55*s)},         // refused: spent
		cstep{5 * s, admit, 1, deny(1000, 0, 55*s, 55*s)},         // a counted request too
		cstep{5 * s, always, 0, deny(1000, 0, 55*s, 55*s)},        // a 0 charge reads 1200
		cstep{5 * s, always, -150, deny(1000, 0, 55*s, 55*s)},     // 1050: still over
		cstep{5 * s, always, -100, ok(1000, 50, 55*s)},            // 950
		cstep{60 * s, never, 1, ok(1000, 999, time.Minute)},       // the next window is empty
		cstep{60 * s, always, -5000, ok(1000, 1000, time.Minute)}, // never below empty
		cstep{60 * s, always, 10, ok(1000, 990, time.Minute)},
	)
	runCharge(t, l, steps)
}

// ChargeNever decides as a charge would and writes nothing.
func TestChargeNeverWritesNothing(t *testing.T) {
	t.Parallel()
	for _, alg := range Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := Limit{Algorithm: alg, Requests: 3, Period: time.Second}
			var s State
			for i := range 10 {
				res, next, err := DecideCharge(l, t0+int64(i), s, 2, ChargeNever)
				if err != nil || !res.Allowed || res.Remaining != 1 {
					t.Fatalf("check %d: %+v, %v; want admitted with 1 remaining", i, res, err)
				}
				s = next // a store would not, and it must not matter
			}
			res, _, _ := DecideCharge(l, t0+10, s, 4, ChargeNever)
			if res.Allowed {
				t.Errorf("4 hits on a limit of 3: %+v, want denied", res)
			}
		})
	}
}

// A refund never takes a state below empty: after it, the limit admits
// exactly Requests again, on every algorithm.
func TestRefundNeverBelowEmpty(t *testing.T) {
	t.Parallel()
	for _, alg := range Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := Limit{Algorithm: alg, Requests: 10, Period: time.Second}
			var s State
			steps := []struct {
				hits int64
				rem  int64
			}{{4, 6}, {-100, 10}, {10, 0}, {-1, 1}, {-100, 10}, {3, 7}}
			for i, st := range steps {
				res, next, err := DecideCharge(l, t0, s, st.hits, ChargeAlways)
				if err != nil || res.Remaining != st.rem {
					t.Fatalf("step %d (%d): %+v, %v; want %d remaining", i, st.hits, res, err, st.rem)
				}
				s = next
			}
		})
	}
}

// gcra: a charge beyond the burst is a debt that decays at the refill rate.
// 10 a second (T = 100ms), burst 10: charging 15 at once leaves TAT 1.5s
// ahead, 0.5s beyond the tolerance; one hit is admitted again at +600ms.
func TestGCRADebtDecaysAtTheRate(t *testing.T) {
	t.Parallel()
	l := Limit{Requests: 10, Period: time.Second}
	runCharge(t, l, []cstep{
		{0, always, 15, deny(10, 0, 1500*ms, 600*ms)},
		{500 * ms, never, 1, deny(10, 0, 1000*ms, 100*ms)},
		{599 * ms, admit, 1, deny(10, 0, 901*ms, 1*ms)},
		{600 * ms, never, 1, ok(10, 0, 1000*ms)},
		{1100 * ms, never, 1, ok(10, 5, 500*ms)},
		{1100 * ms, always, -3, ok(10, 9, 100*ms)},
		{1100 * ms, always, -3, ok(10, 10, 0)}, // never below empty: TAT is now
		{1100 * ms, always, 10, ok(10, 0, time.Second)},
	})
}

// sliding_window: an over-limit count weighs on the next window as an
// admitted one does, and a refund takes from the previous window when the
// current one has nothing left to give.
func TestSlidingWindowCharge(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingWindow, Requests: 10, Period: time.Second}
	runCharge(t, l, []cstep{
		{0, always, 15, deny(10, 0, 2*time.Second, 1400*ms)},
		// At +1.4s the previous window weighs floor(15 * 0.6) = 9.
		{1400 * ms, never, 1, ok(10, 0, 1600*ms)},
		{1400 * ms, always, 2, deny(10, 0, 1600*ms, 133334*us)}, // prev weighs 6 at +533.334ms
		// -7: 2 from this window, 5 from the previous one (15 → 10: weighs 6).
		{1400 * ms, always, -7, ok(10, 4, 600*ms)},
		{1400 * ms, always, -100, ok(10, 10, 0)},
	})
}

// sliding_log: forced charges are logged whatever the outcome, the log
// keeps its newest Requests hits, and a refund removes the newest.
func TestSlidingLogCharge(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingLog, Requests: 5, Period: time.Second}
	s := runCharge(t, l, []cstep{
		{0, always, 3, ok(5, 2, time.Second)},
		// 7 logged: over; the newest 5 are kept (1 at 0, 4 at +100ms).
		{100 * ms, always, 4, deny(5, 0, time.Second, 900*ms)},
		{999 * ms, never, 1, deny(5, 0, 101*ms, 1*ms)},
		{1000 * ms, never, 1, ok(5, 0, time.Second)},
		{1000 * ms, always, -3, ok(5, 4, 100*ms)},
	})
	// The hits beyond the newest 5 were not kept: a refund after an
	// over-limit charge counts from a full log (docs/algorithms.md).
	runCharge(t, l, []cstep{
		{0, always, 8, deny(5, 0, time.Second, time.Second)},
		{0, always, -2, ok(5, 2, time.Second)},
	})
	if s.Count != 1 || len(s.Log) != 1 || s.Log[0] != (LogRun{At: t0 + 100_000, N: 1}) {
		t.Errorf("log after the refund: %+v, want 1 hit at +100ms", s)
	}
}

// The log of a sliding_log limit never holds more than Requests hits,
// however much is charged: its memory stays bounded by the limit.
func TestSlidingLogChargeKeepsTheLogBounded(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingLog, Requests: 3, Period: time.Second}
	var s State
	for i := range 20 {
		_, next, err := DecideCharge(l, t0+int64(i)*1000, s, 2, ChargeAlways)
		if err != nil {
			t.Fatal(err)
		}
		s = next
		if s.Count > 3 {
			t.Fatalf("charge %d: %d hits logged, want at most 3", i, s.Count)
		}
	}
	var n int64
	for _, r := range s.Log {
		n += r.N
	}
	if n != s.Count || s.Log[0] != (LogRun{At: t0 + 18_000, N: 1}) {
		t.Errorf("log %+v (count %d), want the newest 3 hits", s.Log, s.Count)
	}
}

// Shared runs are never written: keeping and dropping hits copies.
func TestSlidingLogChargeLeavesTheInputAlone(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingLog, Requests: 3, Period: time.Second}
	in := State{Log: []LogRun{{At: t0, N: 2}, {At: t0 + 1, N: 1}}, Count: 3, Expires: t0 + 2_000_000}
	for _, hits := range []int64{2, -2} {
		DecideCharge(l, t0+2, in, hits, ChargeAlways)
		if in.Log[0].N != 2 || in.Log[1].N != 1 {
			t.Fatalf("charging %d changed the input log: %+v", hits, in.Log)
		}
	}
}

func TestCheckChargeRejectsBadModesAndRefunds(t *testing.T) {
	t.Parallel()
	l := Limit{Requests: 1, Period: time.Second}
	for _, c := range []struct {
		hits int64
		mode ChargeMode
		bad  bool
	}{
		{-1, ChargeIfAdmitted, true},
		{-1, ChargeNever, true},
		{-1, ChargeAlways, false},
		{1, ChargeMode(4), true},
		{-1, ChargeReserve, true},
		{0, ChargeReserve, false},
		{0, ChargeNever, false},
	} {
		_, _, err := DecideCharge(l, t0, State{}, c.hits, c.mode)
		if got := errors.Is(err, ErrInvalidHits); got != c.bad {
			t.Errorf("%d hits, %s: err %v, want invalid %v", c.hits, c.mode, err, c.bad)
		}
	}
}

// A charge that takes fixed_window's count exactly to the limit leaves it
// within (Remaining 0), one more is over: the boundary of "spent".
func TestFixedWindowChargeToTheLimitIsWithin(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: FixedWindow, Requests: 1000, Period: time.Minute}
	s := time.Second
	runCharge(t, l, []cstep{
		{s, always, 1000, ok(1000, 0, 59*s)},
		{s, always, 0, ok(1000, 0, 59*s)},
		{s, always, 1, deny(1000, 0, 59*s, 59*s)},
	})
}

// ChargeReserve admits on one hit and charges the whole reservation in the
// same step: a budget of 1000 reserving 300 at a time admits four (the
// fourth with 100 left, ending over by one reservation), then refuses
// without charging, on every algorithm.
func TestChargeReserveAdmitsOnOneHitAndChargesAll(t *testing.T) {
	t.Parallel()
	for _, alg := range Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := Limit{Algorithm: alg, Requests: 1000, Period: time.Minute}
			var s State
			for i, want := range []int64{700, 400, 100, 0} {
				res, next, err := DecideCharge(l, t0, s, 300, ChargeReserve)
				if err != nil || !res.Allowed || res.Remaining != want || res.RetryAfter != 0 {
					t.Fatalf("reservation %d: %+v, %v; want admitted with %d remaining", i+1, res, err, want)
				}
				s = next
			}
			res, next, err := DecideCharge(l, t0, s, 300, ChargeReserve)
			check, _, _ := DecideCharge(l, t0, s, 1, ChargeNever)
			if err != nil || res.Allowed || res != check {
				t.Errorf("fifth reservation: %+v, %v; want the one-hit check's refusal %+v", res, err, check)
			}
			if !reflect.DeepEqual(next, s) {
				t.Errorf("a refused reservation changed the state: %+v, was %+v", next, s)
			}
		})
	}
}

// A reservation of 0 hits is a one-hit check that writes nothing.
func TestChargeReserveOfNothingIsACheck(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: FixedWindow, Requests: 1, Period: time.Minute}
	res, next, err := DecideCharge(l, t0, State{}, 0, ChargeReserve)
	if err != nil || !res.Allowed || !reflect.DeepEqual(next, State{}) {
		t.Errorf("%+v %+v %v; want admitted and nothing written", res, next, err)
	}
}
