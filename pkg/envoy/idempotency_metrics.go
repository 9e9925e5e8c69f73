package envoy

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// IdempotencyMetrics counts idempotency events per API
// (extauthz_idempotency_events_total{api,event}). Several servers may share
// one registry: NewIdempotencyMetrics reuses a collector already registered
// there. (Call latency per API is the decision histogram of Metrics.)
type IdempotencyMetrics struct {
	events *prometheus.CounterVec
}

// NewIdempotencyMetrics registers the idempotency metrics on reg, every
// api/event series at 0.
func NewIdempotencyMetrics(reg prometheus.Registerer) (*IdempotencyMetrics, error) {
	if reg == nil {
		return nil, errors.New("idempotency metrics: nil registerer")
	}
	ev := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_idempotency_events_total",
		Help: "Idempotency-Key outcomes by API (ext_authz, ext_proc) and event.",
	}, []string{"api", "event"})
	ev, err := registerShared(reg, ev)
	if err != nil {
		return nil, err
	}
	for _, api := range []string{APIExtAuthz, APIExtProc} {
		for _, e := range idempotency.Events() {
			ev.WithLabelValues(api, string(e))
		}
	}
	return &IdempotencyMetrics{events: ev}, nil
}

// registerShared registers c, or returns the collector of the same
// description already registered (shared between servers).
func registerShared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
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
func (m *IdempotencyMetrics) Count(api string, e idempotency.Event) {
	m.events.WithLabelValues(api, string(e)).Inc()
}

// Value returns the current count of one event (for tests and dashboards).
func (m *IdempotencyMetrics) Value(api string, e idempotency.Event) float64 {
	var out dto.Metric
	if err := m.events.WithLabelValues(api, string(e)).Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}
