package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	lockoutfailover "github.com/extauthz/extauthz/pkg/ratelimit/lockout/failover"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
	lockoutredis "github.com/extauthz/extauthz/pkg/ratelimit/lockout/redisstore"
)

// chargeDeps is what the charged limits (a route limit's `charge`) need
// beside the rate-limit store: the lockout store and their metrics.
type chargeDeps struct {
	lockouts lockout.Store
	metrics  *authz.ChargeMetrics
	// keySecret hashes accounts (EXTAUTHZ_CHARGE_KEY_SECRET[_FILE]); nil:
	// one drawn per process (no Redis, or no account keys: policysrc.go).
	keySecret []byte
}

// newCharges builds the lockout store beside the rate-limit store, and the
// charged limits' metrics: in Redis on the same client when
// EXTAUTHZ_REDIS_URL is set (keys <prefix>:lock:{...}, shared by every
// replica, so a key locked by one is locked for all), else in memory
// (bounded by EXTAUTHZ_MEMORY_MAX_KEYS). The Redis store answers by
// EXTAUTHZ_FAILURE_MODE as the rate limits do, behind circuit breakers with
// their EXTAUTHZ_REDIS_BREAKER_* settings (lockout/failover): open, an
// in-process lockout store decides while Redis fails (the lockouts this
// replica saw still hold); closed, every key with a lockout is refused.
func newCharges(cfg Config, rl ratelimit.Store, reg prometheus.Registerer, log *slog.Logger) (chargeDeps, error) {
	m, err := authz.NewChargeMetrics(reg)
	if err != nil {
		return chargeDeps{}, err
	}
	secret, err := cfg.chargeKeySecret()
	if err != nil {
		return chargeDeps{}, fmt.Errorf("EXTAUTHZ_CHARGE_KEY_SECRET_FILE: %w", err)
	}
	rb, ok := rl.(*redisBacked)
	if !ok {
		log.Info("lockout store", "kind", "memory")
		return chargeDeps{lockouts: lockoutmem.New(lockoutmem.Config{MaxKeys: cfg.MemoryMaxKeys}), metrics: m, keySecret: secret}, nil
	}
	s, err := lockoutredis.New(rb.client, lockoutredis.Options{Prefix: cfg.KeyPrefix})
	if err != nil {
		return chargeDeps{}, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
	}
	guarded, err := lockoutFailover(cfg, s, rb.events, reg)
	if err != nil {
		return chargeDeps{}, err
	}
	log.Info("lockout store", "kind", "redis", "key_prefix", cfg.KeyPrefix, "failure_mode", cfg.FailureMode)
	return chargeDeps{lockouts: guarded, metrics: m, keySecret: secret}, nil
}

// The failover keeps one breaker per cluster master through this.
var _ lockoutfailover.Router = (*lockoutredis.Store)(nil)

// lockoutFailover wraps the Redis lockout store in EXTAUTHZ_FAILURE_MODE
// and the breakers.
func lockoutFailover(cfg Config, s *lockoutredis.Store, events *redisEvents, reg prometheus.Registerer) (*lockoutfailover.Store, error) {
	mode, err := failover.ParseMode(cfg.FailureMode)
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_FAILURE_MODE: %w", err)
	}
	var fallback *lockoutmem.Store
	if mode == failover.Open {
		fallback = lockoutmem.New(lockoutmem.Config{MaxKeys: cfg.MemoryMaxKeys})
	}
	return lockoutfailover.New(s, lockoutfailover.Options{Mode: mode, Fallback: fallback,
		StoreOptions: breaker.StoreOptions{
			Registerer: reg, FailureThreshold: cfg.RedisBreakerThreshold, CoolDown: cfg.RedisBreakerPause,
			OnError:  func(node string, err error) { events.onError("lockout", node, err) },
			OnChange: func(node string, open bool, err error) { events.onChange("lockout", node, open, err) },
		}})
}
