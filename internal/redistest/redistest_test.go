package redistest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
)

func TestStandaloneRestartKeepsAddress(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a stopped server")
	}
	s.Start()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	// No persistence: a restart starts empty.
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0 (no persistence)", n, err)
	}
	if _, err := redis.ParseURL(s.URL); err != nil {
		t.Fatalf("URL %q: %v", s.URL, err)
	}
}

func TestClusterSpreadsSlotsOverThreeMasters(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	if len(cl.Addrs) != 3 {
		t.Fatalf("Addrs = %v, want 3", cl.Addrs)
	}
	opts, err := redis.ParseClusterURL(cl.URL)
	if err != nil || len(opts.Addrs) != 3 {
		t.Fatalf("ParseClusterURL(%q) = %v, %v", cl.URL, opts, err)
	}
	c := cl.Client()
	ctx := context.Background()
	var mu sync.Mutex
	masters := map[string]bool{}
	for _, k := range []string{"{a}", "{b}", "{c}", "{d}", "{e}", "{f}", "{g}", "{h}"} {
		if err := c.Set(ctx, k, "1", time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if n > 0 {
			mu.Lock()
			masters[m.Options().Addr] = true
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("keys landed on %d masters, want 3", len(masters))
	}
}

func TestClusterWithReplicas(t *testing.T) {
	t.Parallel()
	cl := redistest.NewClusterWithReplicas(t)
	if len(cl.Nodes) != 3 || len(cl.Replicas) != 3 {
		t.Fatalf("%d masters, %d replicas; want 3 and 3", len(cl.Nodes), len(cl.Replicas))
	}
	for _, r := range cl.Replicas {
		info, err := r.Client().Info(context.Background(), "replication").Result()
		if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			t.Errorf("%s: %v %q, want a replica in sync", r.Addr, err, info)
		}
	}
}

// TestSentinelFailover: the sentinels promote the replica on SENTINEL
// FAILOVER, and data written before it is on the new master.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinel(t)
	if len(s.Addrs) != 3 || len(s.Nodes) != 2 {
		t.Fatalf("%d sentinels, %d data nodes; want 3 and 2", len(s.Addrs), len(s.Nodes))
	}
	old := s.Master()
	ctx := context.Background()
	if err := old.Client().Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := old.Client().Wait(ctx, 1, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	next := s.Failover()
	t.Logf("failover settled in %s", time.Since(begin).Round(time.Millisecond))
	if next == old || s.Master() != next {
		t.Fatalf("master %s after failover, was %s", s.Master().Addr, old.Addr)
	}
	if v, err := next.Client().Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k on the new master = %q, %v", v, err)
	}
	if info, err := next.Client().Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("new master's INFO replication = %q, %v", info, err)
	}
}
