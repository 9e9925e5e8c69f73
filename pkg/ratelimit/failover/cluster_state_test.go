package failover_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
)

// downWindow is when one healthy master said cluster_state:fail: from the
// first poll that saw it to the first that saw ok again (zero while never).
type downWindow struct{ failAt, okAt time.Time }

// watchClusterState polls CLUSTER INFO on every master but the victim every
// 10 ms until the returned function is called; that function returns each
// master's last fail-to-ok window. A master of a cluster with
// cluster-require-full-coverage yes answers CLUSTERDOWN for every key while
// it says fail.
func watchClusterState(cl *redistest.Cluster, victim *redistest.Server) func() map[string]downWindow {
	stop := make(chan struct{})
	var mu sync.Mutex
	windows := map[string]downWindow{}
	var wg sync.WaitGroup
	for _, n := range cl.Nodes {
		if n == victim {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		wg.Go(func() {
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				info, err := c.ClusterInfo(ctx).Result()
				cancel()
				if err != nil {
					continue
				}
				now := time.Now()
				mu.Lock()
				w := windows[n.Addr]
				switch {
				case strings.Contains(info, "cluster_state:fail") && (w.failAt.IsZero() || !w.okAt.IsZero()):
					w = downWindow{failAt: now}
				case strings.Contains(info, "cluster_state:ok") && !w.failAt.IsZero() && w.okAt.IsZero():
					w.okAt = now
				}
				windows[n.Addr] = w
				mu.Unlock()
			}
		})
	}
	return func() map[string]downWindow {
		close(stop)
		wg.Wait()
		return windows
	}
}

// checkDownWindows: a healthy master's keys may go to the failure mode
// while that master says the cluster is down (it answers CLUSTERDOWN,
// nothing can decide them), not after it says ok again, unless the master
// itself failed otherwise (a timeout on a loaded machine). The
// breaker's cool-down must not outlast the CLUSTERDOWN.
func checkDownWindows(t *testing.T, rec *recorder, onVictim []bool, nodeOf []string, windows map[string]downWindow, errs []nodeErr) {
	t.Helper()
	during, late := map[string]int{}, map[string]int{}
	for _, d := range rec.log {
		if d.fromPrimary || onVictim[d.key] {
			continue
		}
		node := nodeOf[d.key]
		if w := windows[node]; !w.okAt.IsZero() && !d.start.After(w.okAt) {
			during[node]++
		} else {
			late[node]++
		}
	}
	for node, w := range windows {
		if !w.failAt.IsZero() {
			t.Logf("%s said cluster_state:fail for %s", node, w.okAt.Sub(w.failAt).Round(time.Millisecond))
		}
	}
	t.Logf("decisions on healthy masters' keys in the failure mode: %v while that master said fail, %v otherwise", during, late)
	for node, n := range late {
		if !ownFailure(errs, node) {
			t.Errorf("%d decisions on keys of healthy master %s went to the failure mode outside its CLUSTERDOWN window, "+
				"and it failed only with CLUSTERDOWN", n, node)
		}
	}
}

// ownFailure reports a failure of node other than CLUSTERDOWN.
func ownFailure(errs []nodeErr, node string) bool {
	for _, e := range errs {
		if e.node == node && !isClusterDown(e.err) {
			return true
		}
	}
	return false
}

// clusterDownSeen reports a CLUSTERDOWN answered by node.
func clusterDownSeen(errs []nodeErr, node string) bool {
	for _, e := range errs {
		if e.node == node && isClusterDown(e.err) {
			return true
		}
	}
	return false
}

// waitCircuitsClosed waits for extauthz_redis_circuit_open to say 0: the
// dead master's breaker must not stay open (and its alert fire) forever.
func waitCircuitsClosed(t *testing.T, reg *prometheus.Registry, limit time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		v := sumMetric(t, reg, "extauthz_redis_circuit_open")
		if v == 0 {
			t.Logf("extauthz_redis_circuit_open back to 0 %s after the keys were back", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > limit {
			t.Errorf("extauthz_redis_circuit_open is %v %s after the lost master's keys were back on Redis, want 0", v, limit)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isClusterDown reports a CLUSTERDOWN reply in an error's text (the store
// wraps it: "redisstore: CLUSTERDOWN ...").
func isClusterDown(err string) bool { return strings.Contains(err, "CLUSTERDOWN ") }
