package main

import (
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

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

// janitorsSettled is janitors once it is at most want, or after 2s: a
// leaked janitor never returns, while one of another test's stores that is
// closing (a server still shutting down) returns within moments.
func janitorsSettled(want int) int {
	n := janitors()
	for deadline := time.Now().Add(2 * time.Second); n > want && time.Now().Before(deadline); n = janitors() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
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
		before := janitorsSettled(0)
		cfg := Config{LocalCache: true}
		if _, err := redisStack(client, failover.Open, cfg, storeDeps{Registerer: reg}, newRedisEvents(slog.New(slog.DiscardHandler), false), nil); err == nil {
			t.Fatalf("%s already registered: redisStack succeeded, want an error", name)
		}
		if after := janitorsSettled(before); after > before {
			t.Errorf("%s already registered: %d sweep goroutines before, %d after the failed build", name, before, after)
		}
	}
}
