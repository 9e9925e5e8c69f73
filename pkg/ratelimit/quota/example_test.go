package quota_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// Three Envoys share a limit of 6000 requests per minute (100/s). Each
// reports its usage; the server turns the counts into demands, records them,
// and allocates. The small Envoy wants less than a fair third and gets it all;
// the two others split the rest.
func Example() {
	ctx := context.Background()
	store, _ := quota.NewMemoryStore(quota.MemoryOptions{})
	alloc, _ := quota.NewAllocator(store, quota.Config{})
	budget := quota.RateOf(6000, time.Minute)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	offered := map[string]uint64{"envoy-a": 1050, "envoy-b": 300, "envoy-c": 150} // requests per 5 s
	meters := map[string]*quota.Meter{}
	for id := range offered {
		meters[id] = &quota.Meter{}
		meters[id].Observe(0, 1, t0) // the first report: demand Unknown
	}
	now := t0.Add(quota.ReportInterval)
	for id, n := range offered {
		demand := meters[id].Observe(n/2, n-n/2, now)
		_ = alloc.Report(ctx, "tenant-a", id, demand, now)
	}
	shares, _ := alloc.Allocate(ctx, "tenant-a", budget, now)

	ids := make([]string, 0, len(shares))
	for id := range shares {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := shares[id]
		fmt.Printf("%s: demand %v/s, share %v/s, bucket %d per %s, burst %d\n",
			id, s.Demand, s.Rate, s.Bucket.TokensPerFill, s.Bucket.FillInterval, s.Bucket.MaxTokens)
	}
	// Output:
	// envoy-a: demand 210/s, share 35/s, bucket 2100 per 1m0s, burst 35
	// envoy-b: demand 60/s, share 35/s, bucket 2100 per 1m0s, burst 35
	// envoy-c: demand 30/s, share 30/s, bucket 1800 per 1m0s, burst 30
}
