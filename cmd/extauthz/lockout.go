package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
	lockoutredis "github.com/extauthz/extauthz/pkg/ratelimit/lockout/redisstore"
)

// chargeDeps is what the charged limits (a route limit's `charge`) need
// beside the rate-limit store: the lockout store and their metrics.
type chargeDeps struct {
	lockouts lockout.Store
	metrics  *authz.ChargeMetrics
}

// newCharges builds the lockout store beside the rate-limit store, and the
// charged limits' metrics: in Redis on the same client when
// EXTAUTHZ_REDIS_URL is set (keys <prefix>:lock:{...}, shared by every
// replica, so a key locked by one is locked for all), else in memory
// (bounded by EXTAUTHZ_MEMORY_MAX_KEYS). A lockout store failure is
// answered like a rate-limit store failure on the request path (Envoy's
// failure mode decides) and counted on the response path; there is no
// per-process fallback, whose lockouts each replica would keep apart.
func newCharges(cfg Config, rl ratelimit.Store, reg prometheus.Registerer, log *slog.Logger) (chargeDeps, error) {
	m, err := authz.NewChargeMetrics(reg)
	if err != nil {
		return chargeDeps{}, err
	}
	rb, ok := rl.(*redisBacked)
	if !ok {
		log.Info("lockout store", "kind", "memory")
		return chargeDeps{lockouts: lockoutmem.New(lockoutmem.Config{MaxKeys: cfg.MemoryMaxKeys}), metrics: m}, nil
	}
	s, err := lockoutredis.New(rb.client, lockoutredis.Options{Prefix: cfg.KeyPrefix})
	if err != nil {
		return chargeDeps{}, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
	}
	log.Info("lockout store", "kind", "redis", "key_prefix", cfg.KeyPrefix)
	return chargeDeps{lockouts: s, metrics: m}, nil
}
