package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
)

// Time is injected: a lease ends exactly lease TTL after Begin.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	s := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	ctx, fp := context.Background(), idempotency.NewFingerprint("POST", "/orders", nil, nil)
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}

	first, _ := s.Begin(ctx, "acme", "k", fp, ttls)
	now = now.Add(10 * time.Second)
	dup, _ := s.Begin(ctx, "acme", "k", fp, ttls)
	fmt.Println(dup.Kind, dup.RetryAfter)

	now = now.Add(20 * time.Second) // the lease expired: a retry takes over
	retry, _ := s.Begin(ctx, "acme", "k", fp, ttls)
	fmt.Println(retry.Kind)
	fmt.Println(s.Complete(ctx, first.Lease, idempotency.Response{Status: 201}))
	// Output:
	// in_progress 20s
	// acquired
	// idempotency lease lost
}
