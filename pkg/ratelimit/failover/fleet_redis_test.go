package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/fleet"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// replicaOnRedis is one replica's stack on srv: its own client, Redis
// store, presence in the fleet and failover whose fallback divides by the
// count the presence last saw.
func replicaOnRedis(t *testing.T, srv *redistest.Server) (*failover.Store, *fleet.Presence) {
	t.Helper()
	client, err := redisclient.New(redisclient.Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := fleet.New(client, fleet.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s, err := failover.New(rs, failover.Options{Fallback: newMem(t, nil), Registerer: reg, Replicas: p.Count})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, p
}

// TestThreeReplicasShareTheLimitWithRedisDown: three replicas count each
// other on one Redis; once it is stopped, every limit admits at most its
// Requests across the three within one window (each a third, rounded
// down), where each would admit all of it alone.
func TestThreeReplicasShareTheLimitWithRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	var stores []*failover.Store
	var presences []*fleet.Presence
	for range 3 {
		s, p := replicaOnRedis(t, srv)
		stores, presences = append(stores, s), append(presences, p)
	}
	ctx := context.Background()
	for _, p := range presences { // one beat each, in turn: the last sees 3
		if _, err := p.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range presences { // and now every one does
		if n, err := p.Beat(ctx); err != nil || n != 3 {
			t.Fatalf("beat: %d live replicas, %v; want 3", n, err)
		}
	}
	srv.Stop()
	for _, tc := range []struct {
		limit ratelimit.Limit
		want  int
	}{
		{ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Hour}, 99},
		{ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Requests: 100, Period: time.Hour}, 99},
		{ratelimit.Limit{Algorithm: ratelimit.SlidingLog, Requests: 100, Period: time.Hour}, 99},
		{ratelimit.Limit{Requests: 10, Burst: 100, Period: time.Hour}, 99}, // gcra: bursts of a third
	} {
		key := "tenant|api|" + string(tc.limit.Algorithm.OrDefault())
		total := 0
		for _, s := range stores {
			n, _ := admitted(t, s, key, tc.limit, 150)
			total += n
		}
		if total != tc.want {
			t.Errorf("%s %d: admitted %d across 3 replicas with Redis down, want %d (a third each, rounded down)",
				tc.limit.Algorithm.OrDefault(), tc.limit.Requests, total, tc.want)
		}
	}
}
