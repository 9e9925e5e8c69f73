package allotment

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// resetLimit is the limit of the reset tests: an hour's window, so that
// only the limit stops the replicas, and slices of up to a quarter of it.
const resetLimit = 100

// replicaOn is one replica on clk: an allotment store over the Redis
// store on client, wrapped by wrap when set. The fake clock keeps a
// loaded machine from cooling the slices between requests.
func replicaOn(t *testing.T, clk *clock, client redisstore.Client, wrap func(ratelimit.Store) ratelimit.Store) *Store {
	t.Helper()
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var inner ratelimit.Store = rs
	if wrap != nil {
		inner = wrap(rs)
	}
	s, err := New(inner, Options{Registerer: prometheus.NewRegistry(), Now: clk.Now, MaxFraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sharedRedis(t *testing.T) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redistest.Standalone(t).Addr})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// hold asks s for hits, 10µs apart on clk, until it holds tokens of l on
// key (a warm slice with a lease of several tokens) and returns the hits
// admitted.
func hold(t *testing.T, clk *clock, s *Store, key string, l ratelimit.Limit) int64 {
	t.Helper()
	var admitted int64
	for range 12 {
		clk.Add(10 * time.Microsecond)
		res, err := s.Allow(context.Background(), key, l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
	}
	s.wg.Wait() // the prefetch in flight, if any
	if s.table.held(sliceID(key, l), clk.Now()) == 0 {
		t.Fatalf("the replica holds no tokens of %s after %d admissions", key, admitted)
	}
	return admitted
}

// TestResetNeverLetsTheFleetOverAdmit: two replicas hold slices of one
// limit on one Redis, one resets it, then both ask until refused. The
// other replica's slices were charged to the count the reset deleted;
// after the reset the two replicas together admit the limit at most.
func TestResetNeverLetsTheFleetOverAdmit(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		resetTwoReplicas(t, sharedRedis(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		client := redistest.NewCluster(t).Client()
		t.Cleanup(func() { _ = client.Close() })
		resetTwoReplicas(t, client)
	})
}

func resetTwoReplicas(t *testing.T, client redisstore.Client) {
	for _, alg := range leasable {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			a, b := replicaOn(t, clk, client, nil), replicaOn(t, clk, client, nil)
			l := allot(alg, resetLimit, time.Hour)
			key := t.Name()
			hold(t, clk, a, key, l)
			hold(t, clk, b, key, l)
			heldB := b.table.held(sliceID(key, l), clk.Now())
			if err := a.Reset(context.Background(), []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}}}); err != nil {
				t.Fatal(err)
			}
			fromA := untilRefused(t, a, key, l)
			fromB := untilRefused(t, b, key, l)
			t.Logf("after the reset: %d + %d admitted; the other replica held %d", fromA, fromB, heldB)
			if got := fromA + fromB; got > resetLimit {
				t.Errorf("after the reset the replicas admitted %d (%d + %d; the other held %d), want at most %d",
					got, fromA, fromB, heldB, resetLimit)
			}
			if got := fromA + fromB; got < resetLimit/2 {
				t.Errorf("after the reset the replicas admitted %d, want at least half the limit (%d)", got, resetLimit/2)
			}
		})
	}
}

// holdAfter passes calls to its store; armed, it holds the first charge
// after the store answered (the lease is charged, its answer not yet
// back) until gate is closed, and closes charged.
type holdAfter struct {
	ratelimit.Store
	armed   atomic.Bool
	charged chan struct{}
	gate    chan struct{}
}

func (h *holdAfter) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	d, err := h.Store.AllowBatch(ctx, reqs)
	if reqs[0].Hits > 0 && h.armed.CompareAndSwap(true, false) {
		close(h.charged)
		<-h.gate
	}
	return d, err
}

func (h *holdAfter) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, h, key, l, hits)
}

// TestResetDuringALeaseInFlight: a lease charged before a reset whose
// answer arrives after it must not give its replica tokens the reset
// forgot: counted from the reset, the two replicas admit the limit at
// most.
func TestResetDuringALeaseInFlight(t *testing.T) {
	t.Parallel()
	client := sharedRedis(t)
	for _, alg := range leasable {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			h := &holdAfter{charged: make(chan struct{}), gate: make(chan struct{})}
			clk := newClock()
			a := replicaOn(t, clk, client, func(rs ratelimit.Store) ratelimit.Store { h.Store = rs; return h })
			b := replicaOn(t, clk, client, nil)
			l := allot(alg, resetLimit, time.Hour)
			key := t.Name()
			hold(t, clk, a, key, l)
			hold(t, clk, b, key, l)

			h.armed.Store(true)
			var late atomic.Int64 // admissions of calls that returned after the lease was held
			done := make(chan struct{})
			go func() { // asks on a until its next lease, sync or prefetch, is held
				defer close(done)
				for {
					res, err := a.Allow(context.Background(), key, l, 1)
					if err != nil {
						t.Error(err)
						return
					}
					select {
					case <-h.charged:
						if res.Allowed {
							late.Add(1)
						}
						return
					default:
					}
				}
			}()
			<-h.charged
			if err := b.Reset(context.Background(), []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}}}); err != nil {
				t.Fatal(err)
			}
			close(h.gate)
			<-done
			a.wg.Wait()
			fromA := untilRefused(t, a, key, l)
			fromB := untilRefused(t, b, key, l)
			if got := late.Load() + fromA + fromB; got > resetLimit {
				t.Errorf("from the reset the replicas admitted %d (%d + %d + %d), want at most %d",
					got, late.Load(), fromA, fromB, resetLimit)
			}
		})
	}
}

func (h *holdAfter) StateKeys(r ratelimit.Request) []string {
	return h.Store.(ratelimit.Resetter).StateKeys(r)
}

func (h *holdAfter) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	return h.Store.(ratelimit.Resetter).Reset(ctx, reqs)
}

// TestResetWhileWaitingForALease: over a store that keeps no ledger (the
// memory store), a lease charged before a reset of the same replica and
// answered after it installs nothing: the request that waited for it is
// decided on the reset state, and counted from the reset the replica
// admits the limit at most.
func TestResetWhileWaitingForALease(t *testing.T) {
	t.Parallel()
	clk := newClock()
	mem, err := memstore.New(memstore.Options{Now: clk.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := &holdAfter{Store: mem, charged: make(chan struct{}), gate: make(chan struct{})}
	s, err := New(h, Options{Registerer: prometheus.NewRegistry(), Now: clk.Now, MaxFraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := allot(ratelimit.FixedWindow, 40, time.Hour)
	ctx := context.Background()
	ask := func() bool {
		clk.Add(10 * time.Microsecond)
		res, err := s.Allow(ctx, "k", l, 1)
		if err != nil {
			t.Error(err)
		}
		return res.Allowed
	}
	for range 3 { // warm: a slice sized for a high demand
		ask()
		s.wg.Wait()
	}
	e := s.table.lookup(sliceID("k", l))
	if e == nil {
		t.Fatal("no slice")
	}
	// Callers ask until their call is answered after the reset: the one
	// whose lease is held (a request leasing in its path, or a prefetch
	// while they take the slice's last tokens) and one that waits for it.
	var late atomic.Int64
	var resetting atomic.Bool
	var callers sync.WaitGroup
	caller := func() {
		for {
			allowed := ask()
			if resetting.Load() {
				if allowed {
					late.Add(1)
				}
				return
			}
		}
	}
	h.armed.Store(true)
	callers.Go(caller)
	<-h.charged
	callers.Go(caller)
	for waiting(e) == 0 {
		runtime.Gosched()
	}
	resetting.Store(true)
	if err := s.Reset(ctx, []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}}}); err != nil {
		t.Fatal(err)
	}
	close(h.gate)
	callers.Wait()
	s.wg.Wait()
	after := late.Load()
	for range 3 * 40 {
		if ask() {
			after++
		}
	}
	if after > 40 {
		t.Errorf("from the reset the replica admitted %d (%d by the calls answered after it), want at most 40", after, late.Load())
	}
}
