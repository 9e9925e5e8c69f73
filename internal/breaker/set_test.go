package breaker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSetKeepsNodesApart: failures on one node open its breaker only; each
// transition is reported once; neutral errors change nothing.
func TestSetKeepsNodesApart(t *testing.T) {
	t.Parallel()
	var got []string
	s, err := NewSet(2, time.Second, func(node string, open bool, err error) {
		got = append(got, fmt.Sprintf("%s open=%v err=%v", node, open, err))
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	down := errors.New("down")
	call := func(node string, now time.Time, err error, how Outcome) bool {
		if !s.Get(node).Acquire(now) {
			return false
		}
		s.Done(node, now, err, how)
		return true
	}
	for range 3 {
		call("a", t0, down, Fault)
		call("a", t0, errors.New("bad input"), Neutral)
	}
	if call("a", t0, nil, Fault) {
		t.Error("node a: call let through while its circuit is open")
	}
	if !call("b", t0, nil, Fault) || !call("b", t0, down, Fault) || !call("b", t0, nil, Fault) {
		t.Error("node b: refused while only node a failed")
	}
	if s.Open() != 1 {
		t.Errorf("Open() = %d, want 1", s.Open())
	}
	if node, st, ok := s.Worst(t0); !ok || node != "a" || st.Failures != 2 || !errors.Is(st.LastErr, down) {
		t.Errorf("Worst = %q %+v %v, want a with 2 failures", node, st, ok)
	}
	if !call("a", t0.Add(time.Second), nil, Fault) {
		t.Error("node a: probe refused after the cool-down")
	}
	if _, _, ok := s.Worst(t0.Add(time.Second)); ok || s.Open() != 0 {
		t.Errorf("after a successful probe: Open() = %d", s.Open())
	}
	want := []string{"a open=true err=down", "a open=false err=<nil>"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions %q, want %q", got, want)
	}
}

func TestSetReset(t *testing.T) {
	t.Parallel()
	var closed int
	s, _ := NewSet(1, time.Minute, func(_ string, open bool, _ error) {
		if !open {
			closed++
		}
	})
	t0 := time.Unix(1000, 0)
	for _, n := range []string{"a", "b"} {
		s.Get(n).Acquire(t0)
		s.Done(n, t0, errors.New("down"), Fault)
	}
	s.Reset()
	if s.Open() != 0 || closed != 2 || !s.Get("a").Acquire(t0) {
		t.Errorf("after Reset: Open() = %d, %d closed", s.Open(), closed)
	}
}

func TestNewSetRejectsBadSettings(t *testing.T) {
	t.Parallel()
	if _, err := NewSet(0, time.Second, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("threshold 0: %v", err)
	}
	if _, err := NewSet(1, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("cool-down 0: %v", err)
	}
}

// TestSetRetainForgetsGoneNodes: a node that left the backend takes its
// breaker with it; an open one is reported closed (the open count, a
// gauge, drops), and a node that comes back starts closed.
func TestSetRetainForgetsGoneNodes(t *testing.T) {
	t.Parallel()
	var got []string
	s, _ := NewSet(1, time.Minute, func(node string, open bool, _ error) {
		got = append(got, fmt.Sprintf("%s open=%v", node, open))
	})
	t0 := time.Unix(1000, 0)
	for _, n := range []string{"a", "b"} {
		s.Get(n).Acquire(t0)
		s.Done(n, t0, errors.New("down"), Fault)
	}
	s.Get("c").Acquire(t0)
	s.Done("c", t0, nil, Fault)
	s.Retain([]string{"b", "c", "d"})
	if s.Open() != 1 {
		t.Errorf("Open() = %d after a's node left, want 1 (b)", s.Open())
	}
	if !s.Get("a").Acquire(t0) {
		t.Error("node a came back: refused by the forgotten breaker")
	}
	if s.Get("b").Acquire(t0) {
		t.Error("node b (still there) let through while its circuit is open")
	}
	want := []string{"a open=true", "b open=true", "a open=false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions %q, want %q", got, want)
	}
}

// TestSetPruneDue: the node list is asked for only while a circuit is
// open, at most once per cool-down.
func TestSetPruneDue(t *testing.T) {
	t.Parallel()
	s, _ := NewSet(1, time.Second, nil)
	t0 := time.Unix(1000, 0)
	if s.pruneDue(t0) {
		t.Error("due with every circuit closed")
	}
	s.Get("a").Acquire(t0)
	s.Done("a", t0, errors.New("down"), Fault)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {0, false}, {999 * time.Millisecond, false}, {time.Second, true}, {1500 * time.Millisecond, false}} {
		if got := s.pruneDue(t0.Add(c.at)); got != c.want {
			t.Errorf("t0+%s: due %v, want %v", c.at, got, c.want)
		}
	}
}

// TestSetPrune: Prune asks for the list and retains it; a failed list
// changes nothing.
func TestSetPrune(t *testing.T) {
	t.Parallel()
	s, _ := NewSet(1, time.Second, nil)
	t0 := time.Unix(1000, 0)
	s.Get("a").Acquire(t0)
	s.Done("a", t0, errors.New("down"), Fault)
	failed := make(chan struct{})
	s.Prune(t0, func(context.Context) ([]string, error) {
		defer close(failed)
		return nil, errors.New("no answer")
	})
	<-failed
	asked := make(chan struct{})
	s.Prune(t0.Add(time.Second), func(ctx context.Context) ([]string, error) {
		defer close(asked)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("node list asked for without a deadline")
		}
		return []string{"b"}, nil
	})
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatal("node list not asked for a cool-down after a failed one (was a forgotten?)")
	}
	// The second list is retained on Prune's goroutine; the first one,
	// which failed, must not have forgotten a before it.
	deadline := time.Now().Add(5 * time.Second)
	for s.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a's node left: Open() = %d 5s later, want 0", s.Open())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSetUnservedNeverOpens: a call the backend as a whole could not serve
// failed (Done says so, for counting) but never opens the node's circuit,
// and frees a probe slot.
func TestSetUnservedNeverOpens(t *testing.T) {
	t.Parallel()
	s, _ := NewSet(2, time.Second, nil)
	t0 := time.Unix(1000, 0)
	down := errors.New("CLUSTERDOWN The cluster is down")
	for i := range 10 {
		if !s.Get("a").Acquire(t0) {
			t.Fatalf("call %d refused after %d unserved calls", i, i)
		}
		if !s.Done("a", t0, down, Unserved) {
			t.Fatalf("call %d: Done does not report the unserved call as failed", i)
		}
	}
	if s.Open() != 0 {
		t.Errorf("Open() = %d after unserved calls, want 0", s.Open())
	}
	// Opened by faults, a probe that is unserved leaves the slot free.
	for range 2 {
		s.Get("a").Acquire(t0)
		s.Done("a", t0, errors.New("timeout"), Fault)
	}
	probe := t0.Add(time.Second)
	if !s.Get("a").Acquire(probe) {
		t.Fatal("probe refused after the cool-down")
	}
	s.Done("a", probe, down, Unserved)
	if !s.Get("a").Acquire(probe) {
		t.Error("probe slot still taken after an unserved probe")
	}
}
