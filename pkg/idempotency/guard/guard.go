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
//
// An inner store spread over several nodes (a Redis Cluster; see Router)
// gets one breaker per node, as the rate-limit side has (package failover,
// with the same internal/breaker Set): a failing master refuses only the
// keys it holds, its failures ask for the slot map to be reloaded, and the
// breakers of masters that left the map are forgotten. A CLUSTERDOWN
// answer is the cluster's state, not the answering node's fault: it is
// returned (the route's failure_mode applies) but does not count, so the
// node is asked again the moment the cluster is ok.
package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid idempotency guard options")

// Defaults for zero Options fields, the same for every store guard.
const (
	DefaultFailureThreshold = breaker.DefaultThreshold
	DefaultCoolDown         = breaker.DefaultCoolDown
)

// Options configures a Store: FailureThreshold (default 5), CoolDown
// (default 1s), Now, OnChange and OnError as every store guard takes them
// (see breaker.StoreOptions); Registerer, required, receives
// extauthz_idempotency_store_errors_total and
// extauthz_idempotency_store_circuit_open.
type Options = breaker.StoreOptions

// Router is implemented by inner stores spread over several backend nodes
// (a Redis Cluster): the Store then keeps one circuit breaker per node.
// Refresh, Nodes and ClusterDown are breaker.Cluster's: a CLUSTERDOWN
// answer does not count against the node's breaker, and Nodes is called at
// most once per cool-down, while a circuit is open.
type Router interface {
	// Node names the node that holds the record of scope and key now, e.g.
	// the address of the master owning its slot; "" when unknown.
	Node(ctx context.Context, scope, key string) string
	breaker.Cluster
}

// Store is an idempotency.Store that fails fast while its inner store keeps
// failing. It owns the inner store: Close closes it.
type Store struct {
	inner  idempotency.Store
	router Router // nil: one node, ""
	g      *breaker.Guard
}

var _ idempotency.Store = (*Store)(nil)

// New wraps inner.
func New(inner idempotency.Store, opts Options) (*Store, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: nil inner store", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Store{inner: inner}
	s.router, _ = inner.(Router)
	s.g, err = breaker.NewStoreGuard(opts, breaker.StoreHooks{
		Cluster: s.router, Neutral: neutral, Open: m.circuitOpen, Errors: m.errors,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return s, nil
}

// Begin calls the inner store's Begin unless the circuit is open.
func (s *Store) Begin(ctx context.Context, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs) (idempotency.Outcome, error) {
	if err := idempotency.CheckBegin(key, ttls); err != nil {
		return idempotency.Outcome{}, err
	}
	var o idempotency.Outcome
	err := s.call(ctx, scope, key, func() (err error) {
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
	return s.call(ctx, lease.Scope, lease.Key, func() error { return s.inner.Complete(ctx, lease, resp) })
}

// Release calls the inner store's Release unless the circuit is open.
func (s *Store) Release(ctx context.Context, lease idempotency.Lease) error {
	if err := idempotency.CheckLease(lease); err != nil {
		return err
	}
	return s.call(ctx, lease.Scope, lease.Key, func() error { return s.inner.Release(ctx, lease) })
}

// Renew calls the inner store's Renew unless the circuit is open.
func (s *Store) Renew(ctx context.Context, lease idempotency.Lease) error {
	if err := idempotency.CheckLease(lease); err != nil {
		return err
	}
	return s.call(ctx, lease.Scope, lease.Key, func() error { return s.inner.Renew(ctx, lease) })
}

// Close closes the inner store.
func (s *Store) Close() error { return s.inner.Close() }

// call runs f, a call about the record of scope and key, through its
// node's breaker; an open circuit is idempotency.ErrUnavailable.
func (s *Store) call(ctx context.Context, scope, key string, f func() error) error {
	node := ""
	if s.router != nil {
		node = s.router.Node(ctx, scope, key)
	}
	err := s.g.Call(ctx, node, f)
	if errors.Is(err, breaker.ErrOpen) {
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
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
