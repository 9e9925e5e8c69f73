package ratelimit

// slidingLog keeps one timestamp per admitted hit (here run-length encoded:
// hits admitted at the same instant share one LogRun) and admits hits when
// the entries younger than P leave room for them: an exact rolling window.
// Denied hits are not logged, so a client hammering a full log is unblocked
// as soon as its oldest admitted hits age out.
func slidingLog(l *Limit, now int64, s *State, hits int64) Result {
	p, r := periodMicros(l), l.Requests
	log, n := trimLog(s.Log, s.Count, now-p)
	res := Result{Limit: r}
	if hits > r || hits > r-n {
		res.Remaining = max(r-n, 0)
		res.ResetAfter = micros(logReset(log, now, p))
		if hits > r {
			res.RetryAfter = micros(p)
		} else {
			// The entry whose expiry frees enough room, oldest first.
			res.RetryAfter = micros(logAt(log, n+hits-r-1) + p - now)
		}
		return res
	}
	if hits > 0 {
		log = appendLog(log, LogRun{At: now, N: hits})
		n += hits
	}
	res.Allowed = true
	res.Remaining = r - n
	reset := logReset(log, now, p)
	res.ResetAfter = micros(reset)
	*s = State{Log: log, Count: n}
	if len(log) > 0 {
		s.Expires = now + reset
	}
	return res
}

// trimLog drops the runs at or before cut and returns the rest and their
// total. It reslices; it never writes to log.
func trimLog(log []LogRun, n, cut int64) ([]LogRun, int64) {
	i := 0
	for i < len(log) && log[i].At <= cut {
		n -= log[i].N
		i++
	}
	if i == len(log) {
		return nil, 0
	}
	return log[i:], n
}

// logAt returns the timestamp of the idx-th logged hit (0 = oldest).
func logAt(log []LogRun, idx int64) int64 {
	for _, run := range log {
		if idx < run.N {
			return run.At
		}
		idx -= run.N
	}
	return log[len(log)-1].At // unreachable: idx < total hits
}

// logReset is the time until the newest entry ages out, 0 for an empty log.
func logReset(log []LogRun, now, p int64) int64 {
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1].At + p - now
}

// appendLog adds run in timestamp order. Appending at the end may write past
// len(log) into shared capacity, which no stored state can see; a run that
// belongs earlier (the clock stepped back) is inserted into a fresh copy.
// Runs with equal timestamps are not merged, as that would write to an
// element a stored state can see.
func appendLog(log []LogRun, run LogRun) []LogRun {
	if len(log) == 0 || log[len(log)-1].At <= run.At {
		return append(log, run)
	}
	i := len(log)
	for i > 0 && log[i-1].At > run.At {
		i--
	}
	out := make([]LogRun, 0, len(log)+1)
	out = append(out, log[:i]...)
	out = append(out, run)
	return append(out, log[i:]...)
}
