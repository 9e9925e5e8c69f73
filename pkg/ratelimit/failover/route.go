package failover

import (
	"context"
	"sync"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Router is implemented by primaries spread over several backend nodes (a
// Redis Cluster): the Store then keeps one circuit breaker per node.
type Router interface {
	// Node names the node that decides key's requests now, e.g. the
	// address of the master owning its slot; "" when unknown.
	Node(ctx context.Context, key string) string
	// Refresh asks for the key-to-node map to be reloaded soon, after a
	// failure that may mean a node was replaced. It must be cheap and
	// rate-limit itself: it is called on every failed or refused call.
	Refresh()
	// Nodes reloads the key-to-node map and lists the nodes it names now;
	// the breakers of the others are forgotten. It may take a round trip:
	// it is called at most once per cool-down, while a circuit is open.
	Nodes(ctx context.Context) ([]string, error)
	// ClusterDown reports an error that is a state of the whole backend,
	// not a fault of the node that answered (a Redis Cluster's
	// CLUSTERDOWN). Such an error sends the call to the failure mode but
	// does not count against the node's breaker, so the node decides again
	// as soon as the backend recovers, with no cool-down to wait out.
	ClusterDown(err error) bool
}

// group is the requests of one batch that one node decides.
type group struct {
	node string
	idx  []int // indexes into the batch, in order
}

// route splits reqs by node; a primary that is not a Router is one node.
// When one node decides them all, the common case, it names that node and
// returns no groups, so that a decision pays for no slices.
func (s *Store) route(ctx context.Context, reqs []ratelimit.Request) (string, []group) {
	r, ok := s.primary.(Router)
	if !ok || len(reqs) == 0 {
		return "", nil
	}
	first := r.Node(ctx, reqs[0].Key)
	for i := 1; i < len(reqs); i++ {
		if r.Node(ctx, reqs[i].Key) != first {
			return "", groupByNode(ctx, r, reqs, first, i)
		}
	}
	return first, nil
}

// groupByNode groups reqs by node, given that those before at are first's.
func groupByNode(ctx context.Context, r Router, reqs []ratelimit.Request, first string, at int) []group {
	groups := []group{{node: first, idx: allIndexes(at)}}
	index := map[string]int{first: 0}
	for i := at; i < len(reqs); i++ {
		node := r.Node(ctx, reqs[i].Key)
		g, ok := index[node]
		if !ok {
			g = len(groups)
			index[node] = g
			groups = append(groups, group{node: node})
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	return groups
}

// decideGroups decides each node's share of reqs at once, each under its
// node's breaker, and puts the decisions back in order.
func (s *Store) decideGroups(ctx context.Context, reqs []ratelimit.Request, groups []group) ([]ratelimit.Decision, bool, error) {
	type result struct {
		d       []ratelimit.Decision
		primary bool
		err     error
	}
	results := make([]result, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		sub := make([]ratelimit.Request, len(g.idx))
		for j, k := range g.idx {
			sub[j] = reqs[k]
		}
		wg.Go(func() {
			r := &results[i]
			r.d, r.primary, r.err = s.decideOn(ctx, g.node, sub)
		})
	}
	wg.Wait()
	out := make([]ratelimit.Decision, len(reqs))
	fromPrimary := true
	for i, g := range groups {
		if results[i].err != nil {
			return nil, false, results[i].err
		}
		for j, k := range g.idx {
			out[k] = results[i].d[j]
		}
		fromPrimary = fromPrimary && results[i].primary
	}
	return out, fromPrimary, nil
}

// refresh asks a Router primary to reload its key-to-node map.
func (s *Store) refresh() {
	if r, ok := s.primary.(Router); ok {
		r.Refresh()
	}
}

// prune forgets, in the background, the breakers of nodes a Router primary
// no longer names (see breaker.Set.Prune).
func (s *Store) prune() {
	if s.nodes != nil {
		s.br.Prune(s.now(), s.nodes)
	}
}

// clusterDown reports an error a Router primary calls a state of the
// whole backend.
func (s *Store) clusterDown(err error) bool {
	r, ok := s.primary.(Router)
	return ok && err != nil && r.ClusterDown(err)
}

func allIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}
