package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterMasters is how many masters Cluster starts: enough that keys spread
// over several nodes, as few as keep start-up quick.
const clusterMasters = 3

// Cluster is a Redis Cluster of three masters and no replicas.
type Cluster struct {
	// Addrs lists the masters' host:port addresses.
	Addrs []string
	// URL names the first master as seed, e.g. redis://127.0.0.1:23456,
	// and the others as addr= parameters (the form redis.ParseClusterURL reads).
	URL string
	// Nodes are the masters, for stopping and restarting one of them.
	Nodes []*Server

	tb testing.TB
}

// NewCluster starts three cluster-enabled servers, joins them with
// redis-cli --cluster create, and waits until every node reports
// cluster_state:ok. The servers stop when the test ends.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin := findBin(tb, "REDIS_SERVER_BIN", "redis-server")
	cli := findBin(tb, "REDIS_CLI_BIN", "redis-cli")
	c := &Cluster{tb: tb}
	for i := 0; i < clusterMasters; i++ {
		s := newServer(tb, bin, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", "5000",
		})
		tb.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	c.URL = "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return c
}

// Client returns a new cluster client seeded with every master, closed when
// the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	c.tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// waitOK polls CLUSTER INFO on every node until all say cluster_state:ok and
// know all 16384 slots.
func (c *Cluster) waitOK() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending := c.notReady()
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
func (c *Cluster) notReady() string {
	for _, addr := range c.Addrs {
		info, err := clusterInfo(addr)
		if err != nil {
			return fmt.Sprintf("%s: %v", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, "cluster_slots_ok:16384") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", clusterMasters)) {
			return fmt.Sprintf("%s: %q", addr, info)
		}
	}
	return ""
}

func clusterInfo(addr string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cl.ClusterInfo(ctx).Result()
}
