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
}

// group is the requests of one batch that one node decides.
type group struct {
	node string
	idx  []int // indexes into the batch, in order
}

// route splits reqs by node; a primary that is not a Router is one node.
func (s *Store) route(ctx context.Context, reqs []ratelimit.Request) []group {
	r, ok := s.primary.(Router)
	if !ok || len(reqs) == 0 {
		return []group{{idx: allIndexes(len(reqs))}}
	}
	var groups []group
	at := map[string]int{}
	for i, req := range reqs {
		node := r.Node(ctx, req.Key)
		g, ok := at[node]
		if !ok {
			g = len(groups)
			at[node] = g
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

func allIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}
