package overlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestSlidingWindowDenialIsNotCachedPastAdmission: sliding_window's
// RetryAfter is not a lower bound on admission (the estimate floors the
// previous window's weight, so a request may pass as soon as that weight
// drops a little). The cache must not deny what the store would admit.
func TestSlidingWindowDenialIsNotCachedPastAdmission(t *testing.T) {
	t.Parallel()
	// Window start, so that elapsed = 0 in the window after the full one.
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	ctx := context.Background()
	l := ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Requests: 10, Period: time.Second}
	if res, err := s.Allow(ctx, "k", l, 10); err != nil || !res.Allowed {
		t.Fatalf("filling the window: %+v, %v", res, err)
	}
	clk.t = clk.t.Add(time.Second) // next window, elapsed 0: est = 10
	res, err := s.Allow(ctx, "k", l, 1)
	if err != nil || res.Allowed || res.RetryAfter <= time.Millisecond {
		t.Fatalf("at the next window's start: %+v, %v; want a denial with RetryAfter > 1ms", res, err)
	}
	// 1 ms later est = floor(10 * 0.999) = 9: the store admits one hit.
	clk.t = clk.t.Add(time.Millisecond)
	want, _, err := ratelimit.Decide(l, clk.t.UnixMicro(), ratelimit.State{Window: clk.t.Unix() - 1, Count: 10, Expires: clk.t.UnixMicro() + int64(time.Hour/time.Microsecond)}, 1)
	if err != nil || !want.Allowed {
		t.Fatalf("the algorithm itself: %+v, %v; want admitted", want, err)
	}
	res, err = s.Allow(ctx, "k", l, 1)
	if err != nil || !res.Allowed {
		t.Fatalf("1ms later: %+v, %v; want admitted as the store would", res, err)
	}
}
