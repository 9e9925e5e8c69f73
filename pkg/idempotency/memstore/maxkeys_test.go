package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
)

// TestMaxKeysEvictsCompletedBeforeLeases: on a full store a new key first
// drops expired records, then the soonest-expiring completed record; live
// leases are evicted only when nothing completed is left.
func TestMaxKeysEvictsCompletedBeforeLeases(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Unix(1_700_000_000, 0))
	s := memstore.New(memstore.Config{Now: clock.Now, MaxKeys: 4, SweepEvery: time.Hour})
	ctx, fp := context.Background(), idempotency.NewFingerprint("POST", "/", nil, nil)
	ttl := func(rec time.Duration) idempotency.TTLs { return idempotency.TTLs{Lease: time.Minute, Record: rec} }
	begin := func(key string, ttls idempotency.TTLs) idempotency.Outcome {
		t.Helper()
		o, err := s.Begin(ctx, "t", key, fp, ttls)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	complete := func(key string, rec time.Duration) {
		t.Helper()
		o := begin(key, ttl(rec))
		if err := s.Complete(ctx, o.Lease, idempotency.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
	complete("done-long", 2*time.Hour)
	complete("done-short", time.Hour)
	begin("lease-1", ttl(time.Hour))
	begin("lease-2", ttl(time.Hour))

	begin("new-1", ttl(time.Hour)) // full: evicts done-short
	if s.Len() != 4 {
		t.Fatalf("Len = %d, want 4", s.Len())
	}
	want := map[string]idempotency.OutcomeKind{"done-long": idempotency.Replay, "lease-1": idempotency.InProgress, "lease-2": idempotency.InProgress, "new-1": idempotency.InProgress}
	for k, kind := range want {
		if o := begin(k, ttl(time.Hour)); o.Kind != kind {
			t.Errorf("%s: %v, want %v", k, o.Kind, kind)
		}
	}
	begin("new-2", ttl(time.Hour)) // evicts done-long, the last completed record
	if o := begin("done-long", ttl(time.Hour)); o.Kind != idempotency.Acquired {
		t.Fatalf("done-long after eviction: %v, want acquired (evicted)", o.Kind)
	}
	// Only leases remain now: the soonest-expiring one goes.
	clock.Advance(30 * time.Second)
	begin("new-3", ttl(time.Hour))
	if s.Len() != 4 {
		t.Fatalf("Len = %d, want 4", s.Len())
	}
	// Expired records are dropped before anything live.
	clock.Advance(2 * time.Minute) // every lease expired
	begin("after-expiry", ttl(time.Hour))
	if s.Len() != 1 {
		t.Fatalf("Len = %d after the leases expired, want 1", s.Len())
	}
}
