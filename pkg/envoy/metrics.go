package envoy

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// API names, the "api" label of every metric.
const (
	APIRateLimit = "ratelimit"
	APIExtAuthz  = "ext_authz"
	APIExtProc   = "ext_proc"
)

// Decision outcomes, the "outcome" label of extauthz_decisions_total.
const (
	// OutcomeOK: counted and within the limit.
	OutcomeOK = "ok"
	// OutcomeOverLimit: counted and denied.
	OutcomeOverLimit = "over_limit"
	// OutcomeShadow: a shadow-mode rule would have denied; answered OK.
	OutcomeShadow = "shadow"
	// OutcomeUnlimited: matched an unlimited rule; never counted.
	OutcomeUnlimited = "unlimited"
	// OutcomeNoMatch: no rule matched (or the domain is unknown).
	OutcomeNoMatch = "no_match"
	// OutcomeReplaced: the matched rule was dropped by another rule's replaces.
	OutcomeReplaced = "replaced"
	// OutcomeError: the store failed; no answer was given.
	OutcomeError = "error"
	// OutcomeRejected: past a request bound (RLS), or a check without HTTP
	// attributes (ext_authz); answered OVER_LIMIT or 400, not counted.
	OutcomeRejected = "rejected"
)

// HTTPDomain is the "domain" label of ext_authz decisions: the HTTP
// policy, one label whatever the route.
const HTTPDomain = "http"

// UnknownDomain is the "domain" label of requests naming a domain the
// policy does not define: request domains are caller-controlled, and using
// them verbatim would let any client grow the metric's cardinality.
const UnknownDomain = "_unknown"

// Metrics are the decision metrics shared by the servers of this package.
// Register them once per registry with NewMetrics and hand the same value
// to every server.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	invalid   *prometheus.CounterVec
	inFlight  *prometheus.CounterVec
	rules     *ruleMetrics
	// latencyOf holds each API's histogram, found on every call without
	// hashing its label again. Written only by precreate.
	latencyOf map[string]prometheus.Observer
}

// NewMetrics creates the metrics and registers them on reg:
//
//	extauthz_decisions_total{api,domain,outcome}     one per RLS descriptor / per ext_authz check
//	                                                 (ext_proc takes no rate-limit decision: its
//	                                                 outcomes are idempotency events)
//	extauthz_decision_duration_seconds{api}          time to answer one call
//	extauthz_invalid_requests_total{api,reason}      request parts decided by a fallback rule
//	extauthz_rule_hits_total{api,rule,stat}          hits per rate-limit rule (see MetricsOptions)
//	extauthz_inflight_total{api,outcome}             max_in_flight slots (the InFlight* outcomes)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	return NewMetricsWith(reg, MetricsOptions{})
}

// NewMetricsWith is NewMetrics with options.
func NewMetricsWith(reg prometheus.Registerer, opts MetricsOptions) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("envoy: nil prometheus registerer")
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_decisions_total",
			Help: "Decisions by API, policy domain (" + UnknownDomain + " when not in the policy) and outcome.",
		}, []string{"api", "domain", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "extauthz_decision_duration_seconds",
			Help: "Time to answer one call, by API.",
			// 100µs to ~0.4s: Envoy's ratelimit filter gives up after 20ms by default.
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 10),
		}, []string{"api"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_invalid_requests_total",
			Help: "Request parts decided by a documented fallback rule instead of as they came (never an error to Envoy), by API and reason.",
		}, []string{"api", "reason"}),
		inFlight: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_inflight_total",
			Help: "max_in_flight slots by API and outcome: acquired, over_limit, error (ext_authz); released, expired, renew_error, error (ext_proc).",
		}, []string{"api", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.invalid, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("envoy: register metrics: %w", err)
		}
	}
	rules, err := newRuleMetrics(reg, opts)
	if err != nil {
		return nil, err
	}
	m.rules = rules
	m.precreate()
	return m, nil
}

// precreate makes the series whose labels are known in advance exist from
// the start, so that rate() and alerts see their first event: the latency
// of each API and the ext_authz decisions (one domain label, "http"). RLS
// decisions are labelled by the request's domain and appear with it.
func (m *Metrics) precreate() {
	m.latencyOf = map[string]prometheus.Observer{}
	for _, api := range []string{APIRateLimit, APIExtAuthz, APIExtProc} {
		m.latencyOf[api] = m.latency.WithLabelValues(api)
	}
	for _, o := range []string{OutcomeOK, OutcomeOverLimit, OutcomeNoMatch, OutcomeError} {
		m.decisions.WithLabelValues(APIExtAuthz, HTTPDomain, o)
	}
	for _, o := range []string{InFlightAcquired, InFlightOverLimit, InFlightError} {
		m.inFlight.WithLabelValues(APIExtAuthz, o)
	}
	for _, o := range []string{InFlightReleased, InFlightExpired, InFlightRenewError, InFlightError} {
		m.inFlight.WithLabelValues(APIExtProc, o)
	}
}

// Outcomes of max_in_flight slots, the "outcome" label of
// extauthz_inflight_total.
const (
	// InFlightAcquired: ext_authz took a slot and admitted the request.
	InFlightAcquired = "acquired"
	// InFlightOverLimit: every slot was taken; answered 429.
	InFlightOverLimit = "over_limit"
	// InFlightError: the store failed. ext_authz gave no answer (Envoy's
	// failure_mode_allow decides, as for a rate-limit store error);
	// ext_proc's release failed (the slot frees after its ttl).
	InFlightError = "error"
	// InFlightReleased: ext_proc gave the slot back when the stream ended.
	InFlightReleased = "released"
	// InFlightExpired: at release the slot was already gone (its ttl ran
	// out unrenewed, or the store lost it): the store had freed it.
	InFlightExpired = "expired"
	// InFlightRenewError: one renewal failed (the next tick tries again).
	InFlightRenewError = "renew_error"
)

// InFlight counts one max_in_flight slot event.
func (m *Metrics) InFlight(api, outcome string) {
	m.inFlight.WithLabelValues(api, outcome).Inc()
}

// Decision counts one decision.
func (m *Metrics) Decision(api, domain, outcome string) {
	m.decisions.WithLabelValues(api, domain, outcome).Inc()
}

// Latency records how long one call took.
func (m *Metrics) Latency(api string, d time.Duration) {
	o, ok := m.latencyOf[api]
	if !ok {
		o = m.latency.WithLabelValues(api)
	}
	o.Observe(d.Seconds())
}

// Invalid counts one request part decided by a fallback rule; reason is one
// of a fixed set per API.
func (m *Metrics) Invalid(api, reason string) {
	m.invalid.WithLabelValues(api, reason).Inc()
}
