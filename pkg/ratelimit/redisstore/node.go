package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// clusterRouting is what a Redis Cluster client offers for routing; a
// *redis.ClusterClient has it, a standalone client does not.
type clusterRouting interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

var _ clusterRouting = (*redis.ClusterClient)(nil)

// Node returns the address of the cluster master that owns key's slot in the
// client's current slot map, without a round trip; "" on a standalone
// server (one node) or while the map is unknown. With package failover it
// gives each master its own circuit breaker.
func (s *Store) Node(ctx context.Context, key string) string {
	cc, ok := s.client.(clusterRouting)
	if !ok {
		return ""
	}
	// Every key of the request shares this hash tag, hence this slot.
	m, err := cc.MasterForKey(ctx, s.prefix+":rl:{"+tagIdentity(key)+"}")
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
func (s *Store) Refresh() {
	if cc, ok := s.client.(clusterRouting); ok {
		cc.ReloadState(context.Background())
	}
}
