package allotment

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// replicaOver builds one replica's allotment(failover(primary)) whose
// fallback holds 1/replicas of each limit.
func replicaOver(t *testing.T, primary ratelimit.Store, clk *clock, replicas int) *Store {
	t.Helper()
	fb, err := memstore.New(memstore.Options{Now: clk.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	fs, err := failover.New(primary, failover.Options{Fallback: fb, Registerer: reg, Now: clk.Now,
		Replicas: func() int { return replicas }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(fs, Options{Registerer: reg, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// admitN sends n one-hit requests, waits for the leases they began, and
// counts the admitted ones.
func admitN(t *testing.T, s *Store, key string, l ratelimit.Limit, n int) int {
	t.Helper()
	ok := 0
	for range n {
		d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed {
			ok++
		}
	}
	s.wg.Wait() // prefetches: none starts once the requests have stopped
	return ok
}

// TestOutageSpendsSlicesThenTheShare: when Redis fails, each replica of an
// allotment limit first spends the slice it holds (charged to the shared
// count already), then its share of the limit in the fallback: exactly
// held + limit/replicas each, so that the fleet admits at most what Redis
// counted plus the limit, not plus the limit per replica.
func TestOutageSpendsSlicesThenTheShare(t *testing.T) {
	t.Parallel()
	clk := newClock()
	clk.Add(clk.Now().Truncate(time.Hour).Add(time.Hour).Sub(clk.Now())) // one window throughout
	shared, err := memstore.New(memstore.Options{Now: clk.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })
	l := allot(ratelimit.FixedWindow, 160, time.Hour) // slices of at most 10
	const key = "k"
	var reps [2]*Store
	var prims [2]*recorder
	for i := range reps {
		prims[i] = &recorder{Store: nopCloser{shared}}
		reps[i] = replicaOver(t, prims[i], clk, len(reps))
	}
	// Busy on Redis: each replica holds a slice.
	for range 30 {
		clk.Add(time.Millisecond)
		for _, s := range reps {
			admitN(t, s, key, l, 1)
		}
	}
	var held [2]int64
	for i, s := range reps {
		if held[i] = s.table.held(sliceID(key, l), clk.Now()); held[i] < 1 {
			t.Fatalf("replica %d holds no tokens before the outage: the test shows nothing", i)
		}
	}

	for _, p := range prims {
		p.mu.Lock()
		p.err = errors.New("dial tcp: connection refused")
		p.mu.Unlock()
	}
	for i, s := range reps {
		// Twice: the second round spends what prefetches of the first
		// leased from the fallback and left unused.
		got := admitN(t, s, key, l, 200) + admitN(t, s, key, l, 200)
		if want := int(held[i]) + 160/len(reps); got != want {
			t.Errorf("replica %d admitted %d with Redis down, want %d: the %d tokens it held, then its share of %d",
				i, got, want, held[i], 160/len(reps))
		}
	}
}
