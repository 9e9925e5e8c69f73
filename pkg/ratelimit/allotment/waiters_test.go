package allotment

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

// stalledStore is a primary that fails every call, the first only once the
// test opens its gate: a store that holds each call until its timeout.
type stalledStore struct {
	downStore
	gate  chan struct{}
	calls atomic.Int64
}

func (s *stalledStore) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	s.calls.Add(1)
	<-s.gate
	return s.downStore.AllowBatch(ctx, reqs)
}

func (s *stalledStore) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, s, key, l, hits)
}

// TestWaitersShareAFailedLease: the requests that wait for a lease that
// fails (the store's error, or its failure mode's refusal) fail with it at
// once; none starts a lease of its own, which on a store that stalls until
// its timeout would make k waiters wait k timeouts before the breaker
// opens. Counted in calls to the stalled store: one for k+1 requests.
func TestWaitersShareAFailedLease(t *testing.T) {
	t.Parallel()
	const waiters = 4
	for _, wrap := range []string{"error", "failover closed"} {
		t.Run(wrap, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			stalled := &stalledStore{gate: make(chan struct{})}
			var inner ratelimit.Store = stalled
			if wrap == "failover closed" {
				fs, err := failover.New(stalled, failover.Options{Mode: failover.Closed, Registerer: prometheus.NewRegistry(),
					Now: clk.Now, FailureThreshold: 100})
				if err != nil {
					t.Fatal(err)
				}
				inner = fs
			}
			s, err := New(inner, Options{Registerer: prometheus.NewRegistry(), Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			l := allot(ratelimit.FixedWindow, 1000, time.Hour)
			id := sliceID("k", l)
			// A slice for k, empty: the doorkeeper saw k once already.
			s.table.door.seen(doorHash(s.table.keyHash(id), id), clk.Now())
			e := s.table.admit(id, l, clk.Now)
			if e == nil {
				t.Fatal("no slice for a warm key")
			}

			ctx := context.Background()
			req := []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: 1}}
			type outcome struct {
				allowed bool
				err     error
			}
			out := make(chan outcome, waiters+1)
			ask := func() {
				d, err := s.AllowBatch(ctx, req)
				out <- outcome{allowed: err == nil && d[0].Allowed, err: err}
			}
			go ask() // the leader: its lease stalls
			for stalled.calls.Load() == 0 {
				runtime.Gosched()
			}
			var wg sync.WaitGroup
			for range waiters {
				wg.Go(ask)
			}
			for waiting(e) < waiters {
				runtime.Gosched()
			}
			close(stalled.gate) // the stalled call times out
			wg.Wait()
			for range waiters + 1 {
				if o := <-out; o.allowed {
					t.Errorf("a request was admitted by a failing store in %s mode", wrap)
				} else if wrap == "error" && o.err == nil {
					t.Error("a waiter of a lease that failed got no error")
				}
			}
			if n := stalled.calls.Load(); n != 1 {
				t.Errorf("%d calls to the stalled store for %d requests waiting on one lease, want 1", n, waiters+1)
			}
		})
	}
}

// waiting is the hits of requests waiting for e's lease in flight.
func waiting(e *entry) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.s.waiting
}
