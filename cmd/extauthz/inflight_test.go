package main

import (
	"context"
	"crypto/sha1" //nolint:gosec // Redis names scripts by SHA-1
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	inflightguard "github.com/extauthz/extauthz/pkg/ratelimit/inflight/guard"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
	inflightredis "github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// TestInFlightStore: without Redis the slots are in memory; with Redis
// they are shared, so a slot one replica took is released by another's
// store (the ext_proc stream may end on any replica).
func TestInFlightStore(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem, err := newInFlight(Config{}, nil, prometheus.NewRegistry(), log)
	if _, ok := mem.(*inflightmem.Store); !ok || err != nil {
		t.Fatalf("without Redis: %T, %v; want *memstore.Store", mem, err)
	}

	srv := redistest.Standalone(t)
	replica := func() inflight.Store {
		client, err := redisclient.New(redisclient.Options{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		s, err := newInFlight(Config{KeyPrefix: "xa"}, &redisBacked{client: client, events: newRedisEvents(log, false)}, prometheus.NewRegistry(), log)
		if _, ok := s.(*inflightguard.Store); !ok || err != nil {
			t.Fatalf("with Redis: %T, %v; want *guard.Store", s, err)
		}
		return s
	}
	a, b := replica(), replica()
	ctx := context.Background()
	slot, r, err := a.Acquire(ctx, "acme|reports", 1, time.Minute)
	if err != nil || !r.Acquired {
		t.Fatalf("Acquire on replica a: %+v, %v", r, err)
	}
	if _, r, err := b.Acquire(ctx, "acme|reports", 1, time.Minute); err != nil || r.Acquired {
		t.Fatalf("Acquire on replica b while a holds the only slot: %+v, %v; want refused", r, err)
	}
	if ok, err := b.Release(ctx, "acme|reports", slot); !ok || err != nil {
		t.Fatalf("Release on replica b: %v, %v", ok, err)
	}
	if _, r, err := b.Acquire(ctx, "acme|reports", 1, time.Minute); err != nil || !r.Acquired {
		t.Fatalf("Acquire after release: %+v, %v", r, err)
	}
}

// TestInFlightStoreBreaker: with Redis gone, after
// EXTAUTHZ_REDIS_BREAKER_THRESHOLD failures the store answers
// inflight.ErrUnavailable without trying Redis, and the circuit is logged.
func TestInFlightStoreBreaker(t *testing.T) {
	var logged syncBuffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	srv := redistest.Standalone(t)
	client, err := redisclient.New(redisclient.Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cfg := Config{KeyPrefix: "xa", RedisBreakerThreshold: 2, RedisBreakerPause: time.Hour}
	s, err := newInFlight(cfg, &redisBacked{client: client, events: newRedisEvents(log, false)}, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx := context.Background()
	for i := range 2 {
		if _, _, err := s.Acquire(ctx, "acme|reports", 1, time.Minute); err == nil || errors.Is(err, inflight.ErrUnavailable) {
			t.Fatalf("call %d with Redis stopped: %v, want Redis's error", i, err)
		}
	}
	if _, _, err := s.Acquire(ctx, "acme|reports", 1, time.Minute); !errors.Is(err, inflight.ErrUnavailable) {
		t.Fatalf("after 2 failures: %v, want ErrUnavailable (circuit open)", err)
	}
	if !strings.Contains(logged.String(), "store=inflight") || !strings.Contains(logged.String(), "circuit breaker open") {
		t.Errorf("log %q, want the in-flight circuit opening", logged.String())
	}
}

// TestWarmLoadsInFlightScripts: the Redis warm-up loads the in-flight
// store's scripts with the others, so a first Acquire after readiness
// runs EVALSHA, not a cold EVAL.
func TestWarmLoadsInFlightScripts(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := defaultConfig(t)
	cfg.RedisURL = srv.URL
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := newRedisStore(cfg, storeDeps{Registerer: prometheus.NewRegistry(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.(warmer).Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	var shas []string
	for _, src := range inflightredis.Scripts() {
		shas = append(shas, fmt.Sprintf("%x", sha1.Sum([]byte(src))))
	}
	loaded, err := srv.Client().ScriptExists(t.Context(), shas...).Result()
	if err != nil || len(loaded) != len(shas) || slices.Contains(loaded, false) {
		t.Errorf("in-flight scripts loaded: %v, %v; want all", loaded, err)
	}
}
