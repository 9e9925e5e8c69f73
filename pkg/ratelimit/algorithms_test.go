package ratelimit

import (
	"testing"
	"time"
)

func TestGCRA(t *testing.T) {
	t.Parallel()
	// 10 per second: T = 100ms, B = 10, DVT = 1s.
	l := Limit{Algorithm: GCRA, Requests: 10, Period: time.Second}
	run(t, l, []step{
		{0, 1, ok(10, 9, 100*ms)},
		{0, 9, ok(10, 0, time.Second)},                 // the whole burst at once
		{0, 1, deny(10, 0, time.Second, 100*ms)},       // B+1-th: RetryAfter = T
		{0, 0, ok(10, 0, time.Second)},                 // hits 0 only looks
		{99 * ms, 1, deny(10, 0, 901*ms, 1*ms)},        // not yet
		{100 * ms, 1, ok(10, 0, time.Second)},          // one T later, one more
		{550 * ms, 0, ok(10, 4, 550*ms)},               // refill is smooth
		{550 * ms, 5, deny(10, 4, 550*ms, 50*ms)},      // 5 needs 50ms more
		{600 * ms, 5, ok(10, 0, time.Second)},          // ... and gets it
		{5 * time.Second, 11, deny(10, 10, 0, 100*ms)}, // hits > burst: never
		{5 * time.Second, 10, ok(10, 0, time.Second)},
	})
}

func TestGCRABurst(t *testing.T) {
	t.Parallel()
	// 1 per second with a burst of 5: Limit reports the burst.
	l := Limit{Requests: 1, Period: time.Second, Burst: 5}
	run(t, l, []step{
		{0, 5, ok(5, 0, 5*time.Second)},
		{0, 1, deny(5, 0, 5*time.Second, time.Second)},
		{2500 * ms, 0, ok(5, 2, 2500*ms)},
		{2500 * ms, 3, deny(5, 2, 2500*ms, 500*ms)},
		{3 * time.Second, 3, ok(5, 0, 5*time.Second)},
	})
	// A burst smaller than Requests: Limit is still Requests.
	l = Limit{Requests: 4, Period: time.Second, Burst: 2}
	run(t, l, []step{
		{0, 2, ok(4, 0, 500*ms)},
		{0, 1, deny(4, 0, 500*ms, 250*ms)},
	})
}

func TestGCRAEmissionIntervalFloors(t *testing.T) {
	t.Parallel()
	// T = floor(1s / 3) = 333333µs, DVT = 999999µs.
	l := Limit{Requests: 3, Period: time.Second}
	run(t, l, []step{
		{0, 3, ok(3, 0, 999999*us)},
		{0, 1, deny(3, 0, 999999*us, 333333*us)},
		{333333 * us, 1, ok(3, 0, 999999*us)},
	})
	// Period / Requests below 1µs: T is 1µs.
	l = Limit{Requests: 5000, Period: time.Millisecond, Burst: 2}
	run(t, l, []step{
		{0, 2, ok(5000, 0, 2*us)},
		{0, 1, deny(5000, 0, 2*us, 1*us)},
	})
}

func TestFixedWindow(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: FixedWindow, Requests: 3, Period: time.Second}
	run(t, l, []step{
		{0, 1, ok(3, 2, time.Second)},
		{100 * ms, 2, ok(3, 0, 900*ms)},
		{400 * ms, 1, deny(3, 0, 600*ms, 600*ms)},
		{400 * ms, 0, ok(3, 0, 600*ms)},
		{999 * ms, 1, deny(3, 0, 1*ms, 1*ms)},
		{time.Second, 3, ok(3, 0, time.Second)}, // new window: full again
		{1500 * ms, 4, deny(3, 0, 500*ms, 500*ms)},
		{2250 * ms, 4, deny(3, 3, 750*ms, 750*ms)}, // hits > R: same RetryAfter
		{2250 * ms, 0, ok(3, 3, 750*ms)},
		{2250 * ms, 2, ok(3, 1, 750*ms)},
		{2250 * ms, 2, deny(3, 1, 750*ms, 750*ms)},
	})
}

func TestSlidingWindow(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingWindow, Requests: 10, Period: time.Second}
	run(t, l, []step{
		{0, 6, ok(10, 4, 2*time.Second)},
		// Next window, 250ms in: est = floor(6*0.75) = 4.
		{1250 * ms, 0, ok(10, 6, 750*ms)},
		// 7 more: room appears when floor(6*(1s-e)/1s) <= 3: ceil(1s - 3*1s/6) - 250ms.
		{1250 * ms, 7, deny(10, 6, 750*ms, 250*ms)},
		{1500 * ms, 7, ok(10, 0, 1500*ms)},
		// est = 3+7: one more needs ceil(1s - 2*1s/6) - 500ms = 666667 - 500000.
		{1500 * ms, 1, deny(10, 0, 1500*ms, 166667*us)},
		{1500 * ms, 11, deny(10, 0, 1500*ms, 1500*ms)}, // hits > R: 2P - elapsed
		{1666667 * us, 1, ok(10, 1, 1333333*us)},       // est = floor(6*0.333333) + 7 = 8
		// Window 5 (prev empty): 8, then 3 denied: room in the next window
		// once floor(8*(1s-e)/1s) <= 7: 800ms + ceil(1s - 7*1s/8).
		{5 * time.Second, 8, ok(10, 2, 2*time.Second)},
		{5200 * ms, 3, deny(10, 2, 1800*ms, 925*ms)},
		{6125 * ms, 3, ok(10, 0, 1875*ms)},
		// Two windows later everything has gone.
		{8 * time.Second, 0, ok(10, 10, 0)},
	})
}

func TestSlidingWindowCurFullPrevPositive(t *testing.T) {
	t.Parallel()
	// cur alone exceeds R - h while prev > 0: the third RetryAfter branch.
	l := Limit{Algorithm: SlidingWindow, Requests: 10, Period: time.Second}
	run(t, l, []step{
		{0, 2, ok(10, 8, 2*time.Second)},
		{1500 * ms, 9, ok(10, 0, 1500*ms)}, // est = 1 + 0
		// est = 1 + 9 = 10; R-cur-h = -1: next window, 500ms away, once
		// 9*(1s-e)/1s <= 8: e = ceil(1s - 8*1s/9) = 111112µs.
		{1500 * ms, 2, deny(10, 0, 1500*ms, 611112*us)},
		{2111112 * us, 2, ok(10, 1, 1888888*us)}, // est = floor(7.999992) = 7
	})
}

func TestSlidingLog(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingLog, Requests: 3, Period: time.Second}
	run(t, l, []step{
		{0, 1, ok(3, 2, time.Second)},
		{200 * ms, 1, ok(3, 1, time.Second)},
		{400 * ms, 1, ok(3, 0, time.Second)},
		{500 * ms, 1, deny(3, 0, 900*ms, 500*ms)},      // oldest (0) ages out at 1s
		{500 * ms, 2, deny(3, 0, 900*ms, 700*ms)},      // two need the second one (200ms)
		{500 * ms, 4, deny(3, 0, 900*ms, time.Second)}, // hits > R: P
		{999 * ms, 0, ok(3, 0, 401*ms)},
		{time.Second, 1, ok(3, 0, time.Second)}, // entry at 0 dropped (ts <= now-P)
		{time.Second, 0, ok(3, 0, time.Second)},
		{5 * time.Second, 0, ok(3, 3, 0)}, // empty log
	})
}

func TestSlidingLogRuns(t *testing.T) {
	t.Parallel()
	// Several hits at one instant are one run; RetryAfter indexes hits.
	l := Limit{Algorithm: SlidingLog, Requests: 5, Period: time.Second}
	s := run(t, l, []step{
		{0, 3, ok(5, 2, time.Second)},
		{300 * ms, 2, ok(5, 0, time.Second)},
		{400 * ms, 3, deny(5, 0, 900*ms, 600*ms)}, // 3rd hit logged at 0
		{400 * ms, 4, deny(5, 0, 900*ms, 900*ms)}, // 4th hit logged at 300ms
		{1100 * ms, 3, ok(5, 0, time.Second)},
	})
	if s.Count != 5 || len(s.Log) != 2 {
		t.Errorf("log = %+v (count %d), want runs at 300ms and 1100ms holding 5", s.Log, s.Count)
	}
}

func TestSlidingLogClockStepsBack(t *testing.T) {
	t.Parallel()
	l := Limit{Algorithm: SlidingLog, Requests: 3, Period: time.Second}
	run(t, l, []step{
		{500 * ms, 1, ok(3, 2, time.Second)},
		{200 * ms, 1, ok(3, 1, 1300*ms)}, // inserted before the newer entry
		{300 * ms, 1, ok(3, 0, 1200*ms)},
		// Oldest is now 200ms: RetryAfter from the sorted log.
		{400 * ms, 1, deny(3, 0, 1100*ms, 800*ms)},
	})
}

func TestWindowsClockStepsBack(t *testing.T) {
	t.Parallel()
	// A step back into an earlier window keeps the later window's count.
	for _, a := range []Algorithm{FixedWindow, SlidingWindow} {
		l := Limit{Algorithm: a, Requests: 2, Period: time.Second}
		s := run(t, l, []step{{1500 * ms, 2, ok(2, 0, map[Algorithm]time.Duration{
			FixedWindow: 500 * ms, SlidingWindow: 1500 * ms}[a])}})
		res, _, _ := Decide(l, t0+900*ms.Microseconds(), s, 1)
		if res.Allowed {
			t.Errorf("%s: admitted after the clock stepped back: %+v", a, res)
		}
	}
}
