package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/lockouttest"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/redisstore"
)

// client is what the tests need of a standalone, Sentinel or cluster
// client.
type client interface {
	redisstore.Processor
	redis.Cmdable
}

func newStore(t *testing.T, c client, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func harness(c client) lockouttest.Harness {
	return lockouttest.Harness{
		New: func(t *testing.T) lockout.Store { return newStore(t, c, "test") },
		// Lockouts end on Redis's clock (TIME), so time has to pass for
		// real; a unit of 200ms leaves room for a loaded machine's stalls.
		Advance: func(_ *testing.T, _ lockout.Store, d time.Duration) { time.Sleep(d) },
		Unit:    200 * time.Millisecond,
	}
}

func TestStandalone(t *testing.T) {
	c := redistest.Standalone(t).Client()
	t.Run("Suite", func(t *testing.T) { lockouttest.Run(t, harness(c)) })
	t.Run("Layout", func(t *testing.T) { testLayout(t, c) })
	t.Run("GrowthAsPolicyNext", func(t *testing.T) { testGrowthAsNext(t, c) })
}

func TestCluster(t *testing.T) {
	c := redistest.NewCluster(t).Client()
	t.Run("Suite", func(t *testing.T) { lockouttest.Run(t, harness(c)) })
	t.Run("Layout", func(t *testing.T) { testLayout(t, c) })
}

// TestSentinel: the store through the client the service builds for
// Sentinel (redisclient.New, a failover client).
func TestSentinel(t *testing.T) {
	s := redistest.NewSentinel(t)
	c, err := redisclient.New(redisclient.Options{URL: "redis://:" + redistest.SentinelDataPassword + "@/0",
		SentinelAddrs: s.Addrs, SentinelMaster: redistest.SentinelMaster, SentinelPassword: redistest.SentinelPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	lockouttest.Run(t, harness(c))
}

// testLayout: one hash per key under one hash tag, with the trips, the
// latest lockout and its end, expiring Forget after the lockout ends.
func testLayout(t *testing.T, c client) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, c, "lay")
	key := lockouttest.Key(t) + "{x}:y"
	k := s.Key(key)
	if !strings.HasPrefix(k, "lay:lock:{") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
		t.Fatalf("key %q: want one hash tag after lay:lock:", k)
	}
	p := lockout.Policy{Initial: 10 * time.Second, Factor: 2, Max: time.Minute, Forget: 30 * time.Second}
	if _, _, err := s.Trip(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, k).Val(); ttl < 39*time.Second || ttl > 40*time.Second {
		t.Fatalf("key TTL %v, want the lockout's 10s + forget's 30s", ttl)
	}
	h, err := c.HGetAll(ctx, k).Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["n"] != "1" || h["d"] != "10000" || len(h) != 3 {
		t.Fatalf("hash %v, want n 1, d 10000 and u", h)
	}
	if _, err := s.Locked(ctx, key+"-absent"); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, s.Key(key+"-absent")).Val(); n != 0 {
		t.Fatal("Locked wrote a key")
	}
}

// testGrowthAsNext: with a factor whose products are not whole, the
// script's lockouts are exactly Policy.Next's, trip after trip.
func testGrowthAsNext(t *testing.T, c client) {
	t.Parallel()
	ctx := context.Background()
	s, key := newStore(t, c, "next"), lockouttest.Key(t)
	p := lockout.Policy{Initial: 7 * time.Millisecond, Factor: 1.37, Max: 300 * time.Millisecond}
	var want time.Duration
	for i := range 14 {
		want = p.Next(want)
		d, n, err := s.Trip(ctx, key, p)
		if err != nil || d != want || n != int64(i+1) {
			t.Fatalf("trip %d = %v, %d, %v; want %v", i+1, d, n, err, want)
		}
		time.Sleep(d + 5*time.Millisecond)
	}
	if want != p.Max {
		t.Fatalf("the chain ended at %v, below the cap: lengthen it", want)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := redisstore.New(nil, redisstore.Options{}); err == nil {
		t.Error("nil client accepted")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := redisstore.New(c, redisstore.Options{Prefix: "a{b"}); err == nil {
		t.Error("prefix with a brace accepted")
	}
	if err := newStore(t, c, "").Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
