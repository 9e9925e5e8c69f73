package redisclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
)

// TestNewSentinelOptions: a Sentinel client takes the master's credentials
// and DB from the URL, the sentinels' password on its own, and every
// setting New decides for the other kinds.
func TestNewSentinelOptions(t *testing.T) {
	t.Parallel()
	c, err := New(Options{URL: "redis://user:pw@/3", SentinelAddrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m",
		SentinelPassword: "spw", PoolSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("Sentinel options gave %T, want *redis.Client (the stores treat it as a standalone server)", c)
	}
	o := rc.Options()
	if o.PoolSize != 7 || o.DB != 3 || o.Username != "user" || o.Password != "pw" || o.ReadTimeout != DefaultReadTimeout ||
		o.DialTimeout != DefaultDialTimeout || o.MaxRetries > 0 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled ||
		o.PipelinePoolSize >= 0 || o.TLSConfig != nil {
		t.Fatalf("options %+v", o)
	}
	tc, err := New(Options{URL: "rediss://:pw@/0", SentinelAddrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if tls := tc.(*redis.Client).Options().TLSConfig; tls == nil || tls.ServerName != "" {
		t.Fatalf("rediss:// TLS config %+v, want one that verifies each dialled address", tls)
	}
}

func TestNewSentinelRejects(t *testing.T) {
	t.Parallel()
	addrs := []string{"127.0.0.1:26379"}
	for name, o := range map[string]Options{
		"cluster too":     {URL: "redis://", Cluster: true, SentinelAddrs: addrs, SentinelMaster: "m"},
		"no master name":  {URL: "redis://", SentinelAddrs: addrs},
		"no addresses":    {URL: "redis://", SentinelMaster: "m"},
		"URL with a host": {URL: "redis://redis:6379/0", SentinelAddrs: addrs, SentinelMaster: "m"},
		"address no port": {URL: "redis://", SentinelAddrs: []string{"sentinel"}, SentinelMaster: "m"},
	} {
		if c, err := New(o); !errors.Is(err, ErrConfig) {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}

// TestSentinelClientFollowsFailover: a client built by New writes to the
// master the sentinels name, and after SENTINEL FAILOVER to the promoted
// replica, within a few seconds and without being rebuilt.
func TestSentinelClientFollowsFailover(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinel(t)
	c, err := New(Options{URL: "redis://:" + redistest.SentinelDataPassword + "@/0", SentinelAddrs: s.Addrs,
		SentinelMaster: redistest.SentinelMaster, SentinelPassword: redistest.SentinelPassword,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "before", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Master().Client().Exists(ctx, "before").Result(); err != nil || n != 1 {
		t.Fatalf("key written through Sentinel not on the master: %d, %v", n, err)
	}
	next := s.Failover()
	begin := time.Now()
	for {
		// A write still reaching the old master (not yet a replica) would
		// be lost; the client must drop those connections on +switch-master.
		err := c.Set(ctx, "after", begin.String(), time.Minute).Err()
		v, _ := next.Client().Get(ctx, "after").Result()
		if err == nil && v == begin.String() {
			break
		}
		if time.Since(begin) > 5*time.Second {
			t.Fatalf("5s after the failover writes do not reach the new master %s (last error %v)", next.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("writes on the new master %s after the failover settled", time.Since(begin).Round(time.Millisecond))
}
