package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestHungRedisIsAnsweredWithinTheCallTimeout: the service's Redis stack
// as wired here, with Redis paused (connections open, nothing answers) and
// no deadline from the caller: a decision is answered by the failure mode
// (open: the fallback admits) within EXTAUTHZ_REDIS_CALL_TIMEOUT plus
// slack, not after the client's read timeouts. The timeout is enforced by
// the Redis store per round trip; this guards that wiring.
func TestHungRedisIsAnsweredWithinTheCallTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	cfg := defaultConfig(t)
	cfg.RedisURL = srv.URL
	cfg.FailureMode = "open"
	cfg.RedisCallTimeout = 200 * time.Millisecond
	cfg.RedisReadTimeout = 10 * time.Second // only the call timeout can end the wait
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := newRedisStore(cfg, storeDeps{Registerer: prometheus.NewRegistry(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := t.Context()
	if err := store.(warmer).Warm(ctx); err != nil {
		t.Fatal(err)
	}
	limit := ratelimit.Limit{Requests: 10, Period: time.Hour}
	if _, err := store.Allow(ctx, "hung", limit, 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	res, err := store.Allow(ctx, "hung", limit, 1)
	if took := time.Since(start); err != nil || !res.Allowed || took > 2*time.Second {
		t.Fatalf("hung Redis: %+v, %v after %s; want the fallback's admission within the 200ms call timeout (+ slack)", res, err, took)
	}
}
