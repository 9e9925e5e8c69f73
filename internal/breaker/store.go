package breaker

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for a zero FailureThreshold or CoolDown, the same for every store
// in front of Redis (rate limits, idempotency records, in-flight slots).
const (
	DefaultThreshold = 5
	DefaultCoolDown  = time.Second
)

// StoreOptions configures a guard in front of a store: it is the Options of
// every package that wraps a store in a Guard (pkg/idempotency/guard,
// pkg/ratelimit/inflight/guard), so that they take and default the same
// settings.
type StoreOptions struct {
	// Registerer receives the guard's metrics; required.
	Registerer prometheus.Registerer
	// FailureThreshold is how many backend failures in a row open a
	// node's circuit; default DefaultThreshold (5).
	FailureThreshold int
	// CoolDown is how long an open circuit refuses calls before one probe;
	// default DefaultCoolDown (1s).
	CoolDown time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnChange, when set, is told when a node's circuit opens (with the
	// error that opened it) and closes again; callers log it. The node is
	// "" unless the store is spread over several nodes.
	OnChange func(node string, open bool, err error)
	// OnError, when set, is told of every backend failure and the node it
	// came from; callers log it.
	OnError func(node string, err error)
}

// Validate reports a missing Registerer or a negative threshold or
// cool-down (wrapping ErrInvalid).
func (o StoreOptions) Validate() error {
	switch {
	case o.Registerer == nil:
		return fmt.Errorf("%w: nil Registerer", ErrInvalid)
	case o.FailureThreshold < 0 || o.CoolDown < 0:
		return fmt.Errorf("%w: negative threshold or cool-down", ErrInvalid)
	}
	return nil
}

// withDefaults fills the zero fields.
func (o StoreOptions) withDefaults() StoreOptions {
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultThreshold
	}
	if o.CoolDown == 0 {
		o.CoolDown = DefaultCoolDown
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// StoreHooks is what a guarded store adds to its StoreOptions: how its
// backend is spread, which errors say nothing of the backend, and where
// the guard's state is shown.
type StoreHooks struct {
	// Cluster, when set, gives one breaker per node (see GuardOptions);
	// nil for a single node.
	Cluster Cluster
	// Neutral reports errors that say nothing about the backend; nil means
	// none.
	Neutral func(ctx context.Context, err error) bool
	// Open is set to the number of nodes whose circuit is open; required.
	Open prometheus.Gauge
	// Errors, when set, counts calls that failed in the backend.
	Errors prometheus.Counter
}

// NewStoreGuard returns a Guard with one breaker per node, set up from o
// (validated, zero fields defaulted) and h: every change of a circuit
// updates h.Open and is told to o.OnChange, every backend failure counts in
// h.Errors and is told to o.OnError.
func NewStoreGuard(o StoreOptions, h StoreHooks) (*Guard, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if h.Open == nil {
		return nil, fmt.Errorf("%w: nil Open gauge", ErrInvalid)
	}
	o = o.withDefaults()
	var set *Set
	set, err := NewSet(o.FailureThreshold, o.CoolDown, func(node string, open bool, err error) {
		h.Open.Set(float64(set.Open()))
		if o.OnChange != nil {
			o.OnChange(node, open, err)
		}
	})
	if err != nil {
		return nil, err
	}
	return NewGuard(GuardOptions{Set: set, Cluster: h.Cluster, Now: o.Now, Neutral: h.Neutral, Failed: func(node string, err error) {
		if h.Errors != nil {
			h.Errors.Inc()
		}
		if o.OnError != nil {
			o.OnError(node, err)
		}
	}})
}
