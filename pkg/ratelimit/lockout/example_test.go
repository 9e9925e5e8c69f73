package lockout_test

import (
	"context"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// A login limit's budget is spent: each trip locks the address out, for
// twice as long as the last time, up to an hour.
func Example() {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Config{Now: clock.Now})
	defer store.Close()
	ctx := context.Background()
	policy := lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}

	for range 3 {
		d, trips, _ := store.Trip(ctx, "login|addr=192.0.2.7", policy)
		left, _ := store.Locked(ctx, "login|addr=192.0.2.7")
		fmt.Printf("trip %d: locked for %v (%v left)\n", trips, d, left)
		clock.Advance(d) // the lockout ends; the next failure trips again
	}
	left, _ := store.Locked(ctx, "login|addr=192.0.2.7")
	fmt.Println("after the third lockout:", left)
	// Output:
	// trip 1: locked for 1m0s (1m0s left)
	// trip 2: locked for 2m0s (2m0s left)
	// trip 3: locked for 4m0s (4m0s left)
	// after the third lockout: 0s
}
