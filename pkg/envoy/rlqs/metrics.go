package rlqs

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values. The README's metrics table lists each.
const (
	reasonNoDomain = "no_domain"

	outcomeLimited       = "limited"
	outcomeNoMatch       = "no_match"
	outcomeUnknownDomain = "unknown_domain"
	outcomeUnlimited     = "unlimited"
	outcomeShadow        = "shadow"
	outcomeBlocked       = "blocked"
	outcomeEmptyID       = "empty_id"
	outcomeOverflow      = "overflow"

	labelTokenBucket = "token_bucket"
	labelAllowAll    = "allow_all"
	labelDenyAll     = "deny_all"

	// The rule label of buckets without a rule, and past MaxBucketSeries.
	seriesUnknownDomain = "_unknown_domain"
	seriesNoMatch       = "_no_match"
	seriesOverflow      = "_overflow"
)

type metrics struct {
	streams     prometheus.Gauge
	rejected    *prometheus.CounterVec
	buckets     *prometheus.CounterVec
	reports     prometheus.Counter
	responses   prometheus.Counter
	assignments *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	charges     *prometheus.CounterVec
	requests    *prometheus.CounterVec
	demand      *prometheus.GaugeVec
	assignedVec *prometheus.GaugeVec
	series      seriesCap
}

func newMetrics(reg prometheus.Registerer, maxSeries int) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "extauthz_rlqs_streams_open",
			Help: "RLQS streams open (one per Envoy connected to this replica)."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extauthz_rlqs_streams_rejected_total",
			Help: "RLQS streams closed with INVALID_ARGUMENT, by reason."}, []string{"reason"}),
		buckets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extauthz_rlqs_buckets_total",
			Help: "Bucket IDs first seen on a stream, by what the policy gives them."}, []string{"outcome"}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "extauthz_rlqs_reports_total",
			Help: "RLQS usage report messages received."}),
		responses: prometheus.NewCounter(prometheus.CounterOpts{Name: "extauthz_rlqs_responses_total",
			Help: "RLQS assignment messages sent."}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extauthz_rlqs_assignments_total",
			Help: "Bucket assignments sent, by strategy."}, []string{"strategy"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extauthz_rlqs_store_errors_total",
			Help: "RLQS demand store calls that failed, by the failure mode applied."}, []string{"mode"}),
		charges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extauthz_rlqs_charges_total",
			Help: "Bucket usage reports charged to the rate-limit store's counter, by result."}, []string{"result"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "extauthz_rlqs_requests_total",
			Help: "Requests Envoys reported, by rule and result (allowed, denied)."}, []string{"rule", "result"}),
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "extauthz_rlqs_demand",
			Help: "Measured demand of all clients of a rule's bucket at its last allocation, requests per second."}, []string{"rule"}),
		assignedVec: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "extauthz_rlqs_assigned_rate",
			Help: "Token rate assigned to the Envoys connected to this replica, requests per second."}, []string{"rule"}),
		series: seriesCap{max: maxSeries, seen: map[string]struct{}{}},
	}
	for _, o := range []string{outcomeLimited, outcomeNoMatch, outcomeUnknownDomain, outcomeUnlimited,
		outcomeShadow, outcomeBlocked, outcomeEmptyID, outcomeOverflow} {
		m.buckets.WithLabelValues(o)
	}
	for _, s := range []string{labelTokenBucket, labelAllowAll, labelDenyAll} {
		m.assignments.WithLabelValues(s)
	}
	m.rejected.WithLabelValues(reasonNoDomain)
	for _, r := range []string{chargeCharged, chargeSaturated, chargeFailed} {
		m.charges.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.streams, m.rejected, m.buckets, m.reports, m.responses,
		m.assignments, m.storeErrors, m.charges, m.requests, m.demand, m.assignedVec} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) usage(series string, allowed, denied uint64) {
	m.requests.WithLabelValues(series, "allowed").Add(float64(allowed))
	m.requests.WithLabelValues(series, "denied").Add(float64(denied))
}

func (m *metrics) assigned(series string, delta float64) {
	if delta != 0 {
		m.assignedVec.WithLabelValues(series).Add(delta)
	}
}

// seriesCap hands out at most max distinct rule label values.
type seriesCap struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func (c *seriesCap) name(id string) string {
	id = labelValue(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[id]; ok {
		return id
	}
	if len(c.seen) >= c.max {
		return seriesOverflow
	}
	c.seen[id] = struct{}{}
	return id
}
