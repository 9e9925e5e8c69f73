package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	inflightguard "github.com/extauthz/extauthz/pkg/ratelimit/inflight/guard"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
	inflightredis "github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// The guard keeps one breaker per cluster master through this.
var _ inflightguard.Router = (*inflightredis.Store)(nil)

// newInFlight builds the store of max_in_flight slots beside the
// rate-limit store: in Redis on the same client when EXTAUTHZ_REDIS_URL is
// set (keys <prefix>:if:{...}, shared by every replica, so that any
// replica's ext_proc releases a slot another's ext_authz took), else in
// memory (bounded by EXTAUTHZ_MEMORY_MAX_KEYS). A store failure is
// answered like a rate-limit store failure: ext_authz returns Unavailable
// and Envoy's failure_mode_allow decides. There is no fallback to a
// per-process store: per-replica slots would admit N per replica. The
// Redis store sits behind a circuit breaker (guard, with the rate-limit
// failover's EXTAUTHZ_REDIS_BREAKER_* settings) so that while Redis is
// down the answer comes at once instead of after the store timeout.
func newInFlight(cfg Config, rl ratelimit.Store, reg prometheus.Registerer, log *slog.Logger) (inflight.Store, error) {
	rb, ok := rl.(*redisBacked)
	if !ok {
		log.Info("in-flight store", "kind", "memory")
		return inflightmem.New(inflightmem.Config{MaxKeys: cfg.MemoryMaxKeys}), nil
	}
	s, err := inflightredis.New(rb.client, inflightredis.Options{Prefix: cfg.KeyPrefix})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
	}
	guarded, err := inflightguard.New(s, inflightguard.Options{
		Registerer: reg, FailureThreshold: cfg.RedisBreakerThreshold, CoolDown: cfg.RedisBreakerPause,
		OnError:  func(node string, err error) { rb.events.onError("inflight", node, err) },
		OnChange: func(node string, open bool, err error) { rb.events.onChange("inflight", node, open, err) },
	})
	if err != nil {
		return nil, err
	}
	log.Info("in-flight store", "kind", "redis", "key_prefix", cfg.KeyPrefix)
	return guarded, nil
}
