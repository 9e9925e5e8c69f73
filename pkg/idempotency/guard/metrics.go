package guard

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	errors      prometheus.Counter
	circuitOpen prometheus.Gauge
}

// newMetrics registers the guard's metrics on reg. One guard per registry:
// a second is an ErrInvalidOptions.
func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "extauthz_idempotency_store_errors_total",
			Help: "Idempotency store calls that failed in the backend (error or timeout); calls refused by the open circuit are not counted.",
		}),
		circuitOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_idempotency_store_circuit_open",
			Help: "Redis nodes (cluster masters; 1 for one server) whose circuit breaker refuses idempotency store calls after consecutive failures.",
		}),
	}
	for _, c := range []prometheus.Collector{m.errors, m.circuitOpen} {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				return m, fmt.Errorf("%w: metrics already registered", ErrInvalidOptions)
			}
			return m, fmt.Errorf("idempotency guard metrics: %w", err)
		}
	}
	return m, nil
}
