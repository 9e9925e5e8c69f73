package breaker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCluster counts Refresh calls and calls one error the cluster's state.
type fakeCluster struct {
	refreshes atomic.Int32
	down      error
}

func (c *fakeCluster) Refresh() { c.refreshes.Add(1) }
func (c *fakeCluster) Nodes(context.Context) ([]string, error) {
	return []string{"a", "b"}, nil
}
func (c *fakeCluster) ClusterDown(err error) bool { return errors.Is(err, c.down) }

type guardRig struct {
	g       *Guard
	cl      *fakeCluster
	now     time.Time
	failed  []string
	calls   int
	neutral error
}

func newGuardRig(t *testing.T) *guardRig {
	t.Helper()
	r := &guardRig{cl: &fakeCluster{down: errors.New("CLUSTERDOWN")}, now: time.Unix(1000, 0), neutral: errors.New("bad input")}
	set, err := NewSet(2, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.g, err = NewGuard(GuardOptions{Set: set, Cluster: r.cl, Now: func() time.Time { return r.now },
		Neutral: func(_ context.Context, err error) bool { return errors.Is(err, r.neutral) },
		Failed:  func(node string, err error) { r.failed = append(r.failed, node+": "+err.Error()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// call runs one call to node that returns err.
func (r *guardRig) call(node string, err error) error {
	return r.g.Call(context.Background(), node, func() error { r.calls++; return err })
}

// TestGuardOpensPerNode: two failures in a row open a node's circuit; its
// calls are then refused with ErrOpen (naming the node and the last error)
// without reaching the backend, while another node's pass; after the
// cool-down one probe goes through and its success closes the circuit.
func TestGuardOpensPerNode(t *testing.T) {
	t.Parallel()
	r := newGuardRig(t)
	down := errors.New("down")
	r.call("a", down)
	r.call("a", down)
	err := r.call("a", nil)
	if !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "node a") || !strings.Contains(err.Error(), "down") {
		t.Fatalf("third call: %v, want ErrOpen naming node a and the last error", err)
	}
	if r.calls != 2 {
		t.Errorf("backend called %d times, want 2 (the refused call never reaches it)", r.calls)
	}
	if len(r.failed) != 2 {
		t.Errorf("Failed told %v, want the 2 failures", r.failed)
	}
	if err := r.call("b", nil); err != nil {
		t.Errorf("node b while a is open: %v", err)
	}
	if r.cl.refreshes.Load() < 3 {
		t.Errorf("%d refreshes, want one per failure and refusal", r.cl.refreshes.Load())
	}
	r.now = r.now.Add(time.Second)
	if err := r.call("a", nil); err != nil {
		t.Fatalf("probe after the cool-down: %v", err)
	}
	if err := r.call("a", nil); err != nil {
		t.Errorf("after a successful probe: %v, want the circuit closed", err)
	}
}

// TestGuardOutcomes: a neutral error never counts; a CLUSTERDOWN answer is
// a failed call (Failed is told) that does not open the node's circuit.
func TestGuardOutcomes(t *testing.T) {
	t.Parallel()
	r := newGuardRig(t)
	for range 3 {
		if err := r.call("a", r.neutral); !errors.Is(err, r.neutral) {
			t.Fatalf("neutral: %v", err)
		}
	}
	for range 3 {
		if err := r.call("a", r.cl.down); !errors.Is(err, r.cl.down) {
			t.Fatalf("cluster down: %v", err)
		}
	}
	if err := r.call("a", nil); err != nil {
		t.Errorf("after neutral and CLUSTERDOWN errors: %v, want the circuit closed", err)
	}
	if len(r.failed) != 3 {
		t.Errorf("Failed told %d times, want 3 (the CLUSTERDOWN calls, not the neutral ones)", len(r.failed))
	}
}

func TestNewGuardNeedsSet(t *testing.T) {
	t.Parallel()
	if _, err := NewGuard(GuardOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewGuard without a Set: %v, want ErrInvalid", err)
	}
}
