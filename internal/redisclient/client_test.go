package redisclient

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
)

// TestNewOptions: both kinds of client get the URL's settings and every
// setting New decides (pool, retries, dial attempts, timeouts).
func TestNewOptions(t *testing.T) {
	t.Parallel()
	c, err := New(Options{URL: "redis://user:pw@127.0.0.1:7000/2", PoolSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("standalone URL gave %T", c)
	}
	o := rc.Options()
	if o.PoolSize != 7 || o.DB != 2 || o.Password != "pw" || o.ReadTimeout != DefaultReadTimeout ||
		o.WriteTimeout != DefaultWriteTimeout || o.DialTimeout != DefaultDialTimeout || o.MaxRetries > 0 || o.DialerRetries != 1 ||
		!o.ContextTimeoutEnabled || o.PipelinePoolSize >= 0 {
		t.Fatalf("options %+v", o)
	}

	cc, err := New(Options{URL: "redis://127.0.0.1:7000?addr=127.0.0.1:7001", Cluster: true, PoolSize: 5, ReadTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cco := cc.(*redis.ClusterClient).Options()
	if len(cco.Addrs) != 2 || cco.PoolSize != 5 || cco.ReadTimeout != 20*time.Millisecond || cco.WriteTimeout != DefaultWriteTimeout ||
		cco.DialTimeout != DefaultDialTimeout || cco.MaxRetries > 0 || cco.DialerRetries != 1 || !cco.ContextTimeoutEnabled || cco.PipelinePoolSize >= 0 {
		t.Fatalf("cluster options %+v", cco)
	}
}

func TestNewTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := []Options{
		{URL: "redis://h:1", TLSInsecureSkipVerify: true},
		{URL: "redis://h:1", TLSCAFile: empty},
		{URL: "rediss://h:1", TLSCAFile: filepath.Join(dir, "missing.pem")},
		{URL: "rediss://h:1", TLSCAFile: empty},
		{URL: "http://h:1"},
		{URL: ""},
	}
	for _, o := range bad {
		if _, err := New(o); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", o, err)
		}
	}
	c, err := New(Options{URL: "rediss://redis.example:6380", TLSInsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*redis.Client).Options().TLSConfig
	if tc == nil || !tc.InsecureSkipVerify || tc.ServerName != "redis.example" {
		t.Fatalf("TLS config %+v", tc)
	}
	cc, err := New(Options{URL: "rediss://redis.example:6380", Cluster: true, TLSInsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if tc := cc.(*redis.ClusterClient).Options().TLSConfig; tc == nil || !tc.InsecureSkipVerify || tc.ServerName != "redis.example" {
		t.Fatalf("cluster TLS config %+v", tc)
	}
}

// TestPipelinesShareTheWarmPool: a pipeline after a command reuses the
// connection that command dialed, instead of dialing a second one from a
// separate pipeline pool in the middle of a burst.
func TestPipelinesShareTheWarmPool(t *testing.T) {
	srv := redistest.Standalone(t)
	admin := srv.Client()
	c, err := New(Options{URL: srv.URL, ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		p.Ping(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// admin's own connection plus ours.
	if n := len(strings.Split(strings.TrimSpace(admin.ClientList(ctx).Val()), "\n")); n != 2 {
		t.Fatalf("Redis sees %d client connections, want 2 (admin and one shared by commands and pipelines):\n%s", n, admin.ClientList(ctx).Val())
	}
}
