package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// holdFirst starts a call on s that the gate holds in flight, so that the
// calls after it queue in the lane; the returned channel gets its error.
func holdFirst(t *testing.T, s *Store, g *gate, key string, l ratelimit.Limit) <-chan error {
	t.Helper()
	first := make(chan error, 1)
	go func() {
		_, err := s.Allow(context.Background(), key+"|first", l, 1)
		first <- err
	}()
	for !g.held.Load() {
		time.Sleep(time.Millisecond)
	}
	return first
}

// TestCancelledCallerDoesNotFailItsPipeline: several decisions share one
// pipeline and one caller's context is cancelled while it is in flight (an
// Envoy stream reset). That caller may see its context's error; every other
// decision of the pipeline is decided and succeeds, for callers with and
// without deadlines (batchContext's two branches). The cancelled caller
// heads the pipeline, whose context batchContext derives from it.
func TestCancelledCallerDoesNotFailItsPipeline(t *testing.T) {
	t.Parallel()
	for _, deadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
			t.Parallel()
			newCtx := func() (context.Context, context.CancelFunc) {
				if deadline {
					return context.WithTimeout(context.Background(), time.Minute)
				}
				return context.WithCancel(context.Background())
			}
			_, client := standalone(t)
			g := newGate()
			client.AddHook(g)
			s := newStore(t, client)
			if err := s.Ping(context.Background()); err != nil { // no NOSCRIPT pass
				t.Fatal(err)
			}
			l := limitFor(ratelimit.FixedWindow, 10, time.Hour)
			key := randomKey(t)
			first := holdFirst(t, s, g, key, l)

			gone, cancel := newCtx()
			defer cancel()
			g.beforePipeline = cancel // the pipeline has left its lane
			goneDone := make(chan struct{})
			go func() {
				defer close(goneDone)
				_, _ = s.Allow(gone, key+"|gone", l, 1) // either outcome is fine
			}()
			waitQueued(t, s, 1)
			const others = 5
			res := make([]ratelimit.Result, others)
			errs := make([]error, others)
			var wg sync.WaitGroup
			for i := range others {
				ctx, cancel := newCtx()
				defer cancel()
				wg.Add(1)
				go func() {
					defer wg.Done()
					res[i], errs[i] = s.Allow(ctx, fmt.Sprintf("%s|%d", key, i), l, 1)
				}()
			}
			waitQueued(t, s, 1+others)
			close(g.release)
			wg.Wait()
			<-goneDone
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for i := range others {
				if errs[i] != nil || !res[i].Allowed || res[i].Remaining != 9 {
					t.Errorf("decision %d: %+v, %v; want admitted with 9 left: another caller's cancellation failed it", i, res[i], errs[i])
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.batches) != 1 || g.batches[0] != 1+others {
				t.Errorf("pipelines of %v, want one of %d", g.batches, 1+others)
			}
		})
	}
}

// TestEndedQueuedCallIsNotSent: a queued call whose context has ended is
// not sent even when no waiter has marked it abandoned. Here it is the
// second request of an AllowBatch whose caller returned at its context's
// end while waiting for the first, so nothing waits for the second. It
// shares its batch with a live call: were it sent, it would go out in a
// pipeline whose context does not end with its own, and charge.
func TestEndedQueuedCallIsNotSent(t *testing.T) {
	t.Parallel()
	_, client := standalone(t)
	g := newGate()
	client.AddHook(g)
	s := newStore(t, client)
	if err := s.Ping(context.Background()); err != nil { // no NOSCRIPT pass
		t.Fatal(err)
	}
	l := limitFor(ratelimit.FixedWindow, 10, time.Hour)
	key := randomKey(t)
	first := holdFirst(t, s, g, key, l)

	ctx, cancel := context.WithCancel(context.Background())
	batch := make(chan error, 1)
	go func() {
		_, err := s.AllowBatch(ctx, []ratelimit.Request{
			{Key: key + "|a", Limits: []ratelimit.Limit{l}, Hits: 1},
			{Key: key + "|b", Limits: []ratelimit.Limit{l}, Hits: 1},
		})
		batch <- err
	}()
	waitQueued(t, s, 2)
	live := make(chan error, 1)
	go func() {
		_, err := s.Allow(context.Background(), key+"|live", l, 1)
		live <- err
	}()
	waitQueued(t, s, 3)
	cancel()
	if err := <-batch; !errors.Is(err, context.Canceled) {
		t.Fatalf("AllowBatch: %v, want context.Canceled", err)
	}
	close(g.release)
	for _, ch := range []<-chan error{first, live} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b"} {
		k := stateKey(DefaultPrefix, tagIdentity(key+"|"+id), l)
		if n, err := client.Exists(context.Background(), k).Result(); err != nil || n != 0 {
			t.Errorf("request %s of the cancelled batch was charged (key exists: %d, %v)", id, n, err)
		}
		g.mu.Lock()
		for _, keys := range g.sentKeys {
			if keys[0] == k {
				t.Errorf("request %s of the cancelled batch was sent", id)
			}
		}
		g.mu.Unlock()
	}
}
