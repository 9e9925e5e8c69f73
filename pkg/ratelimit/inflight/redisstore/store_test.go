package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/inflighttest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// client is what the tests need of a standalone or cluster client.
type client interface {
	redisstore.Processor
	redis.Cmdable
}

func harness(c client) inflighttest.Harness {
	return inflighttest.Harness{
		New: func(t *testing.T) inflight.Store {
			s, err := redisstore.New(c, redisstore.Options{Prefix: "test"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		// Expiry is on Redis's clock (TIME), so time has to pass for real.
		Advance: func(_ *testing.T, _ inflight.Store, d time.Duration) { time.Sleep(d) },
		TTL:     time.Second,
	}
}

func TestStandalone(t *testing.T) {
	c := redistest.Standalone(t).Client()
	t.Run("Suite", func(t *testing.T) { inflighttest.Run(t, harness(c)) })
	t.Run("Layout", func(t *testing.T) { testLayout(t, c) })
}

func TestCluster(t *testing.T) {
	c := redistest.NewCluster(t).Client()
	t.Run("Suite", func(t *testing.T) { inflighttest.Run(t, harness(c)) })
	t.Run("Layout", func(t *testing.T) { testLayout(t, c) })
}

// testLayout: one ZSET per key under a hash tag, member = slot token,
// score = expiry in ms, and a key TTL equal to the latest slot expiry, so
// idle keys vanish; a released key's last slot removes the key.
func testLayout(t *testing.T, c client) {
	t.Parallel()
	ctx := context.Background()
	s, err := redisstore.New(c, redisstore.Options{Prefix: "lay"})
	if err != nil {
		t.Fatal(err)
	}
	key := inflighttest.Key(t) + "{x}:y"
	k := s.Key(key)
	if !strings.HasPrefix(k, "lay:if:{") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
		t.Fatalf("key %q: want one hash tag after lay:if:", k)
	}
	a, _, err := s.Acquire(ctx, key, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, key, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, k).Val(); ttl < 29*time.Second || ttl > 30*time.Second {
		t.Fatalf("key TTL %v, want the latest slot's 30s", ttl)
	}
	score, err := c.ZScore(ctx, k, string(a)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(time.UnixMilli(int64(score))); d < 9*time.Second || d > 10*time.Second {
		t.Fatalf("slot expiry in %v, want 10s", d)
	}
	if _, err := s.Renew(ctx, key, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, k).Val(); ttl < 59*time.Second {
		t.Fatalf("key TTL %v after renewing a slot for 1m", ttl)
	}
	if n := c.ZCard(ctx, k).Val(); n != 2 {
		t.Fatalf("ZCARD %d, want 2", n)
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
}
