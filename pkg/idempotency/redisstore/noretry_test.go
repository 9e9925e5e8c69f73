package redisstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/redisstore"
)

// TestClusterLostRepliesAreNotResent: on the 3-master cluster, through a
// proxy that holds one reply past the client's read timeout, a Begin and a
// Complete each reach Redis once (go-redis's cluster client retries timed-
// out commands by default; the store's commands opt out), and the caller's
// own retry of the Complete finds its work done and succeeds.
func TestClusterLostRepliesAreNotResent(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	direct := cl.Client()
	loadScripts(t, direct)
	p := redistest.NewHoldingProxy(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, Dialer: p.Dial, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: "noretry"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, fp, ttls := context.Background(), idempotency.NewFingerprint("POST", "/", nil, nil), idempotency.TTLs{Lease: time.Minute, Record: time.Hour}
	key := s.Key("t", "lost-begin")
	// Connect to every node while replies still flow.
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, "t", "warm-up", fp, ttls); err != nil {
		t.Fatal(err)
	}

	p.Hold(1500 * time.Millisecond)
	if _, err := s.Begin(ctx, "t", "lost-begin", fp, ttls); err == nil {
		t.Fatal("Begin succeeded although its reply was held past the read timeout")
	}
	time.Sleep(2 * time.Second) // let anything re-sent reach Redis
	if n := p.Sent(key); n != 1 {
		t.Fatalf("Begin reached Redis %d times, want 1", n)
	}
	if st, err := direct.HGet(ctx, key, "st").Result(); err != nil || st != "p" {
		t.Fatalf("record state %q, %v; want the lost Begin's lease", st, err)
	}

	o, err := s.Begin(ctx, "t", "lost-complete", fp, ttls)
	if err != nil || o.Kind != idempotency.Acquired {
		t.Fatalf("Begin: %v %v", o.Kind, err)
	}
	want := idempotency.Response{Status: 201, Body: []byte("created")}
	p.Hold(1500 * time.Millisecond)
	if err := s.Complete(ctx, o.Lease, want); err == nil {
		t.Fatal("Complete succeeded although its reply was held past the read timeout")
	}
	time.Sleep(2 * time.Second)
	if n := p.Sent(s.Key("t", "lost-complete")); n != 2 { // Begin + one Complete
		t.Fatalf("Begin and Complete reached Redis %d times, want 2", n)
	}
	if err := s.Complete(ctx, o.Lease, want); err != nil {
		t.Fatalf("the caller's retry of Complete: %v, want nil (already stored)", err)
	}
	if r, err := s.Begin(ctx, "t", "lost-complete", fp, ttls); err != nil || r.Kind != idempotency.Replay || string(r.Response.Body) != "created" {
		t.Fatalf("Begin after = %v %+v %v, want the stored reply", r.Kind, r.Response, err)
	}
}

// loadScripts loads every script on every master, so that no EVALSHA in
// the test falls back to EVAL (which would count as a second request).
func loadScripts(t *testing.T, c *redis.ClusterClient) {
	t.Helper()
	for _, f := range []string{"begin.lua", "complete.lua", "release.lua", "renew.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		err = c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			return m.ScriptLoad(ctx, string(src)).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
