package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// replicaLimits is 100 per minute for the sliding log (an exact rolling
// window). The others get an hour: GCRA refills one hit per Period/100 (0.6 s
// for a minute, which a loaded machine can spend on 400 calls), and the
// window algorithms legitimately admit more across a window edge.
var replicaLimits = []ratelimit.Limit{
	limitFor(ratelimit.GCRA, 100, time.Hour),
	limitFor(ratelimit.SlidingLog, 100, time.Minute),
	limitFor(ratelimit.SlidingWindow, 100, time.Hour),
	limitFor(ratelimit.FixedWindow, 100, time.Hour),
}

// TestTwoReplicasShareOneLimit: two independent stores with their own
// clients (two service replicas) send 200 concurrent requests each on one
// key limited to 100: exactly 100 are admitted in total.
func TestTwoReplicasShareOneLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	replicas := []Client{srv.Client(), srv.Client()}
	for _, l := range replicaLimits {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			if got := admitConcurrently(t, replicas, randomKey(t), l); got != 100 {
				t.Fatalf("admitted %d of 400, want exactly 100", got)
			}
		})
	}
	assertAllKeysHaveTTL(t, srv.Client())
}

// TestTwoReplicasShareOneLimitOnCluster does the same on a 3-master cluster,
// with keys on every master.
func TestTwoReplicasShareOneLimitOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	replicas := []Client{cl.Client(), cl.Client()}
	// Identities whose slots cover all three masters.
	for i, key := range []string{"tenant|api|user=1", "tenant|api|user=2", "tenant|api|user=3", "tenant|api|user=4"} {
		l := replicaLimits[i%len(replicaLimits)]
		t.Run(string(l.Algorithm)+"/"+key, func(t *testing.T) {
			if got := admitConcurrently(t, replicas, key, l); got != 100 {
				t.Fatalf("admitted %d of 400, want exactly 100", got)
			}
		})
	}
	assertKeysOnEveryMaster(t, cl.Client())
}

// admitConcurrently sends 200 concurrent single-hit requests through each
// replica and returns how many were admitted; any error fails the test.
func admitConcurrently(t *testing.T, replicas []Client, key string, l ratelimit.Limit) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range replicas {
		s := newStore(t, c)
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res, err := s.Allow(ctx, key, l, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}
