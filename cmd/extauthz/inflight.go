package main

import (
	"fmt"
	"log/slog"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
	inflightredis "github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// newInFlight builds the store of max_in_flight slots beside the
// rate-limit store: in Redis on the same client when EXTAUTHZ_REDIS_URL is
// set (keys <prefix>:if:{...}, shared by every replica, so that any
// replica's ext_proc releases a slot another's ext_authz took), else in
// memory (bounded by EXTAUTHZ_MEMORY_MAX_KEYS). A store failure is
// answered like a rate-limit store failure: ext_authz returns Unavailable
// and Envoy's failure_mode_allow decides. There is no fallback to a
// per-process store: per-replica slots would admit N per replica.
func newInFlight(cfg Config, rl ratelimit.Store, log *slog.Logger) (inflight.Store, error) {
	rb, ok := rl.(*redisBacked)
	if !ok {
		log.Info("in-flight store", "kind", "memory")
		return inflightmem.New(inflightmem.Config{MaxKeys: cfg.MemoryMaxKeys}), nil
	}
	s, err := inflightredis.New(rb.client, inflightredis.Options{Prefix: cfg.KeyPrefix})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
	}
	log.Info("in-flight store", "kind", "redis", "key_prefix", cfg.KeyPrefix)
	return s, nil
}
