package failover_test

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// The failover tests take down one master of a 3-master, 3-replica cluster
// under load, with nothing calling Ready (as in production, where probes
// use gRPC health), and check every decision made meanwhile.

// TestClusterMasterKilled: SIGKILL, the replica is promoted.
// Not parallel: each runs six servers under load.
func TestClusterMasterKilled(t *testing.T) {
	for _, c := range coverages {
		t.Run(c.name, func(t *testing.T) { runFailover(t, c.start, failover.Open, (*redistest.Server).Kill) })
	}
}

// TestClusterMasterHung: SIGSTOP (connections stay open, nothing answers),
// the replica is promoted; closed mode.
func TestClusterMasterHung(t *testing.T) {
	for _, c := range coverages {
		t.Run(c.name, func(t *testing.T) { runFailover(t, c.start, failover.Closed, (*redistest.Server).Pause) })
	}
}

// coverages are the two settings of cluster-require-full-coverage: Redis's
// default (every master answers CLUSTERDOWN while a master is down and not
// yet replaced), and no.
var coverages = []struct {
	name  string
	start func(testing.TB) *redistest.Cluster
}{
	{"full-coverage-yes", redistest.NewClusterWithReplicasFullCoverage},
	{"full-coverage-no", redistest.NewClusterWithReplicas},
}

// failoverKeys is how many keys the load spreads over.
const failoverKeys = 10000

// decision is one call's record.
type decision struct {
	key         int
	start, end  time.Time
	fromPrimary bool
	allowed     bool
}

func runFailover(t *testing.T, start func(testing.TB) *redistest.Cluster, mode failover.Mode, takeDown func(*redistest.Server)) {
	cl := start(t)
	st, rs, client, events, reg := clusterStack(t, cl, mode)
	ctx := context.Background()

	victim := cl.Nodes[1]
	replica := replicaOf(t, cl, victim)
	onVictim := make([]bool, failoverKeys)
	nodeOf := make([]string, failoverKeys)
	for i := range onVictim {
		nodeOf[i] = rs.Node(ctx, keyName(i))
		onVictim[i] = nodeOf[i] == victim.Addr
	}

	// Warm up: every key once through Redis, so pools are full.
	load(t, st, 0, 1, nil, nil)

	stop := make(chan struct{})
	rec := &recorder{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { load(t, st, w, 4, stop, rec) })
	}
	time.Sleep(500 * time.Millisecond)
	goroutines, conns := runtime.NumGoroutine(), client.PoolStats().TotalConns
	watch := watchClusterState(cl, victim) // cluster_state_test.go
	downAt := time.Now()
	takeDown(victim)
	promotedAt := waitPromoted(t, replica, 30*time.Second)
	backAt := waitBack(rec, onVictim, downAt, promotedAt)
	close(stop)
	wg.Wait()
	windows := watch()
	t.Logf("%s: replica promoted %s after the master went down", mode, promotedAt.Sub(downAt).Round(time.Millisecond))

	healthyOff := tallyOffRedis(t, mode, rec, onVictim, nodeOf)
	errs, opened := events()
	checkHealthyMasters(t, errs, opened, healthyOff, victim.Addr, replica.Addr)
	checkDownWindows(t, rec, onVictim, nodeOf, windows, errs)
	if backAt.IsZero() {
		t.Fatalf("the lost master's keys never went back to Redis in the 15 s after the promotion")
	}
	back := backAt.Sub(promotedAt)
	t.Logf("the lost master's keys back on Redis %s after the promotion was visible to a 50 ms poll", back.Round(time.Millisecond))
	// A generous bound (the target is ~2 s); go-redis's own one-minute
	// slot-map refresh would fail it.
	if back > 10*time.Second {
		t.Errorf("the lost master's keys went back to Redis %s after the promotion", back)
	}
	waitCircuitsClosed(t, reg, 5*time.Second)
	victim.Resume() // a paused master rejoins (as a replica); a killed one stays down
	checkNoGrowth(t, client, goroutines, conns)
}

// waitBack keeps the load on until a second after the lost master's keys
// are decided by Redis again (necessarily by the promoted replica), or for
// 15 s (go-redis alone refreshes its slot map every minute), and returns
// when they were first back (zero if never).
func waitBack(rec *recorder, onVictim []bool, downAt, promotedAt time.Time) time.Time {
	var backAt time.Time
	for time.Now().Before(promotedAt.Add(15 * time.Second)) {
		time.Sleep(250 * time.Millisecond)
		if backAt = rec.firstBack(onVictim, downAt); !backAt.IsZero() && time.Since(backAt) > time.Second {
			break
		}
	}
	return backAt
}

// tallyOffRedis counts the decisions taken without Redis, failing on one
// admitted in closed mode and when none of the lost master's keys went to
// the failure mode; it returns those of healthy masters' keys by node.
func tallyOffRedis(t *testing.T, mode failover.Mode, rec *recorder, onVictim []bool, nodeOf []string) map[string]int {
	t.Helper()
	var victimOff, total int
	healthyOff := map[string]int{} // by node
	for _, d := range rec.log {
		total++
		if d.fromPrimary {
			continue
		}
		if mode == failover.Closed && d.allowed {
			t.Fatalf("closed mode: key %d admitted without Redis", d.key)
		}
		if !onVictim[d.key] {
			healthyOff[nodeOf[d.key]]++
			continue
		}
		victimOff++
	}
	t.Logf("%d decisions: %d without Redis on the lost master's keys, on healthy masters' keys: %v", total, victimOff, healthyOff)
	if victimOff == 0 {
		t.Errorf("no decision on the lost master's keys was taken without Redis: the test did not take it down")
	}
	return healthyOff
}

// checkHealthyMasters: a healthy master's keys are decided by it alone, so
// only its own failures (timeouts on a loaded test machine, or CLUSTERDOWN
// while the cluster is down; see checkDownWindows) may send them to the
// failure mode, and only its own failures other than CLUSTERDOWN (which
// says nothing of the node that answered it) open its breaker.
func checkHealthyMasters(t *testing.T, errs []nodeErr, opened map[string]bool, healthyOff map[string]int, victim, replica string) {
	t.Helper()
	nodeErrs := map[string]int{}
	kinds := map[string]int{}
	for _, e := range errs {
		if strings.Contains(e.err, "CROSSSLOT") {
			t.Errorf("a call failed with CROSSSLOT: %s", e.err)
		}
		if !isClusterDown(e.err) {
			nodeErrs[e.node]++
		}
		kinds[e.node+": "+e.err[:min(len(e.err), 40)]]++
	}
	t.Logf("errors: %v", kinds)
	for node, n := range healthyOff {
		if nodeErrs[node] == 0 && !clusterDownSeen(errs, node) {
			t.Errorf("%d decisions on keys of healthy master %s were taken without Redis, which never failed", n, node)
		}
	}
	for node := range opened {
		if node != victim && node != replica && nodeErrs[node] < failover.DefaultFailureThreshold {
			t.Errorf("the breaker of healthy master %s opened after %d failures of its own", node, nodeErrs[node])
		}
	}
}

// recorder keeps every decision of the load.
type recorder struct {
	mu  sync.Mutex
	log []decision
}

func (r *recorder) add(d decision) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, d)
}

// firstBack returns when the first decision by Redis on a key of onVictim
// that started after the master went down ended (zero if none has): one
// that only the promoted replica can have made.
func (r *recorder) firstBack(onVictim []bool, downAt time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, d := range r.log {
		if d.fromPrimary && onVictim[d.key] && d.start.After(downAt) && (first.IsZero() || d.end.Before(first)) {
			first = d.end
		}
	}
	return first
}

// load makes decisions until stop is closed, recording them in rec: worker
// w of n takes every n-th key. With stop nil it makes one pass.
func load(t *testing.T, st *failover.Store, w, n int, stop chan struct{}, rec *recorder) {
	limit := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1 << 40, Period: time.Hour}
	for i := w; ; i += n {
		if i >= failoverKeys {
			if stop == nil {
				return
			}
			i = w
		}
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		req := ratelimit.Request{Key: keyName(i), Limits: []ratelimit.Limit{limit}, Hits: 1}
		d, primary, err := st.AllowBatchSource(context.Background(), []ratelimit.Request{req})
		if err != nil {
			t.Errorf("key %d: %v (the failure mode must answer)", i, err)
			return
		}
		rec.add(decision{key: i, start: start, end: time.Now(), fromPrimary: primary, allowed: d[0].Allowed})
	}
}

func keyName(i int) string { return fmt.Sprintf("tenant|api|user=%d", i) }

// nodeErr is one failure the store reported.
type nodeErr struct{ node, err string }

// clusterStack is the production stack on the cluster, with timeouts that
// a loaded test machine meets; it returns the failover store, the Redis
// store (for Node), the client, a function returning the failures the
// store reported and the nodes whose breaker opened, and the registry.
func clusterStack(t *testing.T, cl *redistest.Cluster, mode failover.Mode) (*failover.Store, *redisstore.Store, *redis.ClusterClient, func() ([]nodeErr, map[string]bool), *prometheus.Registry) {
	t.Helper()
	uc, err := redisclient.New(redisclient.Options{
		URL: cl.URL, Cluster: true, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = uc.Close() })
	rs, err := redisstore.New(uc, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []nodeErr
	opened := map[string]bool{}
	reg := prometheus.NewRegistry()
	opts := failover.Options{Mode: mode, Registerer: reg, CallTimeout: time.Second,
		OnError: func(node string, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, nodeErr{node, err.Error()})
		},
		OnChange: func(node string, open bool, _ error) {
			mu.Lock()
			defer mu.Unlock()
			opened[node] = opened[node] || open
		},
	}
	if mode == failover.Open {
		opts.Fallback = newMem(t, nil)
	}
	st, err := failover.New(rs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, rs, uc.(*redis.ClusterClient), func() ([]nodeErr, map[string]bool) {
		mu.Lock()
		defer mu.Unlock()
		return append([]nodeErr(nil), errs...), maps.Clone(opened)
	}, reg
}

// replicaOf returns the replica of master.
func replicaOf(t *testing.T, cl *redistest.Cluster, master *redistest.Server) *redistest.Server {
	t.Helper()
	port := master.Addr[strings.LastIndex(master.Addr, ":")+1:]
	for _, r := range cl.Replicas {
		info, err := r.Client().Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_port:"+port+"\r\n") {
			return r
		}
	}
	t.Fatalf("no replica of %s", master.Addr)
	return nil
}

// waitPromoted polls the replica until it reports role:master.
func waitPromoted(t *testing.T, r *redistest.Server, limit time.Duration) time.Time {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "role:master") {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("replica %s not promoted within %s", r.Addr, limit)
	return time.Time{}
}

// checkNoGrowth waits for goroutines and connections to settle back to
// about what they were before the failover.
func checkNoGrowth(t *testing.T, c *redis.ClusterClient, goroutines int, conns uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, n := runtime.NumGoroutine(), c.PoolStats().TotalConns
		if g <= goroutines+10 && n <= conns+8 {
			t.Logf("goroutines %d (before %d), connections %d (before %d)", g, goroutines, n, conns)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines %d (before %d), connections %d (before %d): growth", g, goroutines, n, conns)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
