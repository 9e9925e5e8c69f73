package breaker

import (
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
	call := func(node string, now time.Time, err error, neutral bool) bool {
		if !s.Get(node).Acquire(now) {
			return false
		}
		s.Done(node, now, err, neutral)
		return true
	}
	for range 3 {
		call("a", t0, down, false)
		call("a", t0, errors.New("bad input"), true)
	}
	if call("a", t0, nil, false) {
		t.Error("node a: call let through while its circuit is open")
	}
	if !call("b", t0, nil, false) || !call("b", t0, down, false) || !call("b", t0, nil, false) {
		t.Error("node b: refused while only node a failed")
	}
	if s.Open() != 1 {
		t.Errorf("Open() = %d, want 1", s.Open())
	}
	if node, st, ok := s.Worst(t0); !ok || node != "a" || st.Failures != 2 || !errors.Is(st.LastErr, down) {
		t.Errorf("Worst = %q %+v %v, want a with 2 failures", node, st, ok)
	}
	if !call("a", t0.Add(time.Second), nil, false) {
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
		s.Done(n, t0, errors.New("down"), false)
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
