package idempotency_test

import (
	"context"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
)

// A request takes the key, its response is stored, and the retry gets the
// stored response back instead of running again.
func Example() {
	ctx := context.Background()
	store := memstore.New(memstore.Config{})
	key, _ := idempotency.ParseKey(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	fp := idempotency.NewFingerprint("POST", "/orders", []byte(`{"qty":1}`), nil)
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: 24 * time.Hour}

	first, _ := store.Begin(ctx, "tenant-a", key, fp, ttls)
	fmt.Println("first:", first.Kind)
	concurrent, _ := store.Begin(ctx, "tenant-a", key, fp, ttls)
	fmt.Println("concurrent:", concurrent.Kind)

	_ = store.Complete(ctx, first.Lease, idempotency.Response{Status: 201, Body: []byte(`{"id":7}`)})
	retry, _ := store.Begin(ctx, "tenant-a", key, fp, ttls)
	fmt.Println("retry:", retry.Kind, retry.Response.Status, string(retry.Response.Body))

	other, _ := store.Begin(ctx, "tenant-b", key, fp, ttls)
	fmt.Println("other tenant:", other.Kind)
	// Output:
	// first: acquired
	// concurrent: in_progress
	// retry: replay 201 {"id":7}
	// other tenant: acquired
}
