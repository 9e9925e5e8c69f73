package allotment

import "github.com/extauthz/extauthz/pkg/ratelimit"

// failure is a lease that failed: the store's error, or a refusal its
// failure mode gave without the backend (a timeout, then the fail-closed
// denial or the fallback's refusal). The requests that waited for that
// lease share its outcome instead of each leasing in turn: on a store that
// holds every call until its timeout, k waiters would otherwise wait k
// timeouts, one after another, before the breaker opened.
type failure struct {
	lease chan struct{} // the failed lease's done channel; nil: none
	err   error
	res   ratelimit.Result
}

// noteFailure records the outcome of the lease done, when it failed.
// The caller holds the entry's lock.
func (s *slice) noteFailure(done chan struct{}, g grant, err error) {
	switch {
	case err != nil:
		s.failed = failure{lease: done, err: err}
	case !g.primary && g.n == 0:
		s.failed = failure{lease: done, res: g.res}
	}
}

// shared is the outcome, for a request of hits that waited for the lease
// lease, of that lease when it failed: its error, or its refusal when that
// left fewer than hits (the failure mode would refuse this request too).
// The caller holds the entry's lock.
func (s *slice) shared(lease chan struct{}, hits int64) (t taken, failed bool, err error) {
	f := s.failed
	switch {
	case f.lease == nil || f.lease != lease:
		return taken{}, false, nil
	case f.err != nil:
		return taken{}, true, f.err
	case f.res.Remaining < hits:
		return taken{res: f.res}, true, nil
	}
	return taken{}, false, nil
}
