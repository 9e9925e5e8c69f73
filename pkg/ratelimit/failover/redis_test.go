package failover_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// onRedis builds the production stack on a real server: client from a URL,
// Redis store, failure wrapper with the given mode.
func onRedis(t *testing.T, srv *redistest.Server, mode failover.Mode) (*failover.Store, *prometheus.Registry) {
	t.Helper()
	client, err := redisclient.New(redisclient.Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := failover.Options{Mode: mode, Registerer: reg} // production defaults
	if mode == failover.Open {
		opts.Fallback = newMem(t, nil)
	}
	s, err := failover.New(rs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, reg
}

// hourly is charged 500 hits through Redis first, so a fallback answer
// (a fresh in-process state) shows Remaining >= 500.
var hourly = ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1000, Period: time.Hour}

func TestRedisOutageFailOpen(t *testing.T) {
	srv := redistest.Standalone(t)
	s, reg := onRedis(t, srv, failover.Open)
	ctx := context.Background()
	key := "tenant|api|user=1"
	if res, err := s.Allow(ctx, key, hourly, 500); err != nil || res.Remaining != 500 {
		t.Fatalf("warm-up through Redis: %+v, %v", res, err)
	}
	warm := runtime.NumGoroutine()

	srv.Stop()
	for i := 0; i < 50; i++ {
		res, err := s.Allow(ctx, key, hourly, 1)
		if err != nil {
			t.Fatalf("call %d with Redis down: %v", i, err)
		}
		if !res.Allowed || res.Remaining < 500 {
			t.Fatalf("call %d with Redis down: %+v, want the fallback's admission", i, res)
		}
	}
	fallbacks := sumMetric(t, reg, "extauthz_redis_fallback_decisions_total")
	if fallbacks != 50 {
		t.Fatalf("fallback metric %v after 50 calls with Redis down, want 50", fallbacks)
	}
	if err := s.Ready(ctx); err == nil {
		t.Fatal("Ready with Redis down: nil, want the reason")
	}

	srv.Start()
	waitForRedis(t, s, reg, key)
	assertNoGoroutineGrowth(t, warm)
}

func TestRedisOutageFailClosed(t *testing.T) {
	srv := redistest.Standalone(t)
	s, reg := onRedis(t, srv, failover.Closed)
	ctx := context.Background()
	key := "tenant|api|user=2"
	if res, err := s.Allow(ctx, key, hourly, 500); err != nil || !res.Allowed {
		t.Fatalf("warm-up through Redis: %+v, %v", res, err)
	}
	srv.Stop()
	for i := 0; i < 20; i++ {
		res, err := s.Allow(ctx, key, hourly, 1)
		if err != nil || res.Allowed || res.RetryAfter != failover.DefaultDeniedRetryAfter {
			t.Fatalf("call %d with Redis down: %+v, %v; want a denial", i, res, err)
		}
	}
	if n := sumMetric(t, reg, "extauthz_redis_fallback_decisions_total"); n != 20 {
		t.Fatalf("fail-closed metric %v, want 20", n)
	}
	srv.Start()
	waitForRedis(t, s, reg, key)
}

// TestRedisHungTimesOut: a paused Redis (no answer at all) is a timeout
// after the per-operation budget, not a hang.
func TestRedisHungTimesOut(t *testing.T) {
	srv := redistest.Standalone(t)
	s, _ := onRedis(t, srv, failover.Open)
	ctx := context.Background()
	if _, err := s.Allow(ctx, "k", hourly, 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	res, err := s.Allow(ctx, "k", hourly, 1)
	if took := time.Since(start); err != nil || !res.Allowed || took > 500*time.Millisecond {
		t.Fatalf("hung Redis: %+v, %v after %v; want a fallback admission within the 50ms budget (+ slack)", res, err, took)
	}
}

// TestUnreachableAtStart: construction succeeds with no Redis, Ready says
// why, and the store connects once Redis comes up.
func TestUnreachableAtStart(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Stop()
	s, _ := onRedis(t, srv, failover.Open)
	ctx := context.Background()
	err := s.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "redis unreachable") {
		t.Fatalf("Ready with no Redis: %v, want 'redis unreachable'", err)
	}
	if _, err := s.Allow(ctx, "k", hourly, 1); err != nil {
		t.Fatalf("Allow with no Redis (fail-open): %v", err)
	}
	srv.Start()
	deadline := time.Now().Add(2 * time.Second)
	for s.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 2s after Redis started: %v", s.Ready(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForRedis calls the store until a decision comes from Redis (no
// fallback counted for it), failing after 2 s.
func waitForRedis(t *testing.T, s *failover.Store, reg *prometheus.Registry, key string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	for {
		before := sumMetric(t, reg, "extauthz_redis_fallback_decisions_total")
		_, err := s.Allow(ctx, key, hourly, 1)
		if err == nil && sumMetric(t, reg, "extauthz_redis_fallback_decisions_total") == before {
			t.Logf("Redis decisions resumed %v after restart", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("no Redis decision within 2s of restart: %v", s.Ready(ctx))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func assertNoGoroutineGrowth(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		now := runtime.NumGoroutine()
		if now <= before+3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines grew from %d to %d across the outage", before, now)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

// TestReadyRecoversWithoutTraffic: a circuit opened during an outage closes
// through Ready alone once Redis is back (a replica taken out of service by
// its readiness probe receives no traffic that could probe).
func TestReadyRecoversWithoutTraffic(t *testing.T) {
	srv := redistest.Standalone(t)
	s, reg := onRedis(t, srv, failover.Open)
	ctx := context.Background()
	srv.Stop()
	for i := 0; i < failover.DefaultFailureThreshold; i++ {
		_, _ = s.Allow(ctx, "k", hourly, 1)
	}
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "circuit open") {
		t.Fatalf("Ready after %d failures: %v, want an open circuit", failover.DefaultFailureThreshold, err)
	}
	srv.Start()
	deadline := time.Now().Add(2 * time.Second)
	for s.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 2s after Redis restarted: %v", s.Ready(ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if open := sumMetric(t, reg, "extauthz_redis_circuit_open"); open != 0 {
		t.Fatalf("circuit gauge %v after recovery, want 0", open)
	}
}
