package authz

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// renewer extends a lease every TTL/3 while the upstream works, so that a
// slow but live request keeps its key; a lease whose holder died stops
// being renewed and expires.
type renewer struct {
	cancel context.CancelFunc
	done   chan struct{}
	lost   atomic.Bool
}

// startRenew starts renewing l until stop is called or ctx ends, counting
// its failures at site.
func (s *ExtProc) startRenew(ctx context.Context, l idempotency.Lease, at eventSite) *renewer {
	ctx, cancel := context.WithCancel(ctx)
	r := &renewer{cancel: cancel, done: make(chan struct{})}
	ticks, stopTicker := s.opts.ticker(max(l.TTLs.Lease/3, 1))
	go func() {
		defer close(r.done)
		defer stopTicker()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			}
			err := s.gate.renew(ctx, l)
			switch {
			case errors.Is(err, idempotency.ErrLeaseLost):
				r.lost.Store(true)
				s.gate.count(at, idempotency.EventLeaseLost)
				return
			case err != nil && ctx.Err() == nil:
				// Keep trying: the next tick may reach the store.
				s.gate.count(at, idempotency.EventStoreError)
			}
		}
	}()
	return r
}

// stop ends the renewals and waits for an in-flight one, so that no Renew
// runs after the lease is settled. It reports whether the lease was lost.
func (r *renewer) stop() bool {
	r.cancel()
	<-r.done
	return r.lost.Load()
}
