// Package failover gives a lockout.Store on Redis the failure mode of the
// rate limits (package ratelimit/failover): a circuit breaker per Redis
// node (internal/breaker, the settings every store guard takes) stops
// calling a node that keeps failing, so that while Redis is down a charged
// limit's lockout is decided at once instead of after the store timeout,
// and what answers meanwhile is the mode's:
//
//   - Open: an in-process memory store (lockout/memstore) decides. It holds
//     the lockouts this replica saw in Redis (each Locked that found a key
//     locked, each Trip), so those still hold during the outage, and takes
//     the trips of the outage, so a key that spends its budget meanwhile is
//     locked on this replica. What it cannot know: lockouts other replicas
//     set in Redis that this one never saw.
//   - Closed: Locked answers every key locked for DeniedRetryAfter (the
//     request is refused, as closed mode denies every rate limit), and a
//     Trip fails.
//
// Once Redis answers again it alone decides: the lockouts the fallback took
// during the outage are not copied to it.
//
// Only backend failures go to the failure mode: an invalid Policy is
// returned as such, and a caller that cancelled gets its context error.
package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/internal/breaker"
	ratefailover "github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid lockout failover options")

// DefaultDeniedRetryAfter is the lockout Closed mode answers, the
// rate-limit failover's RetryAfter of its denials.
const DefaultDeniedRetryAfter = ratefailover.DefaultDeniedRetryAfter

// Options configures a Store. The breaker's settings (FailureThreshold,
// default 5; CoolDown, default 1s; Now, OnChange, OnError) are every store
// guard's (breaker.StoreOptions); Registerer, required, receives
// extauthz_lockout_store_errors_total, extauthz_lockout_store_circuit_open
// and extauthz_lockout_fallback_decisions_total.
type Options struct {
	breaker.StoreOptions
	// Mode is ratelimit/failover's Open (default) or Closed.
	Mode ratefailover.Mode
	// Fallback decides in Open mode while Redis fails; required then. The
	// Store closes it.
	Fallback *memstore.Store
	// DeniedRetryAfter is how long Closed mode reports every key locked
	// while Redis fails; default 1s.
	DeniedRetryAfter time.Duration
}

// Router is implemented by primaries spread over several Redis nodes (a
// Redis Cluster): the Store then keeps one circuit breaker per node.
type Router interface {
	// Node names the node that holds key's lockout now; "" when unknown.
	Node(ctx context.Context, key string) string
	breaker.Cluster
}

// Store is a lockout.Store that answers by its failure mode while its
// primary fails. It owns the primary and the fallback: Close closes both.
type Store struct {
	primary  lockout.Store
	router   Router // nil: one node, ""
	g        *breaker.Guard
	mode     ratefailover.Mode
	fallback *memstore.Store // nil in Closed mode
	retry    time.Duration
	m        metrics
}

var _ lockout.Store = (*Store)(nil)

// New wraps primary. It does not contact the primary.
func New(primary lockout.Store, o Options) (*Store, error) {
	o, err := withDefaults(primary, o)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer, o.Mode)
	if err != nil {
		return nil, err
	}
	s := &Store{primary: primary, mode: o.Mode, fallback: o.Fallback, retry: o.DeniedRetryAfter, m: m}
	s.router, _ = primary.(Router)
	s.g, err = breaker.NewStoreGuard(o.StoreOptions, breaker.StoreHooks{
		Cluster: s.router, Neutral: neutral, Open: m.circuitOpen, Errors: m.errors,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return s, nil
}

func withDefaults(primary lockout.Store, o Options) (Options, error) {
	var err error
	if o.Mode, err = ratefailover.ParseMode(string(o.Mode)); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	switch {
	case primary == nil:
		return o, fmt.Errorf("%w: nil primary store", ErrInvalidOptions)
	case o.Mode == ratefailover.Open && o.Fallback == nil:
		return o, fmt.Errorf("%w: Open mode needs a Fallback store", ErrInvalidOptions)
	case o.DeniedRetryAfter < 0:
		return o, fmt.Errorf("%w: negative DeniedRetryAfter", ErrInvalidOptions)
	}
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o.DeniedRetryAfter == 0 {
		o.DeniedRetryAfter = DefaultDeniedRetryAfter
	}
	return o, nil
}

// Locked asks the primary unless key's node's circuit is open; on a
// backend failure it answers by the failure mode.
func (s *Store) Locked(ctx context.Context, key string) (time.Duration, error) {
	var left time.Duration
	err := s.call(ctx, key, func() (err error) {
		left, err = s.primary.Locked(ctx, key)
		return err
	})
	switch {
	case err == nil:
		s.hold(key, left, 1, 0)
		return left, nil
	case neutral(ctx, err):
		return 0, err
	}
	s.m.fallbacks.WithLabelValues(reason(err)).Inc()
	if s.fallback == nil {
		return s.retry, nil
	}
	// The caller's deadline may be what expired: the in-process answer is
	// instant and must still be given.
	return s.fallback.Locked(context.WithoutCancel(ctx), key)
}

// Trip trips key on the primary unless key's node's circuit is open; on a
// backend failure the fallback trips it (Open), or the error is returned
// (Closed).
func (s *Store) Trip(ctx context.Context, key string, p lockout.Policy) (time.Duration, int64, error) {
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	var d time.Duration
	var n int64
	err := s.call(ctx, key, func() (err error) {
		d, n, err = s.primary.Trip(ctx, key, p)
		return err
	})
	switch {
	case err == nil:
		s.hold(key, d, n, p.ForgetAfter())
		return d, n, nil
	case neutral(ctx, err):
		return 0, 0, err
	}
	s.m.fallbacks.WithLabelValues(reason(err)).Inc()
	if s.fallback == nil {
		return 0, 0, err
	}
	return s.fallback.Trip(context.WithoutCancel(ctx), key, p)
}

// hold keeps in the fallback a lockout the primary reported, so that it
// still holds here if Redis fails before it ends.
func (s *Store) hold(key string, left time.Duration, trips int64, forget time.Duration) {
	if s.fallback != nil && left > 0 {
		s.fallback.Hold(key, left, trips, forget)
	}
}

// call runs f, a call about key's lockout, through its node's breaker.
func (s *Store) call(ctx context.Context, key string, f func() error) error {
	node := ""
	if s.router != nil {
		node = s.router.Node(ctx, key)
	}
	return s.g.Call(ctx, node, f)
}

// Close closes the primary and the fallback.
func (s *Store) Close() error {
	err := s.primary.Close()
	if s.fallback != nil {
		err = errors.Join(err, s.fallback.Close())
	}
	return err
}

// neutral reports errors that say nothing about the backend's health: an
// invalid policy, a closed store, a caller that cancelled. A deadline is
// not neutral: the store timeout is how a hung backend shows.
func neutral(ctx context.Context, err error) bool {
	return errors.Is(err, lockout.ErrInvalid) || errors.Is(err, lockout.ErrClosed) ||
		(errors.Is(err, context.Canceled) && ctx.Err() != nil)
}

// reason is the fallback metric's reason label of err.
func reason(err error) string {
	if errors.Is(err, breaker.ErrOpen) {
		return reasonCircuitOpen
	}
	return reasonError
}
