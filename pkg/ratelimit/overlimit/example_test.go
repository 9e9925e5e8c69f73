package overlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/overlimit"
)

// A denied request is answered locally until its RetryAfter; a request under
// a different limit (here a raised override) still goes to the store.
func ExampleNew() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	inner, _ := memstore.New(memstore.Options{Now: clock})
	s, err := overlimit.New(inner, overlimit.Options{Registerer: prometheus.NewRegistry(), Now: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	low := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1, Period: time.Minute}
	high := low
	high.Requests = 100
	for _, l := range []ratelimit.Limit{low, low, low, high} {
		res, _ := s.Allow(ctx, "tenant|api|user=1", l, 1)
		fmt.Printf("limit %d: allowed=%v retry=%v\n", l.Requests, res.Allowed, res.RetryAfter)
	}
	// Output:
	// limit 1: allowed=true retry=0s
	// limit 1: allowed=false retry=1m0s
	// limit 1: allowed=false retry=1m0s
	// limit 100: allowed=true retry=0s
}
