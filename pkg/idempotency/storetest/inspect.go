package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// testInspect: an Inspector describes each state truthfully, refuses to
// delete a record in flight unless forced, and a deleted key is free again.
// Stores that are no Inspector skip it.
func testInspect(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	in, ok := s.(idempotency.Inspector)
	if !ok {
		t.Skip("not an idempotency.Inspector")
	}
	if _, found, err := in.Inspect(ctx, scope, "none"); found || err != nil {
		t.Fatalf("Inspect of a free key: found=%v err=%v", found, err)
	}
	o := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired)
	rec, found, err := in.Inspect(ctx, scope, "k")
	if err != nil || !found || rec.State != idempotency.StateInProgress || rec.Owner != o.Lease.Token ||
		rec.Fingerprint != fp("a").String() || rec.ExpiresIn <= 0 || rec.ExpiresIn > TTLs.Lease || rec.Location == "" {
		t.Fatalf("in progress: %+v found=%v err=%v", rec, found, err)
	}
	if _, _, err := in.Delete(ctx, scope, "k", false); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("Delete in flight = %v, want ErrInFlight", err)
	}
	mustBegin(t, s, scope, "k", fp("a"), idempotency.InProgress) // still there
	want := sampleResponse()
	if err := s.Complete(ctx, o.Lease, want); err != nil {
		t.Fatal(err)
	}
	rec, _, err = in.Inspect(ctx, scope, "k")
	if err != nil || rec.State != idempotency.StateCompleted || rec.Status != want.Status ||
		rec.Headers != len(want.Headers) || rec.BodyBytes != int64(len(want.Body)) || rec.ExpiresIn <= TTLs.Lease {
		t.Fatalf("completed: %+v err=%v", rec, err)
	}
	if rec, found, err = in.Delete(ctx, scope, "k", false); err != nil || !found || rec.State != idempotency.StateCompleted {
		t.Fatalf("Delete completed: %+v found=%v err=%v", rec, found, err)
	}
	o = mustBegin(t, s, scope, "k", fp("b"), idempotency.Acquired) // free: even another body runs
	if _, found, err := in.Delete(ctx, scope, "k", true); err != nil || !found {
		t.Fatalf("forced Delete in flight: found=%v err=%v", found, err)
	}
	if err := s.Complete(ctx, o.Lease, want); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Complete after a forced delete = %v, want ErrLeaseLost", err)
	}
	if _, found, err := in.Delete(ctx, scope, "k", false); found || err != nil {
		t.Fatalf("Delete of a free key: found=%v err=%v", found, err)
	}
}
