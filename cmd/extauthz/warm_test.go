package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// burnCPU keeps every CPU of the machine busy in this process until the
// returned stop is called or limit passes, as other pods on a node do
// while a fleet restarts.
func burnCPU(limit time.Duration) (stop func()) {
	var done atomic.Bool
	deadline := time.Now().Add(limit)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			x := 0
			for !done.Load() && time.Now().Before(deadline) {
				for i := range 100_000 {
					x += i
				}
			}
			_ = x
		})
	}
	return func() { done.Store(true); wg.Wait() }
}

// waitServing polls gRPC health until the whole server is SERVING and
// returns how long that took.
func waitServing(t *testing.T, p *proc, limit time.Duration) time.Duration {
	t.Helper()
	health := healthpb.NewHealthClient(p.dial(t))
	begin := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return time.Since(begin)
		}
		if time.Since(begin) > limit {
			t.Fatalf("not SERVING %s after start: %v %v\n%s", limit, h, err, p.Logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fallbacks sums extauthz_redis_fallback_decisions_total over its labels.
func fallbacks(t *testing.T, p *proc) int {
	t.Helper()
	_, body := p.get(t, "/metrics")
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "extauthz_redis_fallback_decisions_total{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			n += int(v)
		}
	}
	return n
}

// decisionTime is how long the server spent deciding its rate-limit calls
// so far (extauthz_decision_duration_seconds_sum): measured in the server,
// it leaves out the client's own scheduling delays.
func decisionTime(t *testing.T, p *proc) time.Duration {
	t.Helper()
	_, body := p.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, `extauthz_decision_duration_seconds_sum{api="ratelimit"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return time.Duration(f * float64(time.Second))
		}
	}
	return 0
}

// firstCalls sends one ShouldRateLimit call, then n-1 at once, each for
// its own user, and returns the first call's time in the server and the
// others' latencies seen by the client, sorted.
func firstCalls(t *testing.T, p *proc, n int) (time.Duration, []time.Duration) {
	t.Helper()
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	call := func(i int) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprint("first-", i)}},
		}}}
		begin := time.Now()
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("call %d: %v, %v; want OK", i, resp, err)
		}
		return time.Since(begin)
	}
	// The client's connection is set up first, so that the first call's
	// latency is the server's.
	if err := p.dial(t).Invoke(context.Background(), "/grpc.health.v1.Health/Check",
		&healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); err != nil {
		t.Fatal(err)
	}
	call(0)
	first := decisionTime(t, p)
	lat := make([]time.Duration, n-1)
	var wg sync.WaitGroup
	for i := range lat {
		wg.Go(func() { lat[i] = call(i + 1) })
	}
	wg.Wait()
	slices.Sort(lat)
	return first, lat
}

// TestWarmStartFirstCallsOnRedis: a process that says SERVING has its
// Redis connections open and scripts loaded, so its first 100 calls, at
// once and on a machine whose CPUs are all busy, are decided on Redis
// (within the default 50 ms EXTAUTHZ_REDIS_CALL_TIMEOUT): none in the
// failure mode.
func TestWarmStartFirstCallsOnRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	stop := burnCPU(30 * time.Second)
	defer stop()
	p := start(t, "EXTAUTHZ_CONFIG="+writePolicy(t), "EXTAUTHZ_REDIS_URL="+srv.URL)
	ready := waitServing(t, p, 20*time.Second)
	admin := srv.Client()
	before := redisStats(t, admin)
	first, lat := firstCalls(t, p, 100)
	stop()
	after := redisStats(t, admin)
	n := fallbacks(t, p)
	// What warm-up promises, seen from Redis: the calls found their
	// connection open and their script loaded.
	if d := after.conns - before.conns; d != 0 {
		t.Errorf("Redis accepted %d connections during the first calls, want 0 (dialled before SERVING)", d)
	}
	if after.noscript != 0 {
		t.Errorf("Redis answered NOSCRIPT %d times, want 0 (scripts loaded before SERVING)", after.noscript)
	}
	t.Logf("SERVING %s after the listeners; first call %s in the server, then 99 at once: min %s, median %s, max %s; %d in the failure mode",
		ready.Round(time.Millisecond), first.Round(time.Microsecond), lat[0].Round(time.Microsecond), lat[49].Round(time.Microsecond),
		lat[98].Round(time.Microsecond), n)
	if n != 0 {
		_, m := p.get(t, "/metrics")
		var lines []string
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "extauthz_redis_fallback") || strings.HasPrefix(l, "extauthz_redis_errors") {
				lines = append(lines, l)
			}
		}
		var warns []string
		for _, l := range strings.Split(p.Logs(), "\n") {
			if strings.Contains(l, `"WARN"`) || strings.Contains(l, "breaker") {
				warns = append(warns, l)
			}
		}
		t.Errorf("%d of the first 100 calls fell back to the in-process store, want 0\n%s\n%s", n, strings.Join(lines, "\n"), strings.Join(warns, "\n"))
	}
	if !strings.Contains(p.Logs(), "redis warmed up") {
		t.Errorf("no warm-up logged:\n%s", p.Logs())
	}
}

type redisCounts struct{ conns, noscript int }

// redisStats reads how many connections Redis accepted so far and how many
// NOSCRIPT errors it answered.
func redisStats(t *testing.T, admin *redis.Client) redisCounts {
	t.Helper()
	info, err := admin.Info(context.Background(), "stats", "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var c redisCounts
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			c.conns, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "errorstat_NOSCRIPT:count="); ok {
			c.noscript, _ = strconv.Atoi(v)
		}
	}
	return c
}

// TestWarmStartWaitsForRedis: with Redis down at start-up the process runs
// but says NOT_SERVING (gRPC health) and 503 (/readyz) instead of exiting,
// and turns SERVING by itself once Redis is up and warm-up succeeds.
func TestWarmStartWaitsForRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Stop()
	p := start(t, "EXTAUTHZ_CONFIG="+writePolicy(t), "EXTAUTHZ_REDIS_URL="+srv.URL)
	health := healthpb.NewHealthClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q with Redis down = %v, %v; want NOT_SERVING", svc, h, err)
		}
	}
	if code, body := p.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis down = %d %q, want 503", code, body)
	}
	srv.Start()
	waitServing(t, p, 10*time.Second)
	if code, body := p.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once warmed = %d %q, want 200", code, body)
	}
	if !strings.Contains(p.Logs(), "redis warm-up failed") {
		t.Errorf("the failed warm-up was not logged:\n%s", p.Logs())
	}
}

// TestRewarmerWarmsWhileABreakerIsOpen: an opening breaker starts warming,
// which repeats while any breaker is open and stops once all closed or the
// store closes.
func TestRewarmerWarmsWhileABreakerIsOpen(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	r := newRewarmer(func(context.Context) error { calls.Add(1); return nil }, time.Second)
	defer r.close()
	r.breaker("ratelimit", "", true)
	r.breaker("idempotency", "", true)
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("warmed %d times in 10s with breakers open, want repeatedly", calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.breaker("ratelimit", "", false)
	r.breaker("idempotency", "", false)
	r.mu.Lock()
	for r.running {
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("still warming 10s after every breaker closed")
		}
		time.Sleep(10 * time.Millisecond)
		r.mu.Lock()
	}
	r.mu.Unlock()
	n := calls.Load()
	time.Sleep(2 * warmRetryPause)
	if calls.Load() != n {
		t.Errorf("warmed %d more times with every breaker closed", calls.Load()-n)
	}
}

// failingWarmer is a store whose warm-up fails until ok is set.
type failingWarmer struct {
	ratelimit.Store
	ok atomic.Bool
}

func (f *failingWarmer) Warm(context.Context) error {
	if f.ok.Load() {
		return nil
	}
	return errors.New("redis down")
}

// TestWarmUpServesAfterMaxWait: a warm-up that keeps failing holds health
// NOT_SERVING for maxWait only, then the process serves in the failure
// mode (a Redis outage must not empty Envoy's endpoints), and /readyz still
// says why until the warm-up succeeds.
func TestWarmUpServesAfterMaxWait(t *testing.T) {
	t.Parallel()
	store := &failingWarmer{}
	s := &server{log: slog.New(slog.DiscardHandler), store: store}
	s.grpc, s.health = newGRPCServer(nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s.startWarmUp(ctx, time.Second, 300*time.Millisecond)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		h, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return h.GetStatus()
	}
	if st := status(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health during warm-up = %v, want NOT_SERVING", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for status() != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("still NOT_SERVING 10s after a 300ms max wait")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := s.warm.notReady(); !strings.Contains(r, "redis down") {
		t.Errorf("warm-up reason after max wait = %q, want the last error", r)
	}
	store.ok.Store(true)
	for s.warm.notReady() != "" {
		if time.Now().After(deadline) {
			t.Fatal("warm-up did not go on after the max wait")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
