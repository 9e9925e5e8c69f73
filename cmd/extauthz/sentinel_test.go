package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	idemredis "github.com/extauthz/extauthz/pkg/idempotency/redisstore"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// sentinelConfig is the configuration of a Redis found through s.
func sentinelConfig(t *testing.T, s *redistest.Sentinel) Config {
	t.Helper()
	cfg := defaultConfig(t)
	cfg.RedisURL = "redis://:" + redistest.SentinelDataPassword + "@/0"
	cfg.RedisSentinelAddrs = strings.Join(s.Addrs, ",")
	cfg.RedisSentinelMaster = redistest.SentinelMaster
	cfg.RedisSentinelPassword = redistest.SentinelPassword
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fallbackCount sums extauthz_redis_fallback_decisions_total in reg.
func fallbackCount(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "extauthz_redis_fallback_decisions_total" {
			for _, m := range mf.GetMetric() {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// TestSentinelFailoverUnderLoad: the stores as the process builds them
// (Redis store, failure mode open with its breaker, local cache; the
// idempotency store behind its guard) on a master found through three
// sentinels. SENTINEL FAILOVER while 8 workers decide rate limits: no
// caller gets an error, the decisions taken without Redis are counted, and
// a few seconds later every decision is on Redis again, on the new master;
// idempotency records written after the switch are on the new master.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	s := redistest.NewSentinel(t)
	cfg := sentinelConfig(t, s)
	// The subject is the switch to the new master, not the call timeout:
	// deadlines a loaded machine meets, so that only the failover sends
	// decisions to the failure mode.
	cfg.RedisCallTimeout, cfg.RedisReadTimeout, cfg.RedisWriteTimeout = 2*time.Second, time.Second, time.Second
	reg := prometheus.NewRegistry()
	var logBuf syncBuffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() || testing.Verbose() {
			var lines []string
			for _, l := range strings.Split(logBuf.String(), "\n") {
				if strings.Contains(l, "sentinel:") || strings.Contains(l, "breaker") || strings.Contains(l, "WARN") {
					lines = append(lines, l)
				}
			}
			t.Logf("store log (Sentinel, breakers, warnings):\n%s", strings.Join(lines, "\n"))
		}
	}()
	store, err := newRedisStore(cfg, storeDeps{Registerer: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	idem, err := newIdempotency(cfg, store, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.(warmer).Warm(ctx); err != nil {
		t.Fatal(err)
	}

	var decisions, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	limit := ratelimit.Limit{Requests: 1_000_000, Period: time.Second}
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := store.Allow(cctx, fmt.Sprintf("w%d-k%d", w, i%1000), limit, 1)
				cancel()
				if err != nil {
					errs.Add(1)
				}
				decisions.Add(1)
				// Paced like traffic (up to 8,000 decisions a second in all):
				// fallback answers come from memory at once, and a loop
				// without pause takes every CPU from Redis and the sentinels
				// (SENTINEL_TEST_UNPACED=1 runs it so: the worst case).
				if os.Getenv("SENTINEL_TEST_UNPACED") == "" {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	// Sample the fallback counter every 10 ms: the last change after the
	// failover is when decisions were back on Redis for good.
	type sample struct {
		at time.Time
		n  int
	}
	var samples []sample
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				samples = append(samples, sample{time.Now(), fallbackCount(t, reg)})
			}
		}
	}()

	time.Sleep(time.Second)
	// On a loaded machine some calls time out before any failover: they
	// are reported apart.
	fellBefore := fallbackCount(t, reg)
	before := decisions.Load()
	old := s.Master()
	scriptsBefore := 0 // on the replica about to be promoted
	for _, n := range s.Nodes {
		if n != old {
			scriptsBefore = scriptCalls(t, n)
		}
	}
	begin := time.Now()
	next := s.Failover()
	settled := time.Since(begin)
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	<-sampled

	total := fallbackCount(t, reg)
	last := begin
	for i := 1; i < len(samples); i++ {
		if samples[i].n != samples[i-1].n {
			last = samples[i].at
		}
	}
	backAfter := last.Sub(begin)
	t.Logf("failover %s -> %s: sentinels settled %s after SENTINEL FAILOVER; %d decisions in all (%d before it, %d of those "+
		"in the failure mode), %d in the failure mode since, the last %s after SENTINEL FAILOVER; %d errors to callers",
		old.Addr, next.Addr, settled.Round(time.Millisecond), decisions.Load(), before, fellBefore, total-fellBefore,
		backAfter.Round(time.Millisecond), errs.Load())
	if errs.Load() != 0 {
		t.Errorf("%d decisions returned an error, want 0 (failure mode open)", errs.Load())
	}
	if end := samples[len(samples)-1].at; end.Sub(last) < 2*time.Second {
		t.Errorf("decisions still fell back %s before the end of the run, want none for the last 2s", end.Sub(last).Round(time.Millisecond))
	}
	// The decisions' keys live a millisecond (a GCRA key expires when its
	// bucket is full again), so the new master's key count says nothing;
	// the scripts it ran do. As a replica it ran none: replication sends a
	// script's effects, not the script.
	if ran := scriptCalls(t, next) - scriptsBefore; ran == 0 {
		t.Errorf("the new master ran no rate-limit script after the switch, want the decisions after it")
	}
	idempotencyOnNewMaster(t, cfg, idem.store, store.(*redisBacked), next)
}

// idempotencyOnNewMaster completes records through st (retrying while its
// breaker still cools down from the failover) and finds every one on the
// new master.
func idempotencyOnNewMaster(t *testing.T, cfg Config, st idempotency.Store, rb *redisBacked, next *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	keys, err := idemredis.New(rb.client, idemredis.Options{Prefix: cfg.KeyPrefix}) // for its Key only
	if err != nil {
		t.Fatal(err)
	}
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}
	fp := idempotency.NewFingerprint("POST", "/orders", []byte("{}"), nil)
	deadline := time.Now().Add(5 * time.Second)
	for i := range 50 {
		key := fmt.Sprint("after-failover-", i)
		var out idempotency.Outcome
		for {
			if out, err = st.Begin(ctx, "acme", key, fp, ttls); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || out.Kind != idempotency.Acquired {
			t.Fatalf("Begin %s: %v, %v", key, out.Kind, err)
		}
		if err := st.Complete(ctx, out.Lease, idempotency.Response{Status: 201, Body: []byte("created")}); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
		st, err := next.Client().HGet(ctx, keys.Key("acme", key), "st").Result()
		if err != nil || st != "c" {
			t.Errorf("record %s on the new master %s: state %q, %v; want completed", key, next.Addr, st, err)
		}
	}
}

// syncBuffer is a strings.Builder safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestSentinelConfigRules: every misuse of the Sentinel variables is one
// line naming the variable, and the sentinels' password never appears.
func TestSentinelConfigRules(t *testing.T) {
	t.Parallel()
	ok := defaultConfig(t)
	ok.RedisURL, ok.RedisSentinelAddrs, ok.RedisSentinelMaster, ok.RedisSentinelPassword = "redis://:pw@/0", "a:26379, b:26379", "m", "s3cret"
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid Sentinel config: %v", err)
	}
	if got := ok.sentinelAddrs(); len(got) != 2 || got[1] != "b:26379" {
		t.Errorf("sentinelAddrs = %q", got)
	}
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"URL with a host":      {func(c *Config) { c.RedisURL = "redis://:pw@redis:6379/0" }, "EXTAUTHZ_REDIS_URL="},
		"no URL":               {func(c *Config) { c.RedisURL = "" }, "EXTAUTHZ_REDIS_SENTINEL_ADDRS="},
		"cluster too":          {func(c *Config) { c.RedisCluster = true }, "EXTAUTHZ_REDIS_SENTINEL_ADDRS="},
		"address without port": {func(c *Config) { c.RedisSentinelAddrs = "a:26379,b" }, "EXTAUTHZ_REDIS_SENTINEL_ADDRS="},
		"no master":            {func(c *Config) { c.RedisSentinelMaster = "" }, "EXTAUTHZ_REDIS_SENTINEL_MASTER="},
		"master alone":         {func(c *Config) { c.RedisSentinelAddrs = "" }, "EXTAUTHZ_REDIS_SENTINEL_MASTER="},
		"password alone": {func(c *Config) { c.RedisSentinelAddrs, c.RedisSentinelMaster = "", "" },
			"EXTAUTHZ_REDIS_SENTINEL_PASSWORD="},
	} {
		cfg := ok
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: Validate() = %v; want a line naming %s, without the password", name, err, c.want)
		}
	}
}

// scriptCalls is how many script calls (EVALSHA, EVAL) srv has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, _, _ := strings.Cut(rest, ",")
				v, err := strconv.Atoi(calls)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				n += v
			}
		}
	}
	return n
}
