package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestCallTimeoutBoundsQueuedCalls: Redis holds one reply for 5 s while
// decisions without deadlines of their own queue behind it (coalescing) or
// go out beside it (no coalescing). With CallTimeout 300ms the held one
// fails at the timeout, and every decision is answered within about twice
// the timeout of being asked (the queued ones count their time in the
// queue), none after the hold.
func TestCallTimeoutBoundsQueuedCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	for _, maxBatch := range []int{DefaultMaxBatch, 1} {
		t.Run(fmt.Sprintf("max_batch=%d", maxBatch), func(t *testing.T) {
			t.Parallel()
			p := redistest.NewHoldingProxy(t)
			// The client's own read timeout is longer than the hold: only
			// the store's CallTimeout can end the wait.
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: p.Dial, ReadTimeout: 10 * time.Second,
				ContextTimeoutEnabled: true, PoolSize: 8})
			t.Cleanup(func() { _ = c.Close() })
			const timeout = 300 * time.Millisecond
			s, err := New(c, Options{MaxBatch: maxBatch, CallTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := s.Ping(ctx); err != nil { // dial and load the scripts before the hold
				t.Fatal(err)
			}
			l := limitFor(ratelimit.FixedWindow, 10, time.Hour)
			key := randomKey(t)
			p.Hold(5 * time.Second)
			const calls = 6
			took := make(chan time.Duration, calls)
			errs := make(chan error, calls)
			for i := range calls {
				go func() {
					start := time.Now()
					_, err := s.Allow(ctx, fmt.Sprintf("%s|%d", key, i), l, 1)
					took <- time.Since(start)
					errs <- err
				}()
				time.Sleep(10 * time.Millisecond) // the first is in flight, the rest queue
			}
			failed := 0
			for range calls {
				d, err := <-took, <-errs
				if err != nil {
					failed++
				}
				// 2x the timeout, plus slack for a loaded machine; far below the hold.
				if d > 2*timeout+time.Second {
					t.Errorf("a decision waited %s, want at most about %s", d, 2*timeout)
				}
			}
			if failed == 0 {
				t.Error("every decision succeeded although Redis held one reply past the timeout")
			}
		})
	}
}
