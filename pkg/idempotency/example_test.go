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

// A queue consumer (at-least-once delivery: SQS, Kafka, a webhook's
// retries) runs each message once: the message id is the key, its payload
// the fingerprint, and a Response records the outcome. A redelivery of a
// handled message replays it and is acknowledged without running; one
// that arrives while the first delivery is still being handled is
// InProgress (leave it unacknowledged: the queue delivers it again); a
// failed handler releases the key, so that the next delivery runs. The
// clock is injected here only to show a lease expiring: a consumer that
// crashes mid-message holds its key until the lease's TTL, then the next
// delivery runs it again.
func Example_queueConsumer() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	ttls := idempotency.TTLs{Lease: time.Minute, Record: 7 * 24 * time.Hour}
	const queue = "orders-queue" // the scope: one consumer group's ids

	handle := func(id string, payload []byte, run func() error) string {
		fp := idempotency.NewFingerprint("MESSAGE", queue, payload, nil)
		out, err := store.Begin(ctx, queue, id, fp, ttls)
		switch {
		case err != nil:
			return "store down: leave it unacknowledged"
		case out.Kind == idempotency.Replay:
			return "already handled: ack"
		case out.Kind == idempotency.InProgress:
			return "being handled elsewhere: leave it unacknowledged"
		case out.Kind == idempotency.Mismatch:
			return "same id, other payload: dead-letter it"
		case out.Kind != idempotency.Acquired:
			return "handled, outcome not kept: ack"
		}
		if err := run(); err != nil {
			_ = store.Release(ctx, out.Lease)
			return "failed: released, the next delivery runs"
		}
		_ = store.Complete(ctx, out.Lease, idempotency.Response{Status: 200})
		return "handled: ack"
	}
	ok := func() error { return nil }
	crash := func() error { return fmt.Errorf("downstream timeout") }

	fmt.Println(handle("msg-1", []byte(`{"qty":1}`), crash))
	fmt.Println(handle("msg-1", []byte(`{"qty":1}`), ok))
	fmt.Println(handle("msg-1", []byte(`{"qty":1}`), ok))
	fmt.Println(handle("msg-1", []byte(`{"qty":2}`), ok))

	// A consumer that dies holding msg-2's lease: the redelivery waits
	// for the lease to expire, then runs.
	_, _ = store.Begin(ctx, queue, "msg-2", idempotency.NewFingerprint("MESSAGE", queue, nil, nil), ttls)
	fmt.Println(handle("msg-2", nil, ok))
	now = now.Add(ttls.Lease + time.Second)
	fmt.Println(handle("msg-2", nil, ok))
	// Output:
	// failed: released, the next delivery runs
	// handled: ack
	// already handled: ack
	// same id, other payload: dead-letter it
	// being handled elsewhere: leave it unacknowledged
	// handled: ack
}
