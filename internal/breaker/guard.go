package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrOpen is returned, wrapped with the node and the last failure, for a
// call a Guard refused because its node's circuit is open.
var ErrOpen = errors.New("circuit open")

// Cluster is what a Guard needs from a backend spread over several nodes
// (a Redis Cluster); a single server needs none of it.
type Cluster interface {
	// Refresh asks for the key-to-node map to be reloaded soon; it must be
	// cheap and rate-limit itself (it is called on every failure).
	Refresh()
	// Nodes reloads the map and lists the nodes it names now; the breakers
	// of the others are forgotten (see Set.Prune).
	Nodes(ctx context.Context) ([]string, error)
	// ClusterDown reports an error that is the state of the whole backend
	// (a Redis Cluster's CLUSTERDOWN), not a fault of the node that
	// answered: Unserved, not a Fault.
	ClusterDown(err error) bool
}

// Guard runs a store's calls through a Set, one breaker per node: the glue
// every store in front of Redis repeats. Safe for concurrent use.
type Guard struct {
	set     *Set
	cluster Cluster // nil: one node
	now     func() time.Time
	neutral func(ctx context.Context, err error) bool
	failed  func(node string, err error)
}

// GuardOptions configures a Guard.
type GuardOptions struct {
	// Set holds the breakers; required.
	Set *Set
	// Cluster, when set, is refreshed on failures and pruned while a
	// circuit is open; nil for a single node.
	Cluster Cluster
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Neutral reports errors that say nothing about the backend (bad
	// input, a caller that went away); nil means none.
	Neutral func(ctx context.Context, err error) bool
	// Failed, when set, is told of every call that failed in the backend
	// (Fault or Unserved), for counting and logging.
	Failed func(node string, err error)
}

// NewGuard returns a Guard over o.Set.
func NewGuard(o GuardOptions) (*Guard, error) {
	if o.Set == nil {
		return nil, fmt.Errorf("%w: nil Set", ErrInvalid)
	}
	g := &Guard{set: o.Set, cluster: o.Cluster, now: o.Now, neutral: o.Neutral, failed: o.Failed}
	if g.now == nil {
		g.now = time.Now
	}
	if g.neutral == nil {
		g.neutral = func(context.Context, error) bool { return false }
	}
	if g.failed == nil {
		g.failed = func(string, error) {}
	}
	return g, nil
}

// Call runs f, a call to node, unless node's circuit is open (then it
// returns an error wrapping ErrOpen without calling f), and records its
// outcome.
func (g *Guard) Call(ctx context.Context, node string, f func() error) error {
	if b := g.set.Get(node); !b.Acquire(g.now()) {
		g.refresh() // the node may have been replaced meanwhile
		st := b.State()
		return fmt.Errorf("%w%s after %d consecutive failures, last: %v", ErrOpen, nodeName(node), st.Failures, st.LastErr)
	}
	err := f()
	if g.set.Done(node, g.now(), err, g.outcome(ctx, err)) {
		g.failed(node, err)
		g.refresh()
	}
	if g.cluster != nil {
		g.set.Prune(g.now(), g.cluster.Nodes)
	}
	return err
}

func (g *Guard) refresh() {
	if g.cluster != nil {
		g.cluster.Refresh()
	}
}

// outcome says what err tells of the node that gave it.
func (g *Guard) outcome(ctx context.Context, err error) Outcome {
	switch {
	case err != nil && g.neutral(ctx, err):
		return Neutral
	case g.cluster != nil && err != nil && g.cluster.ClusterDown(err):
		return Unserved
	}
	return Fault
}

func nodeName(node string) string {
	if node == "" {
		return ""
	}
	return " for node " + node
}
