package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterMasters is how many masters Cluster starts: enough that keys spread
// over several nodes, as few as keep start-up quick.
const clusterMasters = 3

// Cluster is a Redis Cluster of three masters, with or without a replica
// each.
type Cluster struct {
	// Addrs lists the masters' host:port addresses (at start).
	Addrs []string
	// URL names the first master as seed, e.g. redis://127.0.0.1:23456,
	// and the others as addr= parameters (the form redis.ParseClusterURL reads).
	URL string
	// Nodes are the masters, for stopping and restarting one of them.
	Nodes []*Server
	// Replicas are the replicas (NewClusterWithReplicas), one per master.
	Replicas []*Server

	tb testing.TB
}

// NewCluster starts three cluster-enabled servers, joins them with
// redis-cli --cluster create, and waits until every node reports
// cluster_state:ok. The servers stop when the test ends.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return newCluster(tb, 0, 5000)
}

// NewClusterWithReplicas starts three masters and a replica of each, with
// cluster-node-timeout 2000 ms so that a replica takes over a failed master
// within a few seconds, and cluster-require-full-coverage no so that the
// other masters keep serving meanwhile (Redis's default answers CLUSTERDOWN
// on every node while any slot has no master); it waits until every
// replica is in sync.
func NewClusterWithReplicas(tb testing.TB) *Cluster {
	tb.Helper()
	return newCluster(tb, 1, 2000, "--cluster-require-full-coverage", "no")
}

// NewClusterWithReplicasFullCoverage is NewClusterWithReplicas with Redis's
// default cluster-require-full-coverage yes, as most clusters run: from the
// moment a master is marked FAIL until its replica is promoted every node
// answers CLUSTERDOWN, whichever master owns the key.
func NewClusterWithReplicasFullCoverage(tb testing.TB) *Cluster {
	tb.Helper()
	return newCluster(tb, 1, 2000, "--cluster-require-full-coverage", "yes")
}

func newCluster(tb testing.TB, replicas, nodeTimeoutMS int, extra ...string) *Cluster {
	tb.Helper()
	bin := findBin(tb, "REDIS_SERVER_BIN", "redis-server")
	cli := findBin(tb, "REDIS_CLI_BIN", "redis-cli")
	c := &Cluster{tb: tb}
	var all []*Server
	for i := 0; i < clusterMasters*(1+replicas); i++ {
		s := newServer(tb, bin, append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", strconv.Itoa(nodeTimeoutMS),
		}, extra...))
		tb.Cleanup(s.Stop)
		all = append(all, s)
	}
	// redis-cli makes the first nodes masters and the rest their replicas.
	c.Nodes, c.Replicas = all[:clusterMasters], all[clusterMasters:]
	var addrs []string
	for _, s := range all {
		addrs = append(addrs, s.Addr)
	}
	c.Addrs = addrs[:clusterMasters]
	c.URL = "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(addrs); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return c
}

// Server returns the node at addr, master or replica; nil if none is.
func (c *Cluster) Server(addr string) *Server {
	for _, s := range append(append([]*Server{}, c.Nodes...), c.Replicas...) {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Client returns a new cluster client seeded with every master, closed when
// the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	c.tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// waitOK polls every node until all say cluster_state:ok, know all 16384
// slots and every node, and every replica's link to its master is up.
func (c *Cluster) waitOK(addrs []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending := notReady(addrs)
		if pending == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after 30s: %s", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notReady names the first node that is not ready yet, or returns "".
func notReady(addrs []string) string {
	for _, addr := range addrs {
		info, err := clusterInfo(addr)
		if err != nil {
			return fmt.Sprintf("%s: %v", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, "cluster_slots_ok:16384") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(addrs))) {
			return fmt.Sprintf("%s: %q", addr, info)
		}
		repl, err := replicationInfo(addr)
		if err != nil {
			return fmt.Sprintf("%s: %v", addr, err)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Sprintf("%s: replica not in sync", addr)
		}
	}
	return ""
}

func replicationInfo(addr string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cl.Info(ctx, "replication").Result()
}

func clusterInfo(addr string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cl.ClusterInfo(ctx).Result()
}
