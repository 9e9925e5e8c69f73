package main

import (
	"context"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// warmRetryPause is the pause between failed warm-up attempts.
const warmRetryPause = 250 * time.Millisecond

// warmConns is how many connections warm-up dials per Redis master (at
// most EXTAUTHZ_REDIS_POOL_SIZE): enough for the first concurrent calls,
// whose rate-limit decisions share one round trip per node (coalescing) and
// whose idempotency calls take one connection each.
const warmConns = 8

// warmConnCount is warmConns within the pool size (0: go-redis's default,
// 10 per CPU, always more).
func (c Config) warmConnCount() int {
	if c.RedisPoolSize > 0 {
		return min(warmConns, c.RedisPoolSize)
	}
	return warmConns
}

// warmAttemptTimeout bounds one warm-up attempt: a dial (through a sentinel
// first, with Sentinel), a PING and one pipeline of SCRIPT LOADs, each
// already bounded by the Redis timeouts.
func (c Config) warmAttemptTimeout() time.Duration {
	return 2*c.RedisDialTimeout + 2*(c.RedisReadTimeout+c.RedisWriteTimeout)
}

// warmer is implemented by stores that must prepare Redis (connections,
// scripts) before the first calls can be decided there.
type warmer interface {
	Warm(ctx context.Context) error
}

// warmUp gates readiness on the store's warm-up: gRPC health says
// NOT_SERVING and /readyz 503 until one attempt succeeds. Attempts, each
// bounded by attempt, repeat until then: a Redis that is down at start-up
// keeps the process out of rotation, it does not end it.
type warmUp struct {
	mu   sync.Mutex
	done bool
	err  error
}

// notReady says why warm-up is not over, or "" when it is.
func (w *warmUp) notReady() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.done:
		return ""
	case w.err != nil:
		return "redis warm-up: " + w.err.Error()
	}
	return "redis warm-up in progress"
}

// startWarmUp sets every service NOT_SERVING when the store needs a
// warm-up, and runs it in the background until it succeeds or ctx ends.
func (s *server) startWarmUp(ctx context.Context, attempt time.Duration) {
	w, ok := s.store.(warmer)
	if !ok {
		return
	}
	s.warm = &warmUp{}
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	go s.runWarmUp(ctx, w, attempt)
}

func (s *server) runWarmUp(ctx context.Context, w warmer, attempt time.Duration) {
	begin := time.Now()
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := w.Warm(actx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.warm.mu.Lock()
		s.warm.done, s.warm.err = err == nil, err
		s.warm.mu.Unlock()
		if err == nil {
			// After a SIGTERM the health server ignores this (Shutdown).
			s.setServing(healthpb.HealthCheckResponse_SERVING)
			s.log.Info("redis warmed up: connections open, scripts loaded; serving",
				"elapsed", time.Since(begin).Round(time.Millisecond), "attempts", try)
			return
		}
		if try == 1 {
			s.log.Warn("redis warm-up failed: not serving until it succeeds, retrying", "err", err,
				"attempt_timeout", attempt, "retry_pause", warmRetryPause)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(warmRetryPause):
		}
	}
}

// setServing sets every registered service and the server ("") to status.
func (s *server) setServing(status healthpb.HealthCheckResponse_ServingStatus) {
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, status)
	}
	s.health.SetServingStatus("", status)
}
