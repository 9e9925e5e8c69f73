package ratelimit

// fixedWindow counts hits per window aligned to the Unix epoch: window
// w = floor(now/P) ends at (w+1)*P, when its count is forgotten. Up to 2R
// hits pass in a short span straddling an edge (the envoyproxy/ratelimit
// behaviour).
func fixedWindow(l *Limit, now int64, s *State, hits int64) Result {
	p, r := periodMicros(l), l.Requests
	now, w := windowOf(now, p, s)
	var c int64
	if s.Window == w {
		c = s.Count
	}
	end := (w + 1) * p
	res := Result{Limit: r, ResetAfter: micros(end - now)}
	if hits > r-c {
		res.Remaining = max(r-c, 0)
		res.RetryAfter = micros(end - now)
		return res
	}
	c += hits
	res.Allowed = true
	res.Remaining = r - c
	*s = State{Window: w, Count: c, Expires: end}
	return res
}

// windowOf returns now and the index of its window of p µs. When s belongs to
// a later window than now's (the clock stepped back), it returns the start of
// s's window instead: time is treated as not having passed, which keeps the
// stored count in force rather than forgetting it. s must not be expired.
func windowOf(now, p int64, s *State) (int64, int64) {
	w := floorDiv(now, p)
	if s.Expires != 0 && s.Window > w {
		return s.Window * p, s.Window
	}
	return now, w
}
