// Package storetest is the behaviour every idempotency.Store must show,
// written once and run against each implementation (memory, Redis
// standalone, Redis Cluster) from that store's tests.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// Harness adapts one Store implementation to the suite.
type Harness struct {
	// New returns an empty store for one test; the test closes it.
	New func(t *testing.T) idempotency.Store
	// Expire makes the record of (scope, key) in s expire as if its TTL had
	// run out (advance an injected clock, or let Redis expire the key).
	Expire func(t *testing.T, s idempotency.Store, scope, key string)
	// MaxBodyBytes is the body cap the stores from New enforce.
	MaxBodyBytes int64
}

// TTLs used by the suite: long enough never to expire on their own.
var TTLs = idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"Lifecycle", testLifecycle},
		{"Mismatch", testMismatch},
		{"ReleaseLetsARetryRun", testRelease},
		{"RenewAndStateChecks", testRenew},
		{"FencingAfterTakeover", testFencing},
		{"ExpiredLeaseIsLost", testExpiredLease},
		{"RecordExpires", testRecordExpires},
		{"ConcurrentBeginOneLease", testConcurrentBegin},
		{"ScopeIsolation", testScopeIsolation},
		{"BodiesRoundTrip", testBodies},
		{"TooLarge", testTooLarge},
		{"InvalidArguments", testInvalid},
		{"TooManyHeaders", testTooManyHeaders},
		{"Close", testClose},
		{"NotReplayable", testNotReplayable},
		{"RepeatedTransitions", testRepeated},
		{"BodyRefRoundTrip", testBodyRef},
		{"Inspect", testInspect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, h)
		})
	}
}

func open(t *testing.T, h Harness) idempotency.Store {
	t.Helper()
	s := h.New(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Scope returns a scope unique to the test, so tests share no keys.
func Scope(t *testing.T) string { return fmt.Sprintf("tenant-%s-%d", t.Name(), time.Now().UnixNano()) }

func fp(s string) idempotency.Fingerprint {
	return idempotency.NewFingerprint("POST", "/orders", []byte(s), nil)
}

func mustBegin(t *testing.T, s idempotency.Store, scope, key string, f idempotency.Fingerprint, want idempotency.OutcomeKind) idempotency.Outcome {
	t.Helper()
	o, err := s.Begin(context.Background(), scope, key, f, TTLs)
	if err != nil {
		t.Fatalf("Begin(%q, %q): %v", scope, key, err)
	}
	if o.Kind != want {
		t.Fatalf("Begin(%q, %q) = %v, want %v", scope, key, o.Kind, want)
	}
	return o
}

func sampleResponse() idempotency.Response {
	return idempotency.Response{
		Status: 201,
		Headers: []idempotency.Header{
			{Name: "content-type", Value: "application/json"},
			{Name: "location", Value: "/orders/42"},
			{Name: "x-multi", Value: "one"},
			{Name: "x-multi", Value: "two"},
		},
		Body: []byte(`{"id":42}`),
	}
}

func equalResponse(a, b idempotency.Response) bool {
	if len(a.Body) == 0 && len(b.Body) == 0 {
		a.Body, b.Body = nil, nil // nil and empty are the same body
	}
	return a.Equal(b)
}

func testLifecycle(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	o := mustBegin(t, s, scope, "k1", fp("a"), idempotency.Acquired)
	if len(o.Lease.Token) != 32 || o.Lease.Scope != scope || o.Lease.Key != "k1" || o.Lease.TTLs != TTLs {
		t.Fatalf("lease = %+v", o.Lease)
	}
	in := mustBegin(t, s, scope, "k1", fp("a"), idempotency.InProgress)
	if in.RetryAfter <= 0 || in.RetryAfter > TTLs.Lease {
		t.Fatalf("RetryAfter = %s, want in (0, %s]", in.RetryAfter, TTLs.Lease)
	}
	want := sampleResponse()
	if err := s.Complete(ctx, o.Lease, want); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	for range 2 {
		r := mustBegin(t, s, scope, "k1", fp("a"), idempotency.Replay)
		if !equalResponse(r.Response, want) {
			t.Fatalf("replayed %+v, want %+v", r.Response, want)
		}
	}
}

func testMismatch(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	o := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired)
	mustBegin(t, s, scope, "k", fp("b"), idempotency.Mismatch)
	if err := s.Complete(ctx, o.Lease, sampleResponse()); err != nil {
		t.Fatal(err)
	}
	mustBegin(t, s, scope, "k", fp("b"), idempotency.Mismatch)
	mustBegin(t, s, scope, "k", fp("a"), idempotency.Replay)
}

func testRelease(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	o := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired)
	if err := s.Release(ctx, o.Lease); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// The key is free: a repeated (re-sent) Release is harmless.
	if err := s.Release(ctx, o.Lease); err != nil {
		t.Fatalf("second Release = %v, want nil", err)
	}
	// After a release the key is free, whatever the fingerprint.
	o2 := mustBegin(t, s, scope, "k", fp("b"), idempotency.Acquired)
	if o2.Lease.Token == o.Lease.Token {
		t.Fatal("a new lease reused the old token")
	}
	if err := s.Complete(ctx, o.Lease, sampleResponse()); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Complete with released lease = %v, want ErrLeaseLost", err)
	}
}

func testRenew(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	o := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired)
	if err := s.Renew(ctx, o.Lease); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	forged := o.Lease
	forged.Token = idempotency.NewToken()
	for name, f := range map[string]func(idempotency.Lease) error{
		"Renew":    func(l idempotency.Lease) error { return s.Renew(ctx, l) },
		"Release":  func(l idempotency.Lease) error { return s.Release(ctx, l) },
		"Complete": func(l idempotency.Lease) error { return s.Complete(ctx, l, sampleResponse()) },
	} {
		if err := f(forged); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Errorf("%s with a wrong token = %v, want ErrLeaseLost", name, err)
		}
	}
	if err := s.Complete(ctx, o.Lease, sampleResponse()); err != nil {
		t.Fatal(err)
	}
	// A completed record is no longer a lease: it cannot be renewed,
	// released (deleted) or overwritten, even by its former owner.
	if err := s.Renew(ctx, o.Lease); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Errorf("Renew after Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, o.Lease); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Errorf("Release after Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, o.Lease, idempotency.Response{Status: 500}); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Errorf("second Complete = %v, want ErrLeaseLost", err)
	}
	mustBegin(t, s, scope, "k", fp("a"), idempotency.Replay)
}

// testFencing: the first owner's lease expires and a second request takes
// the key; the first must not be able to complete, release or renew it.
func testFencing(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	first := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	h.Expire(t, s, scope, "k")
	second := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease

	if err := s.Complete(ctx, first, idempotency.Response{Status: 200, Body: []byte("stale")}); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("stale Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, first); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("stale Release = %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, first); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("stale Renew = %v, want ErrLeaseLost", err)
	}
	mustBegin(t, s, scope, "k", fp("a"), idempotency.InProgress)
	want := sampleResponse()
	if err := s.Complete(ctx, second, want); err != nil {
		t.Fatalf("Complete by the new owner: %v", err)
	}
	if r := mustBegin(t, s, scope, "k", fp("a"), idempotency.Replay); !equalResponse(r.Response, want) {
		t.Fatalf("replayed %+v, want the new owner's %+v", r.Response, want)
	}
}

func testExpiredLease(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	h.Expire(t, s, scope, "k")
	if err := s.Complete(ctx, l, sampleResponse()); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Complete after expiry = %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, l); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Renew after expiry = %v, want ErrLeaseLost", err)
	}
	mustBegin(t, s, scope, "k", fp("b"), idempotency.Acquired)
}

func testRecordExpires(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	if err := s.Complete(ctx, l, sampleResponse()); err != nil {
		t.Fatal(err)
	}
	h.Expire(t, s, scope, "k")
	mustBegin(t, s, scope, "k", fp("b"), idempotency.Acquired)
}

// testConcurrentBegin: 100 racing Begins on one key yield exactly one lease.
func testConcurrentBegin(t *testing.T, h Harness) {
	s, scope := open(t, h), Scope(t)
	const n = 100
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		counts [5]int
		mu     sync.Mutex
		errs   []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, err := s.Begin(context.Background(), scope, "race", fp("a"), TTLs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			counts[o.Kind]++
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d Begins failed, first: %v", len(errs), errs[0])
	}
	if counts[idempotency.Acquired] != 1 || counts[idempotency.InProgress] != n-1 {
		t.Fatalf("acquired %d, in progress %d; want 1 and %d", counts[idempotency.Acquired], counts[idempotency.InProgress], n-1)
	}
}

// testScopeIsolation: a key completed in one scope never replays in
// another, however the scope and key strings are chosen.
func testScopeIsolation(t *testing.T, h Harness) {
	s, ctx := open(t, h), context.Background()
	base := Scope(t)
	pairs := [][2]string{
		{base + "a|b", "c"}, {base + "a", "b|c"}, {base + "a", "b%7Cc"}, {base + "a%7Cb", "c"},
		{base + "a}", "{b"}, {base + "a", "}{b"}, {base + "", "a|b|c"}, {base + "a:idem:", "x"},
		{base + "a", "x\\"}, {base + "a#" + string(make([]byte, 200)), "x"}, {base + "a#", "x"},
		{base + "A", "b|c"}, {base + "a b", "c"}, {base + "a", " b c"},
	}
	leases := make([]idempotency.Lease, len(pairs))
	for i, p := range pairs {
		leases[i] = mustBegin(t, s, p[0], p[1], fp("same body"), idempotency.Acquired).Lease
	}
	for i, l := range leases {
		r := idempotency.Response{Status: 200, Body: []byte(fmt.Sprint("owner ", i))}
		if err := s.Complete(ctx, l, r); err != nil {
			t.Fatalf("Complete %d: %v", i, err)
		}
	}
	for i, p := range pairs {
		r := mustBegin(t, s, p[0], p[1], fp("same body"), idempotency.Replay)
		if got, want := string(r.Response.Body), fmt.Sprint("owner ", i); got != want {
			t.Errorf("pair %q replayed %q, want %q", p, got, want)
		}
	}
}

func testBodies(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i*7 + i/256)
	}
	bodies := map[string][]byte{
		"empty":        nil,
		"binary":       binary,
		"compressible": bytes.Repeat([]byte("idempotent "), 20000),
		"nul":          {0, 0, 0, 0xff},
	}
	for name, body := range bodies {
		l := mustBegin(t, s, scope, name, fp(name), idempotency.Acquired).Lease
		want := idempotency.Response{Status: 200, Headers: []idempotency.Header{{Name: "x-obs", Value: "caf\xe9"}}, Body: body}
		if err := s.Complete(ctx, l, want); err != nil {
			t.Fatalf("%s: Complete: %v", name, err)
		}
		got := mustBegin(t, s, scope, name, fp(name), idempotency.Replay).Response
		if !equalResponse(got, want) {
			t.Fatalf("%s: replayed %d bytes, want %d identical bytes", name, len(got.Body), len(want.Body))
		}
	}
}

func testTooLarge(t *testing.T, h Harness) {
	if h.MaxBodyBytes <= 0 {
		t.Skip("store has no body cap")
	}
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	big := idempotency.Response{Status: 200, Body: make([]byte, h.MaxBodyBytes+1)}
	if err := s.Complete(ctx, l, big); !errors.Is(err, idempotency.ErrTooLarge) {
		t.Fatalf("Complete of %d bytes = %v, want ErrTooLarge", len(big.Body), err)
	}
	// The lease survives a refused Complete, so its owner can release it.
	if err := s.Release(ctx, l); err != nil {
		t.Fatalf("Release after ErrTooLarge: %v", err)
	}
	mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired)
}

func testInvalid(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	for _, key := range []string{"", string(make([]byte, 256)), "new\nline", "caf\xe9"} {
		if _, err := s.Begin(ctx, scope, key, fp("a"), TTLs); !errors.Is(err, idempotency.ErrInvalidKey) {
			t.Errorf("Begin(key %q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := s.Begin(ctx, scope, "k", fp("a"), idempotency.TTLs{Lease: time.Second}); !errors.Is(err, idempotency.ErrInvalidTTL) {
		t.Errorf("Begin without record TTL = %v, want ErrInvalidTTL", err)
	}
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	for _, r := range []idempotency.Response{
		{Status: 0}, {Status: 600},
		{Status: 200, Headers: []idempotency.Header{{Name: "bad name", Value: "v"}}},
		{Status: 200, Headers: []idempotency.Header{{Name: "x", Value: "a\r\nb"}}},
	} {
		if err := s.Complete(ctx, l, r); !errors.Is(err, idempotency.ErrInvalidResponse) {
			t.Errorf("Complete(%+v) = %v, want ErrInvalidResponse", r, err)
		}
	}
	mustBegin(t, s, scope, "k", fp("a"), idempotency.InProgress)
}

// testTooManyHeaders: a response with more header fields than a record
// may hold is refused at Complete (the lease is kept), so that no store
// writes a record it, or another store, could not replay.
func testTooManyHeaders(t *testing.T, h Harness) {
	s, scope, ctx := open(t, h), Scope(t), context.Background()
	l := mustBegin(t, s, scope, "k", fp("a"), idempotency.Acquired).Lease
	r := idempotency.Response{Status: 200, Headers: make([]idempotency.Header, idempotency.MaxReplayHeaders+1)}
	for i := range r.Headers {
		r.Headers[i] = idempotency.Header{Name: "x-h", Value: fmt.Sprint(i)}
	}
	if err := s.Complete(ctx, l, r); !errors.Is(err, idempotency.ErrInvalidResponse) {
		t.Fatalf("Complete with %d headers = %v, want ErrInvalidResponse", len(r.Headers), err)
	}
	mustBegin(t, s, scope, "k", fp("a"), idempotency.InProgress)
	r.Headers = r.Headers[:idempotency.MaxReplayHeaders]
	if err := s.Complete(ctx, l, r); err != nil {
		t.Fatalf("Complete with %d headers: %v", len(r.Headers), err)
	}
	if got := mustBegin(t, s, scope, "k", fp("a"), idempotency.Replay).Response; !equalResponse(got, r) {
		t.Fatalf("replayed %d headers, want %d", len(got.Headers), len(r.Headers))
	}
}

func testClose(t *testing.T, h Harness) {
	s := h.New(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Begin(context.Background(), Scope(t), "k", fp("a"), TTLs); !errors.Is(err, idempotency.ErrClosed) {
		t.Fatalf("Begin after Close = %v, want ErrClosed", err)
	}
}
