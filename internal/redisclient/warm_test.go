package redisclient

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/internal/redistest"
)

var warmScripts = []string{"return 1", "return 2"}

// loaded fails t unless every warm script is in node's script cache.
func loaded(t *testing.T, node *redis.Client) {
	t.Helper()
	var shas []string
	for _, s := range warmScripts {
		shas = append(shas, redisscript.New(s).SHA())
	}
	got, err := node.ScriptExists(context.Background(), shas...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range got {
		if !ok {
			t.Errorf("%s: script %q not loaded", node.Options().Addr, warmScripts[i])
		}
	}
}

// clients counts the client connections a server has, besides admin's.
func clients(t *testing.T, admin *redis.Client) int {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Split(strings.TrimSpace(list), "\n")) - 1
}

// TestWarmStandalone: Warm leaves the scripts loaded and the connections
// open and idle in the pool, where the next calls find them.
func TestWarmStandalone(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	admin := srv.Client()
	c, err := New(Options{URL: srv.URL, ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Warm(t.Context(), c, warmScripts, 4); err != nil {
		t.Fatal(err)
	}
	loaded(t, admin)
	if n := clients(t, admin); n != 4 {
		t.Errorf("%d connections after Warm(4), want 4", n)
	}
	if st := c.PoolStats(); st.IdleConns != 4 {
		t.Errorf("pool %+v, want 4 idle connections", st)
	}
	// Four concurrent calls find their connections already open.
	done := make(chan error, 4)
	for range 4 {
		go func() { done <- c.Ping(t.Context()).Err() }()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := clients(t, admin); n != 4 {
		t.Errorf("%d connections after 4 concurrent calls, want the 4 warmed", n)
	}
}

func TestWarmCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	c, err := New(Options{URL: cl.URL, Cluster: true, ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Warm(t.Context(), c, warmScripts, 2); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		loaded(t, n.Client())
	}
}

func TestWarmSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinel(t)
	c, err := New(Options{URL: "redis://:" + redistest.SentinelDataPassword + "@/0", SentinelAddrs: s.Addrs,
		SentinelMaster: redistest.SentinelMaster, SentinelPassword: redistest.SentinelPassword,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Warm(t.Context(), c, warmScripts, 2); err != nil {
		t.Fatal(err)
	}
	loaded(t, s.Master().Client())
}

func TestWarmRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	srv.Stop()
	c, err := New(Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := Warm(ctx, c, warmScripts, 2); err == nil {
		t.Fatal("Warm succeeded with Redis down")
	}
	srv.Start()
	if err := Warm(ctx, c, warmScripts, 2); err != nil {
		t.Fatalf("Warm after Redis came back: %v", err)
	}
}
