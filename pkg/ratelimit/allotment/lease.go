package allotment

import (
	"context"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// grant is the outcome of a lease.
type grant struct {
	n       int64            // tokens leased; 0 when refused
	res     ratelimit.Result // the inner store's Result for the last call
	sent    time.Time        // local instant read before that call was sent
	primary bool             // the inner store's backend answered
}

// lease asks the inner store for n hits of l on key in one atomic step. When
// refused, it asks again for what the Result says is left, or, when even
// that does not cover hits (the request waiting for the lease, 0 for a
// prefetch), for hits alone, so that the refusal the client sees is the
// one an exact decision of its hits gives.
func (s *Store) lease(ctx context.Context, key string, l ratelimit.Limit, n, hits int64, by ratelimit.Lease) (grant, error) {
	g, err := s.ask(ctx, key, l, n, by)
	if err != nil || g.n > 0 || !g.primary {
		return g, err // a refusal by the failure mode: asking again costs another timeout
	}
	var again int64
	switch rem := g.res.Remaining; {
	case rem >= max(hits, 1) && rem < n:
		again = rem
	case hits > 0 && hits < n:
		again = hits
	default:
		return g, nil
	}
	return s.ask(ctx, key, l, again, by)
}

// ask is one lease call, by the holder that holds by.Held tokens.
func (s *Store) ask(ctx context.Context, key string, l ratelimit.Limit, n int64, by ratelimit.Lease) (grant, error) {
	g := grant{sent: s.now()}
	d, primary, err := s.askInner(ctx, []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: n, Lease: by}})
	if err != nil {
		return g, err
	}
	g.res, g.primary = d[0].Results[0], primary
	if g.res.Allowed {
		g.n = n
		s.m.leased(l, n)
	}
	return g, nil
}

// leaseBy describes the slice sl as the holder of a lease it sends at now:
// its name in the ledgers, and the tokens it holds. Tokens reserved before
// and given back after are not counted then, so from now on they are not
// given back (part.report). The caller holds the entry's lock.
func (s *Store) leaseBy(sl *slice, now time.Time) ratelimit.Lease {
	if sl.holder == "" {
		sl.holder = s.newHolder()
	}
	sl.reports++
	return ratelimit.Lease{Holder: sl.holder, Held: sl.available(now)}
}

// install adds a granted lease to sl as its newest lot; the caller holds
// the entry's lock.
func (sl *slice) install(l ratelimit.Limit, g grant) *lot {
	o := newLot(l, g.n, g.res, g.sent)
	sl.lots = append(sl.lots, o)
	sl.last, sl.sent, sl.lastN, sl.leased, sl.primary = g.res, g.sent, g.n, true, g.primary
	sl.deniedUntil = time.Time{} // the store admits again
	return o
}

// refuse records a refused lease: a refusal by the backend is remembered
// until its RetryAfter for requests of hits or more.
func (sl *slice) refuse(g grant, hits int64) {
	if !g.primary || g.res.RetryAfter <= 0 || hits <= 0 {
		return
	}
	sl.denied, sl.deniedAt, sl.deniedUntil, sl.deniedHits = g.res, g.sent, g.sent.Add(g.res.RetryAfter), hits
}

// maybePrefetch starts one background lease for the next slice when the
// slice fell below half its last lease and the demand wants more than one
// token per horizon. The caller holds e's lock.
func (s *Store) maybePrefetch(e *entry, key string, now time.Time) {
	sl := &e.s
	if sl.leasing != nil || now.Before(sl.noPrefetchUntil) || sl.available(now)*2 >= sl.lastN {
		return
	}
	n := sl.size(s.horizon, s.maxSlice(sl.limit))
	if n < 2 {
		return // little demand: a token leased ahead would likely lapse
	}
	ch := make(chan struct{})
	l := sl.limit
	by := s.leaseBy(sl, now)
	if !s.goBackground(func() { s.prefetch(e, key, l, n, by, ch) }) {
		return
	}
	sl.sample(now)
	sl.leasing = ch
}

// prefetch leases n tokens for e in the background. A failure is dropped:
// the next request that finds the slice empty leases itself.
func (s *Store) prefetch(e *entry, key string, l ratelimit.Limit, n int64, by ratelimit.Lease, done chan struct{}) {
	g, err := s.lease(s.ctx, key, l, n, 0, by)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.s.leasing == done {
		e.s.leasing = nil
	}
	close(done)
	e.s.noteFailure(done, g, err)
	switch {
	case err != nil:
	case e.s.dropped: // reset while leasing: granted against the state the reset forgot
	case g.n > 0:
		e.s.install(l, g)
		s.m.lease(l, "prefetch")
	default:
		e.s.noPrefetchUntil = g.sent.Add(g.res.RetryAfter)
	}
}
