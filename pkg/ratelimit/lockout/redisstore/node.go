package redisstore

import (
	"context"

	"github.com/extauthz/extauthz/internal/redisnode"
)

// Node returns the address of the cluster master that holds key's lockout
// in the client's current slot map, without a round trip; "" on a
// standalone server (one node) or while the map is unknown. With package
// lockout/failover it gives each master its own circuit breaker.
func (s *Store) Node(ctx context.Context, key string) string {
	return redisnode.Of(ctx, s.client, s.Key(key))
}

// Refresh asks a cluster client to reload its slot map in the background
// (see redisnode.Refresh); cheap enough to call on every failure.
func (s *Store) Refresh() { redisnode.Refresh(s.client) }

// Nodes reloads the slot map and returns the masters it names ([""] on a
// standalone server), so that the breakers of replaced masters are
// forgotten.
func (s *Store) Nodes(ctx context.Context) ([]string, error) {
	return redisnode.Masters(ctx, s.client)
}

// ClusterDown reports a CLUSTERDOWN reply: the cluster's state, not a fault
// of the node that answered (see redisnode.IsClusterDown).
func (s *Store) ClusterDown(err error) bool { return redisnode.IsClusterDown(err) }
