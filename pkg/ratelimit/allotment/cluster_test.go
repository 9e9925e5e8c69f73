package allotment

import (
	"fmt"
	"sync"
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
		counts := make([][2]int64, 6)
		deadline := time.Now().Add(200 * time.Millisecond)
		for k := range counts {
			for ri, s := range replicas {
				wg.Go(func() {
					key := fmt.Sprintf("%s|%s|%d", t.Name(), alg, k) // keys on distinct slots
					counts[k][ri] = playRound(t, s, round{Key: key, Limit: l, To: deadline}).Admitted
				})
			}
		}
		wg.Wait()
		for k, c := range counts {
			if got := c[0] + c[1]; got > limit || got < limit-bound {
				t.Errorf("%s key %d: admitted %d (%d + %d), want %d..%d", alg, k, got, c[0], c[1], limit-bound, limit)
			}
		}
	}
}
