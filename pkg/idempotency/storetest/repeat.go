package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// testNotReplayable: a reply that ran but was not kept completes the key
// for good: later Begins with the same request answer Unreplayable with
// the status, never Acquired; another request is still a Mismatch.
func testNotReplayable(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	for name, status := range map[string]int{"known": 201, "unknown": 0} {
		l := mustBegin(t, s, scope, name, fp("a"), idempotency.Acquired).Lease
		if err := s.Complete(ctx, l, idempotency.Response{Status: status, NotReplayable: true}); err != nil {
			t.Fatalf("%s: Complete NotReplayable: %v", name, err)
		}
		for range 2 {
			o := mustBegin(t, s, scope, name, fp("a"), idempotency.Unreplayable)
			if o.Response.Status != status || !o.Response.NotReplayable || len(o.Response.Body) != 0 || o.Response.BodyRef != nil {
				t.Fatalf("%s: Unreplayable response = %+v, want status %d only", name, o.Response, status)
			}
		}
		mustBegin(t, s, scope, name, fp("b"), idempotency.Mismatch)
		if err := s.Release(ctx, l); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("%s: Release of a completed key = %v, want ErrLeaseLost", name, err)
		}
	}
	l := mustBegin(t, s, scope, "bad", fp("a"), idempotency.Acquired).Lease
	for _, r := range []idempotency.Response{
		{Status: 600, NotReplayable: true},
		{Status: 200, NotReplayable: true, Body: []byte("x")},
		{Status: 200, NotReplayable: true, Headers: []idempotency.Header{{Name: "a", Value: "b"}}},
	} {
		if err := s.Complete(ctx, l, r); !errors.Is(err, idempotency.ErrInvalidResponse) {
			t.Errorf("Complete(%+v) = %v, want ErrInvalidResponse", r, err)
		}
	}
}

// testRepeated: a command re-sent after its reply was lost (Redis Cluster
// clients may do so) finds its own work done and succeeds without changing
// it; the same command with different content is still refused.
func testRepeated(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	want := sampleResponse()
	for i := range 2 {
		if err := s.Complete(ctx, l, want); err != nil {
			t.Fatalf("Complete #%d: %v", i+1, err)
		}
	}
	if err := s.Complete(ctx, l, idempotency.Response{Status: 500}); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Complete with another response = %v, want ErrLeaseLost", err)
	}
	if got := mustBegin(t, s, scope, "k", fp("a"), idempotency.Replay).Response; !equalResponse(got, want) {
		t.Fatalf("replayed %+v, want %+v", got, want)
	}
	nr := mustBegin(t, s, scope, "nr", fp("a"), idempotency.Acquired).Lease
	for i := range 2 {
		if err := s.Complete(ctx, nr, idempotency.Response{Status: 202, NotReplayable: true}); err != nil {
			t.Fatalf("NotReplayable Complete #%d: %v", i+1, err)
		}
	}
	rel := mustBegin(t, s, scope, "rel", fp("a"), idempotency.Acquired).Lease
	for i := range 2 {
		if err := s.Renew(ctx, rel); err != nil {
			t.Fatalf("Renew #%d: %v", i+1, err)
		}
	}
	for i := range 2 {
		if err := s.Release(ctx, rel); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	mustBegin(t, s, scope, "rel", fp("b"), idempotency.Acquired)
}

// testBodyRef: a record whose body lives in object storage keeps the
// reference (name, size, SHA-256) and no inline bytes.
func testBodyRef(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	ref := blob.Ref{Name: "idem/ab/cdef", Size: 3 << 20, SHA256: strings.Repeat("0f", 32)}
	want := idempotency.Response{Status: 201, Headers: sampleResponse().Headers, BodyRef: &ref}
	if err := s.Complete(ctx, l, want); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := mustBegin(t, s, scope, "k", fp("a"), idempotency.Replay).Response
	if !equalResponse(got, want) {
		t.Fatalf("replayed %+v (ref %+v), want ref %+v", got, got.BodyRef, ref)
	}
	l2 := mustBegin(t, s, scope, "bad", fp("a"), idempotency.Acquired).Lease
	bad := blob.Ref{Name: "", Size: 1, SHA256: ref.SHA256}
	if err := s.Complete(ctx, l2, idempotency.Response{Status: 200, BodyRef: &bad}); !errors.Is(err, idempotency.ErrInvalidResponse) {
		t.Fatalf("Complete with a nameless ref = %v, want ErrInvalidResponse", err)
	}
}
