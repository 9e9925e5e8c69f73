package failover

import "github.com/extauthz/extauthz/pkg/ratelimit"

// replicas is the number of fallbacks sharing each limit now: at least 1.
func (s *Store) replicas() int64 {
	if s.count == nil {
		return 1
	}
	return max(int64(s.count()), 1)
}

// share is l as one of n replicas' fallbacks holds it: Requests, and
// gcra's Burst when set, divided by n and rounded down, so that the n
// shares never add up to more than l; but at least 1, so that a limit
// smaller than the fleet still admits something (then the fleet may admit
// up to one per replica per window). Period is kept: a window is the same
// window on every replica, and gcra's rate divides with Requests.
func share(l ratelimit.Limit, n int64) ratelimit.Limit {
	l.Requests = max(l.Requests/n, 1)
	if l.Burst > 0 {
		l.Burst = max(l.Burst/n, 1)
	}
	return l
}

// shares returns reqs with every limit replaced by its share of n, or reqs
// itself when n is 1. The fallback keys its state by key, algorithm and
// period, so a share decides on the same state whatever n was before: a
// count that changes mid-window shrinks or grows what is left, and the
// state of a replica that was alone carries over.
func shares(reqs []ratelimit.Request, n int64) []ratelimit.Request {
	if n <= 1 {
		return reqs
	}
	out := make([]ratelimit.Request, len(reqs))
	for i, r := range reqs {
		ls := make([]ratelimit.Limit, len(r.Limits))
		for j, l := range r.Limits {
			ls[j] = share(l, n)
		}
		r.Limits = ls
		out[i] = r
	}
	return out
}
