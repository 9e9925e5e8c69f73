package failover_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	ratefailover "github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
	lockoutredis "github.com/extauthz/extauthz/pkg/ratelimit/lockout/redisstore"
)

// TestClusterBreakerPerNode: on a real 3-master cluster with one master
// paused (SIGSTOP), that master's keys go to the in-process fallback once
// its breaker opens (each call then answered at once), while the keys of
// the other masters are still decided by Redis: a lockout set there by
// another replica during the pause is seen.
func TestClusterBreakerPerNode(t *testing.T) {
	// cluster-node-timeout 5s: the test is done before the paused master
	// is marked failed (and every node answers CLUSTERDOWN).
	cl := redistest.NewCluster(t)
	// The client as the service builds it: calls end at their deadline.
	client, err := redisclient.New(redisclient.Options{URL: cl.URL, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rs, err := lockoutredis.New(client, lockoutredis.Options{Prefix: "fo"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := lockoutredis.New(client, lockoutredis.Options{Prefix: "fo"}) // another replica's store, unguarded
	if err != nil {
		t.Fatal(err)
	}
	s, err := failover.New(rs, failover.Options{Mode: ratefailover.Open, Fallback: memstore.New(memstore.Config{}),
		StoreOptions: breaker.StoreOptions{Registerer: prometheus.NewRegistry(), FailureThreshold: 2, CoolDown: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	paused := cl.Addrs[0]
	var hung, healthy string
	for i := 0; hung == "" || healthy == ""; i++ {
		k := fmt.Sprintf("login|198.51.100.%d", i)
		switch node := rs.Node(ctx, k); {
		case node == "":
			t.Fatalf("no node for %q: the slot map is unknown", k)
		case node == paused && hung == "":
			hung = k
		case node != paused && healthy == "":
			healthy = k
		}
	}
	p := lockout.Policy{Initial: time.Hour, Factor: 2, Max: time.Hour}
	cl.Server(paused).Pause()
	defer cl.Server(paused).Resume()

	call := func(key string) (time.Duration, time.Duration) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		begin := time.Now()
		d, _, err := s.Trip(cctx, key, p)
		if err != nil {
			t.Fatalf("Trip(%s): %v", key, err)
		}
		return d, time.Since(begin)
	}
	for i := range 2 { // wait for the timeout, then open the paused node's breaker
		if _, took := call(hung); took > time.Second {
			t.Fatalf("call %d took %v", i, took)
		}
	}
	if d, took := call(hung); d <= 59*time.Minute || took > 100*time.Millisecond {
		t.Fatalf("paused master's key, breaker open: %v in %v; want the fallback's lockout at once", d, took)
	}
	if _, _, err := other.Trip(ctx, healthy, p); err != nil {
		t.Fatal(err)
	}
	left, err := s.Locked(ctx, healthy)
	if err != nil || left <= 59*time.Minute {
		t.Fatalf("healthy master's key locked by another replica: %v, %v; want Redis's lockout", left, err)
	}
}
