// Package guard puts a circuit breaker in front of an inflight.Store
// (Redis): after FailureThreshold backend failures in a row it stops calling
// the store for CoolDown, so that while Redis is down a max_in_flight route
// gets its store failure at once (Envoy's failure_mode_allow decides)
// instead of each request waiting for the store timeout. After the
// cool-down one call goes through as a probe; its success closes the
// circuit.
//
// While the circuit is open every method fails fast with an error wrapping
// inflight.ErrUnavailable, Renew and Release of slots taken before
// included: such a slot frees at its ttl, as it would had the store call
// failed. Invalid arguments are reported as such whatever the circuit's
// state, and neither they nor a caller that cancelled count as failures.
//
// An inner store spread over several nodes (a Redis Cluster; see Router)
// gets one breaker per node, as the rate-limit and idempotency stores have
// (internal/breaker's Guard): a failing master refuses only the keys it
// holds, and a CLUSTERDOWN answer does not count against the node.
package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid in-flight guard options")

// Defaults for zero Options fields, the same for every store guard.
const (
	DefaultFailureThreshold = breaker.DefaultThreshold
	DefaultCoolDown         = breaker.DefaultCoolDown
)

// Options configures a Store: FailureThreshold (default 5), CoolDown
// (default 1s), Now, OnChange and OnError as every store guard takes them
// (see breaker.StoreOptions); Registerer, required, receives
// extauthz_inflight_store_circuit_open.
type Options = breaker.StoreOptions

// Router is implemented by inner stores spread over several backend nodes
// (a Redis Cluster): the Store then keeps one circuit breaker per node.
type Router interface {
	// Node names the node that holds key's slots now; "" when unknown.
	Node(ctx context.Context, key string) string
	breaker.Cluster
}

// Store is an inflight.Store that fails fast while its inner store keeps
// failing.
type Store struct {
	inner  inflight.Store
	router Router // nil: one node, ""
	g      *breaker.Guard
}

var _ inflight.Store = (*Store)(nil)

// New wraps inner.
func New(inner inflight.Store, opts Options) (*Store, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: nil inner store", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "extauthz_inflight_store_circuit_open",
		Help: "Redis nodes (cluster masters; 1 for one server) whose circuit breaker refuses in-flight slot calls after consecutive failures.",
	})
	if err := opts.Registerer.Register(open); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	s := &Store{inner: inner}
	s.router, _ = inner.(Router)
	var err error
	s.g, err = breaker.NewStoreGuard(opts, breaker.StoreHooks{Cluster: s.router, Neutral: neutral, Open: open})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return s, nil
}

// Acquire calls the inner store's Acquire unless the circuit is open.
func (s *Store) Acquire(ctx context.Context, key string, limit int, ttl time.Duration) (inflight.Slot, inflight.Result, error) {
	if err := inflight.CheckAcquire(limit, ttl); err != nil {
		return "", inflight.Result{}, err
	}
	var slot inflight.Slot
	var res inflight.Result
	err := s.call(ctx, key, func() (err error) {
		slot, res, err = s.inner.Acquire(ctx, key, limit, ttl)
		return err
	})
	return slot, res, err
}

// Renew calls the inner store's Renew unless the circuit is open.
func (s *Store) Renew(ctx context.Context, key string, slot inflight.Slot, ttl time.Duration) (bool, error) {
	if err := inflight.CheckTTL(ttl); err != nil {
		return false, err
	}
	var held bool
	err := s.call(ctx, key, func() (err error) {
		held, err = s.inner.Renew(ctx, key, slot, ttl)
		return err
	})
	return held, err
}

// Release calls the inner store's Release unless the circuit is open.
func (s *Store) Release(ctx context.Context, key string, slot inflight.Slot) (bool, error) {
	var released bool
	err := s.call(ctx, key, func() (err error) {
		released, err = s.inner.Release(ctx, key, slot)
		return err
	})
	return released, err
}

// call runs f, a call about key's slots, through its node's breaker; an
// open circuit is inflight.ErrUnavailable.
func (s *Store) call(ctx context.Context, key string, f func() error) error {
	node := ""
	if s.router != nil {
		node = s.router.Node(ctx, key)
	}
	err := s.g.Call(ctx, node, f)
	if errors.Is(err, breaker.ErrOpen) {
		return fmt.Errorf("%w: %w", inflight.ErrUnavailable, err)
	}
	return err
}

// neutral reports errors that say nothing about the backend's health: a
// misuse, or a caller that cancelled. A deadline is not neutral: the store
// timeout is how a hung backend shows.
func neutral(ctx context.Context, err error) bool {
	return errors.Is(err, inflight.ErrInvalid) || (errors.Is(err, context.Canceled) && ctx.Err() != nil)
}

var _ inflight.Inspector = (*Store)(nil)

// errNoInspector means the guarded store cannot be inspected.
var errNoInspector = errors.New("in-flight guard: the inner store cannot be inspected")

// Held passes through to the inner store. The breaker is not consulted
// nor fed: an operator's look is worth a try while it is open, and its
// failures say nothing the request path has not said already.
func (s *Store) Held(ctx context.Context, key string) (inflight.Held, error) {
	in, ok := s.inner.(inflight.Inspector)
	if !ok {
		return inflight.Held{}, errNoInspector
	}
	return in.Held(ctx, key)
}
