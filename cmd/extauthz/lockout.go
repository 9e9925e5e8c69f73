package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// chargeDeps is what the charged limits (a route limit's `charge`) need
// beside the rate-limit store: the lockout store and their metrics.
type chargeDeps struct {
	lockouts lockout.Store
	metrics  *authz.ChargeMetrics
}

// newCharges builds the lockout store beside the rate-limit store and the
// charged limits' metrics. The lockouts are in memory (bounded by
// EXTAUTHZ_MEMORY_MAX_KEYS) until the Redis lockout store is wired.
func newCharges(cfg Config, _ ratelimit.Store, reg prometheus.Registerer, log *slog.Logger) (chargeDeps, error) {
	m, err := authz.NewChargeMetrics(reg)
	if err != nil {
		return chargeDeps{}, err
	}
	log.Info("lockout store", "kind", "memory")
	return chargeDeps{lockouts: lockoutmem.New(lockoutmem.Config{MaxKeys: cfg.MemoryMaxKeys}), metrics: m}, nil
}
