// Package redisnode tells the stores in front of a Redis Cluster which node
// a key lives on, which nodes the slot map names, and which errors are the
// cluster's state rather than a fault of the node that answered: what a
// circuit breaker per node (internal/breaker's Set) needs from both Redis
// stores (rate limits, idempotency), written once. On a single server every
// key lives on one node, named "".
package redisnode

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// cluster is what a Redis Cluster client offers for routing; a
// *redis.ClusterClient has it, a standalone client does not.
type cluster interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

var _ cluster = (*redis.ClusterClient)(nil)

// Of returns the address of the master that owns key's slot in client's
// current slot map, without a round trip; "" for a standalone client (one
// node) or while the map is unknown.
func Of(ctx context.Context, client any, key string) string {
	cc, ok := client.(cluster)
	if !ok {
		return ""
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// Refresh asks a cluster client to reload its slot map in the background.
// go-redis reloads it by itself only on MOVED/ASK replies or every minute;
// a master that died or hangs answers with connection errors and timeouts
// instead, so without this its keys would keep going to it for up to a
// minute after a replica took over. go-redis runs one reload at a time and
// coalesces the requests made meanwhile (200 ms apart at most), so calling
// it on every failure is cheap.
func Refresh(client any) {
	if cc, ok := client.(cluster); ok {
		cc.ReloadState(context.Background())
	}
}

// Masters reloads a cluster client's slot map (one CLUSTER SLOTS round trip;
// the cached map when no node answers) and returns the addresses of the
// masters it names, in the form Of returns; for a standalone client, [""].
// A master that failed and was replaced by its replica is no longer named.
func Masters(ctx context.Context, client any) ([]string, error) {
	cc, ok := client.(cluster)
	if !ok {
		return []string{""}, nil
	}
	var mu sync.Mutex
	var addrs []string
	err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, m.Options().Addr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return addrs, nil
}

// IsClusterDown reports a CLUSTERDOWN reply, however wrapped. A master
// answers it while the cluster is down (with cluster-require-full-coverage
// yes, Redis's default: as long as any slot has no working master, so every
// master answers it between a master's failure and its replica's
// promotion). It is the state of the cluster, not a fault of the node that
// answered: that node is up, and decides again once the cluster is ok.
func IsClusterDown(err error) bool {
	return err != nil && redis.IsClusterDownError(err)
}
