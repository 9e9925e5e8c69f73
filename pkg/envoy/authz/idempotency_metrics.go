package authz

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// UnknownRoute is the "route" label of an idempotency event whose route is
// not in the policy: a lease handed over by ext_authz for a route that a
// reload has since removed, or a replay ticket issued before tickets named
// their route. Never a value from the request.
const UnknownRoute = "_unknown"

// IdempotencyMetricsOptions tune NewIdempotencyMetricsWith; the zero value
// takes the defaults.
type IdempotencyMetricsOptions struct {
	// MaxRouteSeries bounds the distinct "route" label values of
	// extauthz_idempotency_route_events_total; later routes are counted
	// under OverflowRule. Default DefaultMaxRuleSeries (the per-rule
	// metrics' cap, EXTAUTHZ_RULE_METRICS_MAX_SERIES); negative turns the
	// per-route metric off.
	MaxRouteSeries int
}

// IdempotencyMetrics counts idempotency events per API
// (extauthz_idempotency_events_total{api,event}) and per API and policy
// route (extauthz_idempotency_route_events_total{api,route,event}). The
// per-route counts are a second metric, not a label on the first, so that
// queries and alerts on the first keep their meaning and the per-route one
// can be capped or turned off alone. Several servers may share one
// registry: the constructors reuse collectors already registered there.
// (Call latency per API is the decision histogram of Metrics.)
type IdempotencyMetrics struct {
	events *prometheus.CounterVec
	routes *routeEvents // nil: per-route metric off
}

// routeEvents is the per-route counter with its label cap, registered as
// one collector so that handles sharing a registry share the cap too.
type routeEvents struct {
	*prometheus.CounterVec
	cap *envoy.LabelCap

	mu     sync.Mutex                  // serialises series creation for a policy
	synced atomic.Pointer[policy.HTTP] // the HTTP policy whose routes have series
}

// NewIdempotencyMetrics registers the idempotency metrics on reg with the
// default options, every api/event series at 0.
func NewIdempotencyMetrics(reg prometheus.Registerer) (*IdempotencyMetrics, error) {
	return NewIdempotencyMetricsWith(reg, IdempotencyMetricsOptions{})
}

// NewIdempotencyMetricsWith is NewIdempotencyMetrics with options. The
// per-route series of a policy's idempotent routes are created at 0 when a
// server first sees that policy (its constructor, then the first call after
// each reload).
func NewIdempotencyMetricsWith(reg prometheus.Registerer, o IdempotencyMetricsOptions) (*IdempotencyMetrics, error) {
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
	for _, api := range idempotencyAPIs {
		for _, e := range idempotency.Events() {
			ev.WithLabelValues(api, string(e))
		}
	}
	m := &IdempotencyMetrics{events: ev}
	if o.MaxRouteSeries >= 0 {
		if m.routes, err = newRouteEvents(reg, o.MaxRouteSeries); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// idempotencyAPIs are the APIs whose series exist from the start (the
// replay endpoint's appear with its first event, as it may not be served).
var idempotencyAPIs = []string{envoy.APIExtAuthz, envoy.APIExtProc}

func newRouteEvents(reg prometheus.Registerer, maxSeries int) (*routeEvents, error) {
	if maxSeries == 0 {
		maxSeries = envoy.DefaultMaxRuleSeries
	}
	r := &routeEvents{cap: envoy.NewLabelCap(maxSeries), CounterVec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_idempotency_route_events_total",
		Help: "Idempotency-Key outcomes by API, policy route (" + UnknownRoute + " when not in the policy, " +
			envoy.OverflowRule + " past the cap) and event.",
	}, []string{"api", "route", "event"})}
	return registerShared(reg, r)
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

// Count adds one event for api on the policy route named route ("" when
// no route of the policy is known; the caller never passes request input).
func (m *IdempotencyMetrics) Count(api, route string, e idempotency.Event) {
	m.events.WithLabelValues(api, string(e)).Inc()
	if m.routes != nil {
		m.routes.WithLabelValues(api, m.routes.label(route), string(e)).Inc()
	}
}

// label is route's label value: UnknownRoute for none (outside the cap: a
// fixed value), else the capped name.
func (r *routeEvents) label(route string) string {
	if route == "" {
		return UnknownRoute
	}
	return r.cap.Label(route)
}

// syncRoutes creates, at 0, the series of every idempotent route of h the
// first time h is seen, so that a configured route is on dashboards before
// its first event. The check is one atomic load, cheap enough per call.
// Series of routes a reload removed stay, frozen, until restart (and keep
// their place under the cap): deleting them would make a late event of a
// stream that began before the reload start a new series from 1.
func (m *IdempotencyMetrics) syncRoutes(h *policy.HTTP) {
	r := m.routes
	if r == nil || h == nil || r.synced.Load() == h {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.synced.Load() == h {
		return
	}
	for _, route := range h.Routes {
		if route.Idempotency == nil {
			continue
		}
		label := r.label(route.Name)
		for _, api := range idempotencyAPIs {
			for _, e := range idempotency.Events() {
				r.WithLabelValues(api, label, string(e))
			}
		}
	}
	r.synced.Store(h)
}

// Value returns the current count of one event over every route (for
// tests and dashboards).
func (m *IdempotencyMetrics) Value(api string, e idempotency.Event) float64 {
	return counterOf(m.events.WithLabelValues(api, string(e)))
}

// RouteValue returns the current count of one event under one route label
// (a route name, UnknownRoute or OverflowRule); 0 when the metric is off.
func (m *IdempotencyMetrics) RouteValue(api, route string, e idempotency.Event) float64 {
	if m.routes == nil {
		return 0
	}
	return counterOf(m.routes.WithLabelValues(api, route, string(e)))
}

func counterOf(c prometheus.Counter) float64 {
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}
