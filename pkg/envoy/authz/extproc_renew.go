package authz

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// renewer extends a lease (or an in-flight slot) every TTL/3 while the
// upstream works, so that a slow but live request keeps it; one whose
// holder died stops being renewed and expires.
type renewer struct {
	cancel context.CancelFunc
	done   chan struct{}
	lost   atomic.Bool
}

// startRenew starts renewing l until stop is called or ctx ends, counting
// its failures at site.
func (s *ExtProc) startRenew(ctx context.Context, l idempotency.Lease, at eventSite) *renewer {
	return s.startTicking(ctx, l.TTLs.Lease/3, func(ctx context.Context) bool {
		err := s.gate.renew(ctx, l)
		switch {
		case errors.Is(err, idempotency.ErrLeaseLost):
			s.gate.count(at, idempotency.EventLeaseLost)
			return false
		case err != nil && ctx.Err() == nil:
			// Keep trying: the next tick may reach the store.
			s.gate.count(at, idempotency.EventStoreError)
		}
		return true
	})
}

// startTicking calls tick every period until stop is called, ctx ends, or
// tick reports the held thing lost (false).
func (s *ExtProc) startTicking(ctx context.Context, period time.Duration, tick func(context.Context) bool) *renewer {
	ctx, cancel := context.WithCancel(ctx)
	r := &renewer{cancel: cancel, done: make(chan struct{})}
	ticks, stopTicker := s.opts.ticker(max(period, 1))
	go func() {
		defer close(r.done)
		defer stopTicker()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			}
			if !tick(ctx) {
				r.lost.Store(true)
				return
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
