package expiry

import (
	"testing"
	"time"
)

func TestScheduleDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := Schedule{Every: time.Minute}
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true},                 // the first call sweeps
		{59 * time.Second, false}, // within Every of the last sweep
		{time.Minute, true},       // Every has passed
		{90 * time.Second, false},
		{30 * time.Second, true}, // the clock stepped back behind the last sweep
		{31 * time.Second, false},
	}
	for i, st := range steps {
		if got := s.Due(t0.Add(st.at)); got != st.want {
			t.Errorf("step %d at t0+%v: Due %v, want %v", i, st.at, got, st.want)
		}
	}
}

func TestPruneAndPruneGroups(t *testing.T) {
	now := time.Unix(1000, 0)
	live := now.Before
	m := map[string]map[int]time.Time{
		"mixed":   {1: now.Add(time.Second), 2: now, 3: now.Add(-time.Second)},
		"expired": {1: now},
		"empty":   {},
	}
	PruneGroups(m, live)
	if len(m) != 1 || len(m["mixed"]) != 1 || m["mixed"][1].IsZero() {
		t.Fatalf("after PruneGroups: %v, want only mixed with entry 1 (an entry expires at its instant)", m)
	}
	if n := Prune(m["mixed"], func(time.Time) bool { return false }); n != 0 || len(m["mixed"]) != 0 {
		t.Errorf("Prune of everything left %d", n)
	}
}
