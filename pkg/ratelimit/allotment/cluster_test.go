package allotment

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// TestClusterReplicasShareLimits: on a three-master Redis Cluster, two
// replicas (each its own client and stores) hammer keys spread over the
// slots: slices are leased through each key's own slot, and together the
// replicas admit each key's limit, never more, at most the bound less.
func TestClusterReplicasShareLimits(t *testing.T) {
	t.Parallel()
	cluster := redistest.NewCluster(t)
	var replicas []*Store
	for range 2 {
		client := cluster.Client()
		t.Cleanup(func() { _ = client.Close() })
		rs, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(rs, Options{Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		replicas = append(replicas, s)
	}
	const limit = 400
	for _, alg := range leasable {
		l := ratelimit.Limit{Algorithm: alg, Requests: limit, Period: time.Hour, Consistency: ratelimit.Allotment}
		bound := 3 * replicas[0].maxSlice(l) // two replicas, 1.5 slices each
		var wg sync.WaitGroup
		var counts [6][2]atomic.Int64
		for k := range counts {
			key := fmt.Sprintf("%s|%s|%d", t.Name(), alg, k) // keys on distinct slots
			for ri, s := range replicas {
				for range 2 {
					wg.Go(func() { counts[k][ri].Add(untilRefused(t, s, key, l)) })
				}
			}
		}
		wg.Wait()
		for k := range counts {
			a, b := counts[k][0].Load(), counts[k][1].Load()
			if got := a + b; got > limit || got < limit-bound {
				t.Errorf("%s key %d: admitted %d (%d + %d), want %d..%d", alg, k, got, a, b, limit-bound, limit)
			}
		}
	}
}

// untilRefused asks for one hit of l on key until refused 20 times in a
// row (the hour's budget is gone and this replica holds no tokens) and
// returns the hits admitted.
func untilRefused(t *testing.T, s *Store, key string, l ratelimit.Limit) int64 {
	var admitted int64
	deadline := time.Now().Add(20 * time.Second)
	for refused := 0; refused < 20 && time.Now().Before(deadline); {
		res, err := s.Allow(context.Background(), key, l, 1)
		switch {
		case err != nil:
			t.Error(err)
			return admitted
		case res.Allowed:
			admitted++
			refused = 0
		default:
			refused++
		}
	}
	return admitted
}
