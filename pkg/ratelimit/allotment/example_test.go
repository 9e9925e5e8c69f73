package allotment_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/allotment"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// A replica wraps its shared store; limits with consistency allotment are
// then decided from slices leased from it. (In production the inner store
// is the Redis stack; a memory store stands in for it here.)
func Example() {
	shared, _ := memstore.New(memstore.Options{})
	s, err := allotment.New(shared, allotment.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 3, Period: time.Hour, Consistency: ratelimit.Allotment}
	for range 4 {
		r, _ := s.Allow(context.Background(), "tenant|api", l, 1)
		fmt.Println(r.Allowed, r.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}
