package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// TestClusterLostAcquireIsNotResent: on the 3-master cluster, through a
// proxy that holds one reply past the client's read timeout, an Acquire
// reaches Redis once (go-redis's cluster client retries timed-out commands
// by default; the store's commands opt out). The lost reply's slot is held
// in Redis, unknown to the caller, until its ttl frees it.
func TestClusterLostAcquireIsNotResent(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	direct := cl.Client()
	for _, src := range redisstore.Scripts() {
		err := direct.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			return m.ScriptLoad(ctx, src).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p := redistest.NewHoldingProxy(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, Dialer: p.Dial, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: "noretry"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "warm-up", 1, time.Minute); err != nil {
		t.Fatal(err)
	}

	p.Hold(1500 * time.Millisecond)
	if _, _, err := s.Acquire(ctx, "lost", 5, 3*time.Second); err == nil {
		t.Fatal("Acquire succeeded although its reply was held past the read timeout")
	}
	time.Sleep(2 * time.Second) // let anything re-sent reach Redis
	key := s.Key("lost")
	if n := p.Sent(key); n != 1 {
		t.Fatalf("Acquire reached Redis %d times, want 1", n)
	}
	if n := direct.ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("%d slots held after the lost Acquire, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for direct.Exists(ctx, key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lost Acquire's slot did not expire with its ttl")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
