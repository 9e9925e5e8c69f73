package breaker

import (
	"context"
	"sync"
	"time"
)

// Transition is told of a breaker that opened (open true, with the error
// that opened it) or closed again (open false), including an open one
// forgotten because its node left the backend (see Retain). It runs outside
// the breaker's lock.
type Transition func(node string, open bool, err error)

// Set keeps one Breaker per backend node (a Redis Cluster master, or the one
// server), created on first use, so that a failing node never stops calls
// to the healthy ones. It also does the bookkeeping every caller needs:
// Done classifies a call's outcome, and transitions are reported once each.
// Safe for concurrent use.
type Set struct {
	threshold int
	coolDown  time.Duration
	onChange  Transition

	mu        sync.Mutex
	nodes     map[string]*Breaker
	open      map[string]bool
	nextPrune time.Time // Prune's next check
}

// NewSet returns an empty set whose breakers open after threshold failures
// in a row and cool down for coolDown. onChange may be nil.
func NewSet(threshold int, coolDown time.Duration, onChange Transition) (*Set, error) {
	if _, err := New(threshold, coolDown); err != nil {
		return nil, err
	}
	if onChange == nil {
		onChange = func(string, bool, error) {}
	}
	return &Set{threshold: threshold, coolDown: coolDown, onChange: onChange,
		nodes: map[string]*Breaker{}, open: map[string]bool{}}, nil
}

// Get returns node's breaker, creating a closed one the first time.
func (s *Set) Get(node string) *Breaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.nodes[node]
	if !ok {
		b = &Breaker{threshold: s.threshold, coolDown: s.coolDown}
		s.nodes[node] = b
	}
	return b
}

// Outcome says what a call's error tells of the node (see Done).
type Outcome int

const (
	// Fault means the node failed (an error, a timeout); it counts towards
	// opening the node's circuit.
	Fault Outcome = iota
	// Neutral means the error says nothing about the backend (bad input, a
	// caller that went away); not a failure.
	Neutral
	// Unserved means the node answered, but the backend as a whole cannot
	// serve (a Redis Cluster's CLUSTERDOWN). The call failed, the node did
	// not: opening its circuit would only keep it away after the backend
	// recovers.
	Unserved
)

// Done ends a call to node that its breaker's Acquire let through: a nil err
// is a success; otherwise how says what err tells of the node, and a Fault
// is recorded at now. It reports whether the call failed (Fault or
// Unserved), for the caller to count and log.
func (s *Set) Done(node string, now time.Time, err error, how Outcome) (failed bool) {
	b := s.Get(node)
	switch {
	case err == nil:
		b.Success()
	case how == Fault:
		b.Failure(now, err)
	default:
		b.Release()
		return how == Unserved
	}
	s.note(node, b)
	return err != nil
}

// Reset closes every breaker: an out-of-band check (a readiness ping) found
// the backend healthy.
func (s *Set) Reset() {
	s.mu.Lock()
	nodes := make(map[string]*Breaker, len(s.nodes))
	for n, b := range s.nodes {
		nodes[n] = b
	}
	s.mu.Unlock()
	for n, b := range nodes {
		b.Success()
		s.note(n, b)
	}
}

// note reports node's transition, if its breaker b made one. The state is
// read under the set's lock, so that concurrent calls record the latest.
func (s *Set) note(node string, b *Breaker) {
	s.mu.Lock()
	st := b.State()
	changed := s.open[node] != st.Open
	if st.Open {
		s.open[node] = true
	} else {
		delete(s.open, node)
	}
	s.mu.Unlock()
	if changed {
		s.onChange(node, st.Open, st.LastErr)
	}
}

// Open returns how many nodes' circuits are open.
func (s *Set) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Worst returns the state of an open breaker whose cool-down is not over
// at now (the one with most failures), and whether there is one.
func (s *Set) Worst(now time.Time) (node string, st State, ok bool) {
	s.mu.Lock()
	nodes := make(map[string]*Breaker, len(s.open))
	for n := range s.open {
		nodes[n] = s.nodes[n]
	}
	s.mu.Unlock()
	for n, b := range nodes {
		if b.CoolingDown(now) {
			if bst := b.State(); !ok || bst.Failures > st.Failures {
				node, st, ok = n, bst, true
			}
		}
	}
	return node, st, ok
}

// Retain forgets the breakers of every node not in nodes, the nodes the
// backend has now. An open one is reported closed: its node left (a failed
// Redis master replaced by its replica), no call will probe it again, and
// its open circuit (a gauge, an alert) must not stay until restart. A node
// that comes back gets a new, closed breaker.
func (s *Set) Retain(nodes []string) {
	keep := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		keep[n] = true
	}
	var closed []string
	s.mu.Lock()
	for n := range s.nodes {
		if keep[n] {
			continue
		}
		delete(s.nodes, n)
		if s.open[n] {
			delete(s.open, n)
			closed = append(closed, n)
		}
	}
	s.mu.Unlock()
	for _, n := range closed {
		s.onChange(n, false, nil)
	}
}

// Prune retains the nodes that nodes lists (see Retain), at most once per
// cool-down and only while a circuit is open: nodes asks the backend (for
// a Redis Cluster, the masters of a freshly loaded slot map, a round trip),
// so it runs on a goroutine of its own, bounded by the cool-down (at least
// a second), and the call that triggered it is not delayed. A failed list
// changes nothing.
func (s *Set) Prune(now time.Time, nodes func(context.Context) ([]string, error)) {
	if !s.pruneDue(now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(s.coolDown, time.Second))
		defer cancel()
		if list, err := nodes(ctx); err == nil {
			s.Retain(list)
		}
	}()
}

// pruneDue reports whether Prune asks for the node list at now, and if so
// takes the turn: a circuit is open and the last turn is a cool-down old.
func (s *Set) pruneDue(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) == 0 || now.Before(s.nextPrune) {
		return false
	}
	s.nextPrune = now.Add(s.coolDown)
	return true
}
