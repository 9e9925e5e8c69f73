package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Decide is the pure core every store shares: feed it the stored state and
// store what it returns when the hits are admitted.
func ExampleDecide() {
	limit := ratelimit.Limit{Algorithm: ratelimit.GCRA, Requests: 2, Period: time.Second}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var state ratelimit.State
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		now := start.Add(at).UnixMicro()
		res, next, err := ratelimit.Decide(limit, now, state, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if res.Allowed {
			state = next
		}
		fmt.Printf("+%v allowed=%v remaining=%d retry=%v\n", at, res.Allowed, res.Remaining, res.RetryAfter)
	}
	fmt.Println(ratelimit.Key("acme", "api", []ratelimit.Entry{{Key: "path", Value: "/v1/{id}"}}))
	// Output:
	// +0s allowed=true remaining=1 retry=0s
	// +0s allowed=true remaining=0 retry=0s
	// +0s allowed=false remaining=0 retry=500ms
	// +500ms allowed=true remaining=0 retry=0s
	// acme|api|path=/v1/%7Bid%7D
}
