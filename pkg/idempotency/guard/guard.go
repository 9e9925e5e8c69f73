// Package guard puts a circuit breaker in front of an idempotency.Store
// (Redis): after FailureThreshold backend failures in a row it stops calling
// the store for CoolDown, so that while Redis is down requests get the
// route's failure_mode at once instead of each waiting for the store
// timeout. After the cool-down one call goes through as a probe; its success
// closes the circuit.
//
// While the circuit is open every method fails fast with an error wrapping
// idempotency.ErrUnavailable, including Complete, Release and Renew of
// leases taken before: the lease then expires at its TTL as it would had
// the store call failed. Invalid arguments are reported as such whatever
// the circuit's state.
//
// Only backend failures (errors and timeouts) count: the domain errors
// (ErrLeaseLost, ErrInvalidKey, ErrInvalidTTL, ErrInvalidResponse,
// ErrTooLarge), ErrClosed and a caller that cancelled say nothing about the
// backend's health.
package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid idempotency guard options")

// Defaults for zero Options fields (the same as the rate-limit failover's).
const (
	DefaultFailureThreshold = 5
	DefaultCoolDown         = time.Second
)

// Options configures a Store.
type Options struct {
	// Registerer receives the metrics; required.
	Registerer prometheus.Registerer
	// FailureThreshold is how many backend failures in a row open the
	// circuit; default 5.
	FailureThreshold int
	// CoolDown is how long an open circuit refuses calls before one probe;
	// default 1s.
	CoolDown time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnChange, when set, is told when the circuit opens (with the error
	// that opened it) and closes again; callers log it.
	OnChange func(open bool, err error)
	// OnError, when set, is told of every backend failure; callers log it.
	OnError func(err error)
}

// Store is an idempotency.Store that fails fast while its inner store keeps
// failing. It owns the inner store: Close closes it.
type Store struct {
	inner idempotency.Store
	br    *breaker.Set // one node: the store as a whole
	now   func() time.Time
	onErr func(error)
	m     metrics
}

var _ idempotency.Store = (*Store)(nil)

// New wraps inner.
func New(inner idempotency.Store, opts Options) (*Store, error) {
	opts, err := withDefaults(inner, opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	br, err := breaker.NewSet(opts.FailureThreshold, opts.CoolDown, func(_ string, open bool, err error) {
		m.circuitOpen.Set(gauge(open))
		if opts.OnChange != nil {
			opts.OnChange(open, err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	onErr := opts.OnError
	if onErr == nil {
		onErr = func(error) {}
	}
	return &Store{inner: inner, br: br, now: opts.Now, onErr: onErr, m: m}, nil
}

func withDefaults(inner idempotency.Store, o Options) (Options, error) {
	switch {
	case inner == nil:
		return o, fmt.Errorf("%w: nil inner store", ErrInvalidOptions)
	case o.Registerer == nil:
		return o, fmt.Errorf("%w: nil Registerer", ErrInvalidOptions)
	case o.FailureThreshold < 0 || o.CoolDown < 0:
		return o, fmt.Errorf("%w: negative threshold or cool-down", ErrInvalidOptions)
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.CoolDown == 0 {
		o.CoolDown = DefaultCoolDown
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// Begin calls the inner store's Begin unless the circuit is open.
func (s *Store) Begin(ctx context.Context, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs) (idempotency.Outcome, error) {
	if err := idempotency.CheckBegin(key, ttls); err != nil {
		return idempotency.Outcome{}, err
	}
	var o idempotency.Outcome
	err := s.call(ctx, func() (err error) {
		o, err = s.inner.Begin(ctx, scope, key, fp, ttls)
		return err
	})
	return o, err
}

// Complete calls the inner store's Complete unless the circuit is open.
func (s *Store) Complete(ctx context.Context, lease idempotency.Lease, resp idempotency.Response) error {
	if err := idempotency.CheckLease(lease); err != nil {
		return err
	}
	// No body cap here: the inner store applies its own (ErrTooLarge).
	if err := idempotency.CheckResponse(resp, 0); err != nil {
		return err
	}
	return s.call(ctx, func() error { return s.inner.Complete(ctx, lease, resp) })
}

// Release calls the inner store's Release unless the circuit is open.
func (s *Store) Release(ctx context.Context, lease idempotency.Lease) error {
	if err := idempotency.CheckLease(lease); err != nil {
		return err
	}
	return s.call(ctx, func() error { return s.inner.Release(ctx, lease) })
}

// Renew calls the inner store's Renew unless the circuit is open.
func (s *Store) Renew(ctx context.Context, lease idempotency.Lease) error {
	if err := idempotency.CheckLease(lease); err != nil {
		return err
	}
	return s.call(ctx, func() error { return s.inner.Renew(ctx, lease) })
}

// Close closes the inner store.
func (s *Store) Close() error { return s.inner.Close() }

// call runs f through the breaker and records its outcome.
func (s *Store) call(ctx context.Context, f func() error) error {
	if b := s.br.Get(""); !b.Acquire(s.now()) {
		st := b.State()
		return fmt.Errorf("%w: circuit open after %d consecutive failures, last: %v",
			idempotency.ErrUnavailable, st.Failures, st.LastErr)
	}
	err := f()
	if s.br.Done("", s.now(), err, neutral(ctx, err)) {
		s.m.errors.Inc()
		s.onErr(err)
	}
	return err
}

// neutral reports errors that say nothing about the backend's health: the
// backend answered (domain errors), the store was misused, or the caller
// cancelled. A deadline is not neutral: the store timeout is how a hung
// backend shows.
func neutral(ctx context.Context, err error) bool {
	for _, e := range []error{
		idempotency.ErrLeaseLost, idempotency.ErrInvalidKey, idempotency.ErrInvalidTTL,
		idempotency.ErrInvalidResponse, idempotency.ErrTooLarge, idempotency.ErrClosed,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return errors.Is(err, context.Canceled) && ctx.Err() != nil
}

// gauge is a boolean as a gauge's value.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
