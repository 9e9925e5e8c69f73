package authz

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels of the charged-limit metrics. route and limit are the policy's
// names (never request input); the other labels take these values.
const (
	// ChargeKindOutcome and ChargeKindCost are the "kind" of a charge.
	ChargeKindOutcome = "outcome"
	ChargeKindCost    = "cost"

	// Check outcomes on the request path.
	ChargeCheckOK        = "ok"
	ChargeCheckOverLimit = "over_limit"
	ChargeCheckLocked    = "locked"
	ChargeCheckError     = "error"

	// Charge results on the response path.
	ChargeWithin  = "within"  // charged, the budget not spent
	ChargeSpent   = "spent"   // charged, the budget now spent (or over)
	ChargeRefund  = "refund"  // a reservation refunded in part
	ChargeMissing = "missing" // a cost limit's cost was not found (default or reservation stands)
	ChargeError   = "error"   // the store failed: nothing charged

	// Lockout events.
	LockoutTrip    = "trip"
	LockoutRefused = "refused"
	LockoutError   = "error"
)

// ChargeMetrics counts the charged limits' work:
//
//	extauthz_charge_checks_total{route,limit,outcome}     request-path checks
//	extauthz_charges_total{route,limit,kind,result}       response-path charges
//	extauthz_charged_cost_total{route,limit}              summed cost charged (reservations included)
//	extauthz_charge_refunded_total{route,limit}           summed cost refunded (reservations above the real cost)
//	extauthz_lockouts_total{route,limit,event}            lockout trips, refusals while locked, store errors
//
// Several servers may share one registry: the constructor reuses
// collectors already registered there.
type ChargeMetrics struct {
	checks, charges, cost, refunded, lockouts *prometheus.CounterVec
}

// NewChargeMetrics registers the charged-limit metrics on reg.
func NewChargeMetrics(reg prometheus.Registerer) (*ChargeMetrics, error) {
	if reg == nil {
		return nil, errors.New("envoy: nil prometheus registerer")
	}
	vec := func(name, help string, labels ...string) (*prometheus.CounterVec, error) {
		return registerShared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	var m ChargeMetrics
	var err error
	for _, c := range []struct {
		dst          **prometheus.CounterVec
		name, help   string
		extraLabel   string
		noExtraLabel bool
	}{
		{&m.checks, "extauthz_charge_checks_total", "Request-path checks of charged limits by route, limit and outcome (ok, over_limit, locked, error).", "outcome", false},
		{&m.charges, "extauthz_charges_total", "Response-path charges of charged limits by route, limit, kind (outcome, cost) and result (within, spent, refund, missing, error).", "", false},
		{&m.cost, "extauthz_charged_cost_total", "Hits charged to charged limits (costs, reservations, counted outcomes) by route and limit.", "", true},
		{&m.refunded, "extauthz_charge_refunded_total", "Hits refunded to cost limits (a reservation above the real cost) by route and limit.", "", true},
		{&m.lockouts, "extauthz_lockouts_total", "Lockout events of charged limits by route, limit and event (trip, refused, error).", "event", false},
	} {
		labels := []string{"route", "limit"}
		switch {
		case c.dst == &m.charges:
			labels = append(labels, "kind", "result")
		case !c.noExtraLabel:
			labels = append(labels, c.extraLabel)
		}
		if *c.dst, err = vec(c.name, c.help, labels...); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

// discardChargeMetrics counts into a registry nobody reads: the default of
// servers built without WithCharges.
func discardChargeMetrics() *ChargeMetrics {
	m, _ := NewChargeMetrics(prometheus.NewRegistry())
	return m
}

func (m *ChargeMetrics) check(route, limit, outcome string) {
	m.checks.WithLabelValues(route, limit, outcome).Inc()
}

func (m *ChargeMetrics) charged(route, limit, kind, result string, hits int64) {
	m.charges.WithLabelValues(route, limit, kind, result).Inc()
	switch {
	case result == ChargeError:
	case hits > 0:
		m.cost.WithLabelValues(route, limit).Add(float64(hits))
	case hits < 0:
		m.refunded.WithLabelValues(route, limit).Add(float64(-hits))
	}
}

func (m *ChargeMetrics) lockout(route, limit, event string) {
	m.lockouts.WithLabelValues(route, limit, event).Inc()
}
