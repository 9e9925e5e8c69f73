package inflighttest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// testConcurrent: goroutines race Acquire on one key; each holder counts
// itself in an atomic while it holds its slot (incremented after Acquire
// returns, decremented before Release is sent), so the count can only
// overstate what the store holds: it must never exceed the limit.
func testConcurrent(t *testing.T, h Harness) {
	const (
		limit   = 3
		workers = 12
		rounds  = 25
	)
	s, key := h.New(t), Key(t)
	var held, peak, admitted atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- hold(s, key, limit, rounds, &held, &peak, &admitted)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p > limit {
		t.Fatalf("%d slots held at once, limit %d", p, limit)
	}
	if admitted.Load() < limit {
		t.Fatalf("only %d acquisitions in %d attempts", admitted.Load(), workers*rounds)
	}
	// Every slot was released: the key is empty again.
	for range limit {
		acquire(t, s, key, limit, time.Hour, true)
	}
}

func hold(s inflight.Store, key string, limit, rounds int, held, peak, admitted *atomic.Int64) error {
	ctx := context.Background()
	for range rounds {
		slot, r, err := s.Acquire(ctx, key, limit, time.Hour)
		if err != nil {
			return err
		}
		if !r.Acquired {
			runtime.Gosched()
			continue
		}
		admitted.Add(1)
		n := held.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		runtime.Gosched() // hold the slot while others race
		held.Add(-1)
		if ok, err := s.Release(ctx, key, slot); err != nil || !ok {
			return fmt.Errorf("release of a held slot: %v, %v", ok, err)
		}
	}
	return nil
}
