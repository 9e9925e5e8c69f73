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

// A budget charged after the fact: each request is checked (ChargeNever, 1
// hit: "is anything left?") and its cost charged when known (ChargeAlways),
// over the limit too. A refund gives back what a reservation overestimated.
func ExampleDecideCharge() {
	limit := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1000, Period: time.Minute}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var state ratelimit.State
	for range 5 {
		check, _, _ := ratelimit.DecideCharge(limit, now, state, 1, ratelimit.ChargeNever)
		if !check.Allowed {
			fmt.Printf("refused, retry in %v\n", check.RetryAfter)
			break
		}
		res, next, _ := ratelimit.DecideCharge(limit, now, state, 300, ratelimit.ChargeAlways)
		state = next
		fmt.Printf("charged 300: within=%v remaining=%d\n", res.Allowed, res.Remaining)
	}
	res, _, _ := ratelimit.DecideCharge(limit, now, state, -250, ratelimit.ChargeAlways)
	fmt.Printf("refunded 250: remaining=%d\n", res.Remaining)
	// Output:
	// charged 300: within=true remaining=700
	// charged 300: within=true remaining=400
	// charged 300: within=true remaining=100
	// charged 300: within=false remaining=0
	// refused, retry in 1m0s
	// refunded 250: remaining=50
}
