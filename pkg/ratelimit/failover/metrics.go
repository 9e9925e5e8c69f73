package failover

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Fallback reasons, the values of the reason label.
const (
	reasonError       = "error"
	reasonCircuitOpen = "circuit_open"
)

type metrics struct {
	errors      prometheus.Counter
	fallbacks   *prometheus.CounterVec
	circuitOpen prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, mode Mode) (metrics, error) {
	m := metrics{
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "extauthz_redis_errors_total",
			Help: "Rate-limit calls to Redis that failed (error or timeout).",
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "extauthz_redis_fallback_decisions_total",
			Help:        "Rate-limit requests decided without Redis: by the in-process store (mode open) or denied (mode closed).",
			ConstLabels: prometheus.Labels{"mode": string(mode)},
		}, []string{"reason"}),
		circuitOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_redis_circuit_open",
			Help: "Redis nodes (cluster masters; 1 for one server) whose circuit breaker skips them after consecutive failures; nodes that left the slot map are not counted.",
		}),
	}
	for _, c := range []prometheus.Collector{m.errors, m.fallbacks, m.circuitOpen} {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				return m, fmt.Errorf("%w: metrics already registered", ErrInvalidOptions)
			}
			return m, fmt.Errorf("failover metrics: %w", err)
		}
	}
	// Both reasons appear from the start, so rate() sees the first one.
	m.fallbacks.WithLabelValues(reasonError)
	m.fallbacks.WithLabelValues(reasonCircuitOpen)
	return m, nil
}

// registerReplicas exports the fallback's divisor, read when scraped.
func (m *metrics) registerReplicas(reg prometheus.Registerer, replicas func() int64) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "extauthz_redis_fallback_replicas",
		Help: "The number of replicas the fail-open fallback divides each limit by (the live replicas last seen in Redis, or EXTAUTHZ_FALLBACK_REPLICAS).",
	}, func() float64 { return float64(replicas()) })
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("failover metrics: %w", err)
	}
	return nil
}
