package main

import (
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

// janitors counts the memory stores' background sweep goroutines.
func janitors() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "memstore.(*Store).janitor")
}

// TestRedisStackErrorClosesWhatItBuilt: when a later layer of the Redis
// stack fails to build, the layers already built (the fallback memory store
// and its sweep goroutine) are closed, not leaked. Not parallel: it counts
// goroutines process-wide.
func TestRedisStackErrorClosesWhatItBuilt(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	taken := []string{"extauthz_redis_errors_total", "extauthz_ratelimit_allotment_leases_total", "extauthz_ratelimit_local_cache_hits_total"}
	for _, name := range taken {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "taken"}))
		before := janitors()
		cfg := Config{LocalCache: true}
		if _, err := redisStack(client, failover.Open, cfg, storeDeps{Registerer: reg}, newRedisEvents(slog.New(slog.DiscardHandler), false), nil); err == nil {
			t.Fatalf("%s already registered: redisStack succeeded, want an error", name)
		}
		if after := janitors(); after != before {
			t.Errorf("%s already registered: %d sweep goroutines before, %d after the failed build", name, before, after)
		}
	}
}
