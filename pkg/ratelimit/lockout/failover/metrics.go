package failover

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	ratefailover "github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

// Fallback reasons, the values of the reason label (the rate-limit
// failover's).
const (
	reasonError       = "error"
	reasonCircuitOpen = "circuit_open"
)

type metrics struct {
	errors      prometheus.Counter
	circuitOpen prometheus.Gauge
	fallbacks   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, mode ratefailover.Mode) (metrics, error) {
	m := metrics{
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "extauthz_lockout_store_errors_total",
			Help: "Lockout store calls to Redis that failed (error or timeout).",
		}),
		circuitOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_lockout_store_circuit_open",
			Help: "Redis nodes (cluster masters; 1 for one server) whose circuit breaker skips lockout calls after consecutive failures.",
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "extauthz_lockout_fallback_decisions_total",
			Help:        "Lockout calls answered without Redis: by the in-process store (mode open) or as locked (mode closed).",
			ConstLabels: prometheus.Labels{"mode": string(mode)},
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.errors, m.circuitOpen, m.fallbacks} {
		if err := reg.Register(c); err != nil {
			return m, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	// Both reasons appear from the start, so rate() sees the first one.
	m.fallbacks.WithLabelValues(reasonError)
	m.fallbacks.WithLabelValues(reasonCircuitOpen)
	return m, nil
}
