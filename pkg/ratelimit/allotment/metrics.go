package allotment

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Values of the "source" label of extauthz_ratelimit_allotment_decisions_total.
const (
	sourceLocal = "local" // decided from a slice or a remembered refusal
	sourceStore = "store" // a lease in the request's path decided it
	sourceCold  = "cold"  // a cold key without a slice, decided on the store as exact
)

// leasable are the algorithms an allotment may use, the values of the
// algorithm label.
var leasable = []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow, ratelimit.SlidingWindow}

type metrics struct {
	leases    *prometheus.CounterVec // algorithm, kind
	tokens    *prometheus.CounterVec // algorithm
	lapsed    *prometheus.CounterVec // algorithm
	decisions *prometheus.CounterVec // source
	// The decisions counters by source, resolved once: a decision costs
	// no label lookup.
	local, store, cold prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, t *table) (metrics, error) {
	m := metrics{
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_ratelimit_allotment_leases_total",
			Help: "Slices of allotment limits leased from the store: kind sync in a request's path, prefetch in the background.",
		}, []string{"algorithm", "kind"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_ratelimit_allotment_tokens_leased_total",
			Help: "Tokens (hits) of allotment limits leased from the store, charged to the shared count when leased.",
		}, []string{"algorithm"}),
		lapsed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_ratelimit_allotment_tokens_lapsed_total",
			Help: "Leased tokens that lapsed unused: the estimate of hits allotment did not admit that exact decisions could have.",
		}, []string{"algorithm"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_ratelimit_allotment_decisions_total",
			Help: "Decisions of allotment limits: source local from a leased slice, store when a lease in the request's path decided, cold when a key without a slice (seen once within the horizon) was decided on the store as exact.",
		}, []string{"source"}),
	}
	slices := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "extauthz_ratelimit_allotment_slices",
		Help: "Slices (key and allotment limit) this replica holds, idle ones included until evicted.",
	}, func() float64 { return float64(t.len()) })
	for _, c := range []prometheus.Collector{m.leases, m.tokens, m.lapsed, m.decisions, slices} {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				return m, fmt.Errorf("%w: metrics already registered", ErrInvalidOptions)
			}
			return m, fmt.Errorf("allotment metrics: %w", err)
		}
	}
	// Every label value appears from the start, so rate() sees the first.
	for _, a := range leasable {
		m.leases.WithLabelValues(string(a), "sync")
		m.leases.WithLabelValues(string(a), "prefetch")
		m.tokens.WithLabelValues(string(a))
		m.lapsed.WithLabelValues(string(a))
	}
	m.local = m.decisions.WithLabelValues(sourceLocal)
	m.store = m.decisions.WithLabelValues(sourceStore)
	m.cold = m.decisions.WithLabelValues(sourceCold)
	return m, nil
}

func (m metrics) lease(l ratelimit.Limit, kind string) {
	m.leases.WithLabelValues(string(l.Algorithm.OrDefault()), kind).Inc()
}

func (m metrics) leased(l ratelimit.Limit, n int64) {
	m.tokens.WithLabelValues(string(l.Algorithm.OrDefault())).Add(float64(n))
}

func (m metrics) lapsedAdd(l ratelimit.Limit, n int64) {
	if n > 0 {
		m.lapsed.WithLabelValues(string(l.Algorithm.OrDefault())).Add(float64(n))
	}
}
