package idempotency

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Event names an idempotency outcome counted in metrics.
type Event string

// The counted events (label values of extauthz_idempotency_events_total).
const (
	EventAcquired    Event = "acquired"     // a lease was taken; the request goes upstream
	EventReplayed    Event = "replayed"     // a stored response was replayed
	EventConflict    Event = "conflict"     // 409: the key is in flight
	EventMismatch    Event = "mismatch"     // 422: the key was used with another request
	EventMissing     Event = "missing"      // 400: a required key is absent
	EventMalformed   Event = "malformed"    // 400: the key is not valid
	EventStored      Event = "stored"       // the upstream's response was stored
	EventReleased    Event = "released"     // the lease was released: a retry runs again
	EventKept        Event = "kept"         // no longer counted: unknown outcomes are not_kept
	EventTooLarge    Event = "too_large"    // the response exceeded the cap: not kept
	EventLeaseLost   Event = "lease_lost"   // fencing refused a stale owner
	EventStoreError  Event = "store_error"  // the store failed
	EventFailOpen    Event = "fail_open"    // store failed; admitted without a lease
	EventUnavailable Event = "unavailable"  // store failed; answered 503 (fail-closed)
	EventSkipped     Event = "skipped"      // a local reply was not stored
	EventBodyTooBig  Event = "request_body" // the request body could not be fingerprinted
)

// Events of replies that ran but were not kept (completed, not replayable).
const (
	// EventNotKept: a reply ran but could not be kept; its key is
	// completed as not replayable.
	EventNotKept Event = "not_kept"
	// EventUnreplayable: 409, a retry of a key whose reply was not kept.
	EventUnreplayable Event = "unreplayable"
)

var allEvents = []Event{
	EventAcquired, EventReplayed, EventConflict, EventMismatch, EventMissing, EventMalformed,
	EventStored, EventReleased, EventKept, EventTooLarge, EventLeaseLost, EventStoreError,
	EventFailOpen, EventUnavailable, EventSkipped, EventBodyTooBig, EventNotKept, EventUnreplayable,
}

// The APIs that report metrics (label values of "api", the same as the
// decision metrics of pkg/envoy).
const (
	APIExtAuthz = "ext_authz"
	APIExtProc  = "ext_proc"
)

// Metrics counts idempotency events per API. Several servers may share one
// registry: NewMetrics reuses a collector already registered there. (Call
// latency per API is measured by pkg/envoy's decision histogram.)
type Metrics struct {
	events *prometheus.CounterVec
}

// NewMetrics registers the idempotency metrics on reg (never the global
// registry unless the caller passes it).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("idempotency metrics: nil registerer")
	}
	ev := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_idempotency_events_total",
		Help: "Idempotency-Key outcomes by API (authz, extproc) and event.",
	}, []string{"api", "event"})
	ev, err := register(reg, ev)
	if err != nil {
		return nil, err
	}
	for _, api := range []string{APIExtAuthz, APIExtProc} {
		for _, e := range allEvents {
			ev.WithLabelValues(api, string(e))
		}
	}
	return &Metrics{events: ev}, nil
}

// register registers c, or returns the collector of the same description
// already registered (shared between servers).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("idempotency metrics: %w", err)
}

// Count adds one event for api.
func (m *Metrics) Count(api string, e Event) { m.events.WithLabelValues(api, string(e)).Inc() }

// Value returns the current count of one event (for tests and dashboards).
func (m *Metrics) Value(api string, e Event) float64 {
	var out dto.Metric
	if err := m.events.WithLabelValues(api, string(e)).Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}
