package ratelimit

import "math"

// slidingWindow estimates the hits of the rolling window ending at now from
// two fixed windows: all of the current one (cur) plus the previous one
// (prev) weighted by how much of it the rolling window still overlaps:
//
//	est = floor(prev * (P - elapsed) / P) + cur
//
// The float64 expressions are written in the same operation order as the Lua
// script's, and every product is wrapped in an explicit float64 conversion so
// the compiler cannot fuse it into an FMA: both sides round identically.
func slidingWindow(l *Limit, now int64, s *State, hits int64) Result {
	p, r := periodMicros(l), l.Requests
	now, w := windowOf(now, p, s)
	var cur, prev int64
	switch s.Window {
	case w:
		cur, prev = s.Count, s.Prev
	case w - 1:
		prev = s.Count
	}
	elapsed := now - w*p
	est := int64(math.Floor(float64(float64(prev)*float64(p-elapsed))/float64(p))) + cur

	res := Result{Limit: r}
	if hits > r-est {
		res.Remaining = max(r-est, 0)
		res.RetryAfter = micros(slidingWindowRetry(p, r, elapsed, cur, prev, hits))
		res.ResetAfter = micros(slidingWindowReset(p, elapsed, cur, prev))
		return res
	}
	cur += hits
	res.Allowed = true
	res.Remaining = r - est - hits
	res.ResetAfter = micros(slidingWindowReset(p, elapsed, cur, prev))
	*s = State{Window: w, Count: cur, Prev: prev, Expires: (w + 2) * p}
	return res
}

// slidingWindowRetry is the time until hits, denied now, would be admitted if
// nothing else arrived: later in this window, as prev's weight decays, when
// cur leaves room; otherwise in the next window, as cur's weight decays.
func slidingWindowRetry(p, r, elapsed, cur, prev, hits int64) int64 {
	fp := float64(p)
	switch {
	case hits > r:
		return 2*p - elapsed
	case r-cur-hits >= 0 && prev > 0:
		// Clamping at to >= 0 before the conversion changes nothing (elapsed
		// >= 0) but keeps a huge negative double out of int64.
		at := math.Max(math.Ceil(fp-float64(float64(r-cur-hits)*fp)/float64(prev)), 0)
		return max(int64(at)-elapsed, 1)
	case cur <= 0:
		// Unreachable (est + hits > r with hits <= r implies cur > 0);
		// kept so that no input divides by zero.
		return p - elapsed
	}
	at := math.Max(math.Ceil(fp-float64(float64(r-hits)*fp)/float64(cur)), 0)
	return (p - elapsed) + int64(at)
}

// slidingWindowReset is the time until both counters have no weight left.
func slidingWindowReset(p, elapsed, cur, prev int64) int64 {
	switch {
	case cur > 0:
		return 2*p - elapsed
	case prev > 0:
		return p - elapsed
	}
	return 0
}
