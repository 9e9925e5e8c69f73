package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/guard"
	idemmem "github.com/extauthz/extauthz/pkg/idempotency/memstore"
	idemredis "github.com/extauthz/extauthz/pkg/idempotency/redisstore"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// errWaitShort marks a completed record fewer replicas acknowledged than
// asked: logged (as its own kind), not an error of the request.
var errWaitShort = errors.New("replication wait short")

// idempotencyDeps is what the ext_authz and ext_proc servers share: the
// Idempotency-Key store and its outcome counters, and the store of
// max_in_flight slots (inflight.go), handed over the same way.
type idempotencyDeps struct {
	store    idempotency.Store
	events   *authz.IdempotencyMetrics
	inFlight inflight.Store
	charges  chargeDeps
}

// The guard keeps one breaker per cluster master through this.
var _ guard.Router = (*idemredis.Store)(nil)

// newIdempotency builds the idempotency store beside the rate-limit store:
// in Redis on the same client when EXTAUTHZ_REDIS_URL is set (keys
// <prefix>:idem:{...}; the client is closed with the rate-limit store),
// else in memory. Failure handling is per route (the policy's
// idempotency.failure_mode), not EXTAUTHZ_FAILURE_MODE: a lease cannot
// fall back to a per-process store without breaking its guarantee. The
// Redis store sits behind a circuit breaker (guard, with the rate-limit
// failover's EXTAUTHZ_REDIS_BREAKER_* settings) so that while Redis is down
// requests get their failure_mode at once instead of each waiting for
// EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT.
func newIdempotency(cfg Config, rl ratelimit.Store, reg prometheus.Registerer, log *slog.Logger) (idempotencyDeps, error) {
	events, err := authz.NewIdempotencyMetricsWith(reg, cfg.idempotencyMetricsOptions())
	if err != nil {
		return idempotencyDeps{}, err
	}
	inFlight, err := newInFlight(cfg, rl, reg, log)
	if err != nil {
		return idempotencyDeps{}, err
	}
	charges, err := newCharges(cfg, rl, reg, log)
	if err != nil {
		return idempotencyDeps{}, err
	}
	rb, ok := rl.(*redisBacked)
	if !ok {
		log.Info("idempotency store", "kind", "memory")
		return idempotencyDeps{store: idemmem.New(idemmem.Config{MaxKeys: cfg.IdempotencyMemoryMaxKeys}), events: events, inFlight: inFlight, charges: charges}, nil
	}
	rs, err := idemredis.New(rb.client, idemredis.Options{Prefix: cfg.KeyPrefix, Wait: idemredis.Wait{
		Replicas: cfg.IdempotencyWaitReplicas, Timeout: cfg.IdempotencyWaitTimeout,
		Short: func(_ string, acked int64) {
			rb.events.onError("idempotency", "", fmt.Errorf("%w: WAIT: %d of EXTAUTHZ_IDEMPOTENCY_WAIT_REPLICAS=%d replicas acknowledged within %s",
				errWaitShort, acked, cfg.IdempotencyWaitReplicas, cfg.IdempotencyWaitTimeout))
		},
	}})
	if err != nil {
		return idempotencyDeps{}, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
	}
	store, err := guard.New(rs, guard.Options{
		Registerer: reg, FailureThreshold: cfg.RedisBreakerThreshold, CoolDown: cfg.RedisBreakerPause,
		OnError:  func(node string, err error) { rb.events.onError("idempotency", node, err) },
		OnChange: func(node string, open bool, err error) { rb.events.onChange("idempotency", node, open, err) },
	})
	if err != nil {
		return idempotencyDeps{}, err
	}
	log.Info("idempotency store", "kind", "redis", "key_prefix", cfg.KeyPrefix, "wait_replicas", cfg.IdempotencyWaitReplicas)
	return idempotencyDeps{store: store, events: events, inFlight: inFlight, charges: charges}, nil
}
