package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// storeDeps is what building a store may need besides the configuration.
type storeDeps struct {
	// Registerer takes the store's metrics.
	Registerer prometheus.Registerer
	// Logger reports the store's state changes (connect, fail over).
	Logger *slog.Logger
	// Now is the clock of in-process stores; nil is the system clock.
	Now func() time.Time
}

// readiness is implemented by stores that can be not ready yet (a Redis
// store before its first successful round trip); /readyz asks it.
type readiness interface {
	Ready(ctx context.Context) error
}

// newStore builds the rate-limit store the configuration selects: the Redis
// stack when EXTAUTHZ_REDIS_URL is set (store_redis.go), else the embedded
// memory store (state per process, so each replica counts alone).
func newStore(_ context.Context, cfg Config, deps storeDeps) (ratelimit.Store, error) {
	if cfg.RedisURL != "" {
		return newRedisStore(cfg, deps) // store_redis.go
	}
	s, err := memstore.New(memstore.Options{Now: deps.Now, MaxKeys: cfg.MemoryMaxKeys})
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	deps.Logger.Info("rate limit store", "kind", "memory", "max_keys", cfg.MemoryMaxKeys)
	return s, nil
}
