package ratelimit

import "math"

// chargeAlways charges hits (negative: refunds) to *s whatever the outcome
// and reports the state after the charge (see ChargeAlways). *s is not
// expired. The Redis scripts' "always" branches mirror each function here.
func chargeAlways(l *Limit, now int64, s *State, hits int64) Result {
	switch l.Algorithm {
	case SlidingLog:
		return slidingLogCharge(l, now, s, hits)
	case SlidingWindow:
		return slidingWindowCharge(l, now, s, hits)
	case FixedWindow:
		return fixedWindowCharge(l, now, s, hits)
	}
	return gcraCharge(l, now, s, hits)
}

// fixedWindowCharge adds hits to the current window's count (never below
// 0). A count over the limit stays until the window ends: the next window
// starts empty, as for admitted hits.
func fixedWindowCharge(l *Limit, now int64, s *State, hits int64) Result {
	p, r := periodMicros(l), l.Requests
	now, w := windowOf(now, p, s)
	var c int64
	if s.Window == w {
		c = s.Count
	}
	c = max(addSat(c, hits), 0)
	end := (w + 1) * p
	res := Result{Limit: r, Allowed: c <= r, Remaining: max(r-c, 0), ResetAfter: micros(end - now)}
	if !res.Allowed {
		res.RetryAfter = micros(end - now)
	}
	*s = State{}
	if c > 0 {
		*s = State{Window: w, Count: c, Expires: end}
	}
	return res
}

// gcraCharge moves TAT by hits emission intervals: forwards past the
// tolerance when over (a debt that decays at the refill rate: one hit is
// admitted again once TAT + T - DVT <= now), backwards for a refund, never
// before now (the empty bucket).
func gcraCharge(l *Limit, now int64, s *State, hits int64) Result {
	r, b := l.Requests, l.Burst
	if b == 0 {
		b = r
	}
	t := max(periodMicros(l)/r, 1)
	dvt := mulSat(t, b)
	tat := max(s.TAT, now)
	var newTat int64
	if hits >= 0 {
		newTat = addSat(tat, mulSat(hits, t))
	} else {
		newTat = max(subSat(tat, mulSat(-max(hits, -math.MaxInt64), t)), now)
	}
	used := newTat - now
	res := Result{Allowed: used <= dvt, Limit: max(r, b), Remaining: max((dvt-used)/t, 0), ResetAfter: micros(used)}
	if !res.Allowed {
		res.RetryAfter = micros(subSat(addSat(newTat, t), dvt) - now)
	}
	*s = State{}
	if used > 0 {
		*s = State{TAT: newTat, Expires: newTat}
	}
	return res
}

// slidingWindowCharge adds hits to the current window's count; a refund
// takes from the current window first, then from the previous one (where
// the refunded charge may have landed), never below 0. An estimate over the
// limit decays with the weight of the windows, as admitted hits do.
func slidingWindowCharge(l *Limit, now int64, s *State, hits int64) Result {
	p, r := periodMicros(l), l.Requests
	now, w := windowOf(now, p, s)
	var cur, prev int64
	switch s.Window {
	case w:
		cur, prev = s.Count, s.Prev
	case w - 1:
		prev = s.Count
	}
	cur = addSat(cur, hits)
	if cur < 0 {
		prev, cur = max(prev+cur, 0), 0
	}
	elapsed := now - w*p
	est := int64(math.Floor(float64(float64(prev)*float64(p-elapsed))/float64(p))) + cur
	res := Result{Limit: r, Allowed: est <= r, Remaining: max(r-est, 0),
		ResetAfter: micros(slidingWindowReset(p, elapsed, cur, prev))}
	if !res.Allowed {
		res.RetryAfter = micros(slidingWindowRetry(p, r, elapsed, cur, prev, 1))
	}
	*s = State{}
	if cur > 0 || prev > 0 {
		*s = State{Window: w, Count: cur, Prev: prev, Expires: (w + 2) * p}
	}
	return res
}

// slidingLogCharge logs hits at now whatever the outcome, then keeps only
// the newest Requests hits: no decision ever looks further back (one hit is
// admitted once fewer than Requests are younger than the period), so the
// log stays bounded by the limit and decides exactly as the whole log
// would. A refund removes the newest hits (those most likely to be the
// refunded request's own reservation), never below the empty log.
func slidingLogCharge(l *Limit, now int64, s *State, hits int64) Result {
	p, r := periodMicros(l), l.Requests
	log, n := trimLog(s.Log, s.Count, now-p)
	switch {
	case hits > 0:
		log = appendLog(log, LogRun{At: now, N: hits})
		n = addSat(n, hits)
	case hits < 0:
		log, n = dropNewest(log, n, -max(hits, -math.MaxInt64))
	}
	res := Result{Limit: r, Allowed: n <= r, Remaining: max(r-n, 0)}
	if n > r {
		log, n = keepNewest(log, n, r)
		// The oldest kept hit is the one whose ageing out admits one more.
		res.RetryAfter = micros(log[0].At + p - now)
	}
	reset := logReset(log, now, p)
	res.ResetAfter = micros(reset)
	*s = State{}
	if n > 0 {
		*s = State{Log: log, Count: n, Expires: now + reset}
	}
	return res
}

// keepNewest drops the oldest hits of log (n in all) until keep are left.
// It returns a fresh slice when it must shorten a run, so that no stored
// state sharing log's memory changes.
func keepNewest(log []LogRun, n, keep int64) ([]LogRun, int64) {
	drop := n - keep
	i := 0
	for drop >= log[i].N {
		drop -= log[i].N
		i++
	}
	out := make([]LogRun, len(log)-i)
	copy(out, log[i:])
	out[0].N -= drop
	return out, keep
}

// dropNewest removes the newest k hits of log (n in all), all of them when
// k >= n, into a fresh slice as keepNewest does.
func dropNewest(log []LogRun, n, k int64) ([]LogRun, int64) {
	if k >= n {
		return nil, 0
	}
	j := len(log)
	left := k
	for left >= log[j-1].N {
		left -= log[j-1].N
		j--
	}
	out := make([]LogRun, j)
	copy(out, log[:j])
	out[j-1].N -= left
	return out, n - k
}
