package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

func Example() {
	// A fixed clock for the example; production code leaves Now nil.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	key := ratelimit.Key("acme", "checkout", []ratelimit.Entry{{Key: "user", Value: "42"}})
	perMinute := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 2, Period: time.Minute}
	for range 3 {
		res, err := store.Allow(context.Background(), key, perMinute, 1)
		if err != nil {
			fmt.Println(err) // the store failed; over-limit is not an error
			return
		}
		fmt.Printf("allowed=%v remaining=%d retry=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// allowed=true remaining=1 retry=0s
	// allowed=true remaining=0 retry=0s
	// allowed=false remaining=0 retry=1m0s
}
