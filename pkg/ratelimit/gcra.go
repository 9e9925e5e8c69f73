package ratelimit

// gcra decides hits with the Generic Cell Rate Algorithm. With B the burst
// (Requests when Burst is 0), T = floor(P/R) the emission interval and
// DVT = T*B the tolerance, hits are admitted when
// now >= max(TAT, now) + hits*T - DVT; then TAT moves to that sum + DVT.
// The state is one number and expires by itself at TAT.
func gcra(l *Limit, now int64, s *State, hits int64, res *Result) {
	r := l.Requests
	b := l.Burst
	if b == 0 {
		b = r
	}
	t := max(periodMicros(l)/r, 1)
	dvt := mulSat(t, b)

	tat := max(s.TAT, now)
	newTat := addSat(tat, mulSat(hits, t))
	allowAt := subSat(newTat, dvt)
	if now < allowAt {
		used := tat - now
		// Go's division truncates towards zero where Lua floors: they differ
		// only for negative quotients, which max clamps to 0 anyway.
		*res = Result{Limit: max(r, b), Remaining: max((dvt-used)/t, 0),
			ResetAfter: micros(used), RetryAfter: micros(allowAt - now)}
		return
	}
	used := newTat - now
	*res = Result{Allowed: true, Limit: max(r, b), Remaining: (dvt - used) / t, ResetAfter: micros(used)}
	*s = State{TAT: newTat, Expires: newTat}
}
