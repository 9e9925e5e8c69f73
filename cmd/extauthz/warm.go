package main

import (
	"context"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// warmRetryPause is the pause between failed warm-up attempts.
const warmRetryPause = 250 * time.Millisecond

// warmMaxWait bounds how long warm-up holds health NOT_SERVING. Past it
// the process serves anyway, in the failure mode while Redis does not
// answer: a fleet that restarts during a Redis outage must not leave Envoy
// without endpoints, which would turn the outage into one of extauthz (the
// reason health stays SERVING during an outage). Warm-up goes on.
const warmMaxWait = 30 * time.Second

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
// NOT_SERVING (for at most warmMaxWait) and /readyz 503 until one attempt
// succeeds. Attempts, each bounded by attempt, repeat until then: a Redis
// that is down at start-up keeps the process out of rotation for a while,
// it does not end it.
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
func (s *server) startWarmUp(ctx context.Context, attempt, maxWait time.Duration) {
	w, ok := s.store.(warmer)
	if !ok {
		return
	}
	s.warm = &warmUp{}
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	go s.runWarmUp(ctx, w, attempt, maxWait)
}

func (s *server) runWarmUp(ctx context.Context, w warmer, attempt, maxWait time.Duration) {
	begin := time.Now()
	giveUp := time.AfterFunc(maxWait, func() {
		if s.warm.notReady() == "" {
			return
		}
		s.setServing(healthpb.HealthCheckResponse_SERVING)
		s.log.Warn("redis warm-up not done: serving anyway, decisions follow the failure mode until Redis answers; still warming",
			"waited", maxWait, "reason", s.warm.notReady())
	})
	defer giveUp.Stop()
	tries, ok := retryWarm(ctx, w.Warm, attempt, func(try int, err error) {
		s.warm.mu.Lock()
		s.warm.err = err
		s.warm.mu.Unlock()
		if try == 1 {
			s.log.Warn("redis warm-up failed: not serving until it succeeds (at most max_wait), retrying", "err", err,
				"attempt_timeout", attempt, "retry_pause", warmRetryPause, "max_wait", maxWait)
		}
	})
	if !ok {
		return
	}
	s.warm.mu.Lock()
	s.warm.done, s.warm.err = true, nil
	s.warm.mu.Unlock()
	// After a SIGTERM the health server ignores this (Shutdown).
	s.setServing(healthpb.HealthCheckResponse_SERVING)
	s.log.Info("redis warmed up: connections open, scripts loaded; serving",
		"elapsed", time.Since(begin).Round(time.Millisecond), "attempts", tries)
}

// retryWarm calls warm, each call bounded by attempt, until it succeeds
// (ok) or ctx ends, pausing warmRetryPause after each failure, which it
// reports to failed first.
func retryWarm(ctx context.Context, warm func(context.Context) error, attempt time.Duration, failed func(try int, err error)) (tries int, ok bool) {
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := warm(actx)
		cancel()
		if ctx.Err() != nil {
			return try, false
		}
		if err == nil {
			return try, true
		}
		failed(try, err)
		select {
		case <-ctx.Done():
			return try, false
		case <-time.After(warmRetryPause):
		}
	}
}

// rewarmer warms the client again, in the background, while a circuit
// breaker is open. After a failover (Sentinel or Cluster) or a Redis
// restart, a call's own deadline (EXTAUTHZ_REDIS_CALL_TIMEOUT, 50 ms) must
// cover asking a sentinel for the master, dialling, authenticating and
// loading the script. On a busy machine it does not: each call times out
// and throws its half-made connection away, and so does the breaker's one
// probe a second, for as long as the load lasts (seen in
// TestSentinelFailoverUnderLoad). Warm dials and loads under the Redis
// timeouts instead, outside any call, so the next probe finds both ready.
type rewarmer struct {
	warm    func(context.Context) error
	attempt time.Duration
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	open    map[string]bool // "store node" of each open breaker
	running bool
}

func newRewarmer(warm func(context.Context) error, attempt time.Duration) *rewarmer {
	ctx, stop := context.WithCancel(context.Background())
	return &rewarmer{warm: warm, attempt: attempt, ctx: ctx, stop: stop, open: map[string]bool{}}
}

// breaker is told of a breaker opening or closing; the first to open
// starts warming, which goes on until every breaker closed.
func (r *rewarmer) breaker(store, node string, open bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if open {
		r.open[store+" "+node] = true
	} else {
		delete(r.open, store+" "+node)
	}
	if !open || r.running || r.ctx.Err() != nil {
		return
	}
	r.running = true
	r.wg.Go(r.run)
}

// run warms until every breaker closed, warming at least once after each
// success (a warm-up on the old master, just before the switch, does not
// count: its connections are dropped).
func (r *rewarmer) run() {
	for {
		_, ok := retryWarm(r.ctx, r.warm, r.attempt, func(int, error) {})
		r.mu.Lock()
		if !ok || len(r.open) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		select {
		case <-r.ctx.Done():
		case <-time.After(warmRetryPause):
		}
	}
}

// close stops warming and waits for the attempt under way.
func (r *rewarmer) close() {
	r.stop()
	r.wg.Wait()
}

// setServing sets every registered service and the server ("") to status.
func (s *server) setServing(status healthpb.HealthCheckResponse_ServingStatus) {
	// Nothing serves before the policy does (xds.go): a warm-up ending
	// first must not announce a process that has no limits yet.
	if status == healthpb.HealthCheckResponse_SERVING && s.policy != nil && s.policy.policyNotReady() != "" {
		status = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, status)
	}
	s.health.SetServingStatus("", status)
}
