package inflight_test

import (
	"context"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

// At most two requests of tenant acme run at once: the third waits until a
// slot is released (or, if its holder vanished, until the slot expires).
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Config{Now: func() time.Time { return now }})

	first, r, _ := store.Acquire(ctx, "acme|/reports", 2, 30*time.Second)
	fmt.Println(r.Acquired, r.InFlight)
	_, r, _ = store.Acquire(ctx, "acme|/reports", 2, 30*time.Second)
	fmt.Println(r.Acquired, r.InFlight)
	_, r, _ = store.Acquire(ctx, "acme|/reports", 2, 30*time.Second)
	fmt.Println(r.Acquired, r.InFlight, r.RetryAfter)

	released, _ := store.Release(ctx, "acme|/reports", first)
	again, _ := store.Release(ctx, "acme|/reports", first)
	fmt.Println(released, again)
	_, r, _ = store.Acquire(ctx, "acme|/reports", 2, 30*time.Second)
	fmt.Println(r.Acquired, r.InFlight)
	// Output:
	// true 1
	// true 2
	// false 2 30s
	// true false
	// true 2
}
