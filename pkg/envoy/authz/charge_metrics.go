package authz

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/policy"
)

// The charged-limit metrics' route and limit labels are the policy's names
// (never request input); their other labels take the values below.

// Kinds of charged limit: the "kind" label of extauthz_charges_total.
const (
	ChargeKindOutcome = "outcome" // charge.on_status
	ChargeKindCost    = "cost"    // charge.cost
)

// Request-path check outcomes: the "outcome" label of
// extauthz_charge_checks_total.
const (
	ChargeCheckOK        = "ok"
	ChargeCheckOverLimit = "over_limit"
	ChargeCheckLocked    = "locked"
	ChargeCheckError     = "error"
)

// Response-path charge results: the "result" label of
// extauthz_charges_total.
const (
	ChargeWithin  = "within"  // charged, the budget not spent
	ChargeSpent   = "spent"   // charged, the budget now spent (or over)
	ChargeRefund  = "refund"  // a reservation refunded in part
	ChargeMissing = "missing" // a cost limit's cost was not found (default or reservation stands)
	ChargeError   = "error"   // the store failed: nothing charged
)

// Lockout events: the "event" label of extauthz_lockouts_total.
const (
	LockoutTrip    = "trip"
	LockoutRefused = "refused"
	LockoutError   = "error"
)

// ChargeMetrics counts the charged limits' work:
//
//	extauthz_charge_checks_total{route,limit,outcome}     request-path checks
//	extauthz_charges_total{route,limit,kind,result}       response-path charges
//	extauthz_charged_cost_total{route,limit}              summed hits charged (reservations included)
//	extauthz_charge_refunded_total{route,limit}           summed hits refunded (reservations not used)
//	extauthz_lockouts_total{route,limit,event}            lockout trips, refusals while locked, store errors
//	extauthz_charge_keys_unreadable_total{route,limit,reason}  requests whose key could not be read
//
// route and limit are the policy's names, so the series are bounded by it;
// each charged limit's series exist at 0 once its policy is seen.
// Several servers may share one registry: the constructor reuses
// collectors already registered there.
type ChargeMetrics struct {
	checks, charges, cost, refunded, lockouts, unreadable *prometheus.CounterVec

	mu     sync.Mutex
	synced atomic.Pointer[policy.HTTP] // the HTTP policy whose limits have series
}

// NewChargeMetrics registers the charged-limit metrics on reg.
func NewChargeMetrics(reg prometheus.Registerer) (*ChargeMetrics, error) {
	if reg == nil {
		return nil, errors.New("envoy: nil prometheus registerer")
	}
	m := &ChargeMetrics{}
	for _, c := range []struct {
		dst        **prometheus.CounterVec
		name, help string
		labels     []string
	}{
		{&m.checks, "extauthz_charge_checks_total", "Request-path checks of charged limits by route, limit and outcome (ok, over_limit, locked, error).", []string{"outcome"}},
		{&m.charges, "extauthz_charges_total", "Response-path charges of charged limits by route, limit, kind (outcome, cost) and result (within, spent, refund, missing, error).", []string{"kind", "result"}},
		{&m.cost, "extauthz_charged_cost_total", "Hits charged to charged limits (costs, reservations, counted outcomes) by route and limit.", nil},
		{&m.refunded, "extauthz_charge_refunded_total", "Hits refunded to charged limits (a reservation above the real cost, an outcome's hit its status did not count, a request that did not run) by route and limit.", nil},
		{&m.lockouts, "extauthz_lockouts_total", "Lockout events of charged limits by route, limit and event (trip, refused, error).", []string{"event"}},
		{&m.unreadable, "extauthz_charge_keys_unreadable_total", "Requests whose charged limit's key could not be read, by route, limit and reason (missing, too_large, unparsable, too_many_values, no_address); each got the key's unreadable choice.", []string{"reason"}},
	} {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: c.name, Help: c.help}, append([]string{"route", "limit"}, c.labels...))
		var err error
		if *c.dst, err = registerShared(reg, v); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// discardChargeMetrics counts into a registry nobody reads: the default of
// servers built without WithCharges.
func discardChargeMetrics() *ChargeMetrics {
	m, _ := NewChargeMetrics(prometheus.NewRegistry())
	return m
}

// syncPolicy creates, at 0, the series of every charged limit of h the
// first time h is seen (one atomic load otherwise), as the idempotency
// metrics do for routes.
func (m *ChargeMetrics) syncPolicy(h *policy.HTTP) {
	if h == nil || m.synced.Load() == h {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.synced.Load() == h {
		return
	}
	for _, r := range h.Routes {
		for _, c := range allCharged(r) {
			m.precreate(r.Name, c)
		}
	}
	m.synced.Store(h)
}

func (m *ChargeMetrics) precreate(route string, c *policy.ChargedLimit) {
	name, kind := c.Limit.Name, chargeKind(c)
	for _, o := range []string{ChargeCheckOK, ChargeCheckOverLimit, ChargeCheckError} {
		m.checks.WithLabelValues(route, name, o)
	}
	results := []string{ChargeWithin, ChargeSpent, ChargeRefund, ChargeError}
	m.refunded.WithLabelValues(route, name)
	if kind == ChargeKindCost {
		results = append(results, ChargeMissing)
	}
	for _, r := range results {
		m.charges.WithLabelValues(route, name, kind, r)
	}
	m.cost.WithLabelValues(route, name)
	for _, reason := range unreadableReasons(c.Charge.Key) {
		m.unreadable.WithLabelValues(route, name, reason)
	}
	if c.Charge.Lockout != nil {
		m.checks.WithLabelValues(route, name, ChargeCheckLocked)
		for _, e := range []string{LockoutTrip, LockoutRefused, LockoutError} {
			m.lockouts.WithLabelValues(route, name, e)
		}
	}
}

// unreadableReasons are the reasons a key of its kind may be unreadable.
func unreadableReasons(k policy.ChargeKey) []string {
	switch {
	case k.Kind == policy.ChargeKeyClientAddress:
		return []string{KeyNoAddress}
	case k.NeedsBody():
		return []string{KeyMissing, KeyTooLarge, KeyUnparsable, KeyTooManyValues}
	case k.IsAccount():
		return []string{KeyMissing}
	}
	return nil
}

// allCharged lists a route's charged limits, its own and its tiers'.
func allCharged(r *policy.Route) []*policy.ChargedLimit {
	out := r.Charged
	if r.Tiers != nil {
		for _, cs := range r.Tiers.Charged {
			out = append(out[:len(out):len(out)], cs...)
		}
	}
	return out
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

// reservedHits counts an outcome limit's hit reserved with its check:
// charged, though its charge event is its status's.
func (m *ChargeMetrics) reservedHits(route, limit string, hits int64) {
	m.cost.WithLabelValues(route, limit).Add(float64(hits))
}

func (m *ChargeMetrics) keyUnreadable(route, limit, reason string) {
	m.unreadable.WithLabelValues(route, limit, reason).Inc()
}

func (m *ChargeMetrics) lockout(route, limit, event string) {
	m.lockouts.WithLabelValues(route, limit, event).Inc()
}
