package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/idempotency/storetest"
)

// clock is a manual clock for one store.
type clock = testclock.Clock

type clockedStore struct {
	*memstore.Store
	clock *clock
}

func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(*testing.T) idempotency.Store {
			c := testclock.New(time.Unix(1_700_000_000, 0))
			return clockedStore{memstore.New(memstore.Config{Now: c.Now, MaxBodyBytes: 256 << 10}), c}
		},
		Expire: func(_ *testing.T, s idempotency.Store, _, _ string) {
			// Past both TTLs: the record is gone as it would be in Redis.
			s.(clockedStore).clock.Advance(storetest.TTLs.Record + time.Millisecond)
		},
		MaxBodyBytes: 256 << 10,
	})
}

// TestExpiryBoundaries pins the exact instants: a lease is held until, not
// at, Begin + LeaseTTL; Renew moves that instant; a record lives RecordTTL.
func TestExpiryBoundaries(t *testing.T) {
	c := testclock.New(time.Unix(1_700_000_000, 0))
	s := memstore.New(memstore.Config{Now: c.Now})
	ctx, fp := context.Background(), idempotency.NewFingerprint("POST", "/", nil, nil)
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}

	o, _ := s.Begin(ctx, "t", "k", fp, ttls)
	c.Advance(20 * time.Second)
	if got, _ := s.Begin(ctx, "t", "k", fp, ttls); got.Kind != idempotency.InProgress || got.RetryAfter != 10*time.Second {
		t.Fatalf("at +20s: %v retry %s, want in progress, 10s", got.Kind, got.RetryAfter)
	}
	if err := s.Renew(ctx, o.Lease); err != nil {
		t.Fatal(err)
	}
	c.Advance(29 * time.Second) // +49s: alive only because of the renewal at +20s
	if got, _ := s.Begin(ctx, "t", "k", fp, ttls); got.Kind != idempotency.InProgress || got.RetryAfter != time.Second {
		t.Fatalf("at +49s: %v retry %s, want in progress, 1s", got.Kind, got.RetryAfter)
	}
	if err := s.Complete(ctx, o.Lease, idempotency.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour - time.Nanosecond)
	if got, _ := s.Begin(ctx, "t", "k", fp, ttls); got.Kind != idempotency.Replay {
		t.Fatalf("just before the record TTL: %v, want replay", got.Kind)
	}
	c.Advance(time.Nanosecond)
	if got, _ := s.Begin(ctx, "t", "k", fp, ttls); got.Kind != idempotency.Acquired {
		t.Fatalf("at the record TTL: %v, want acquired", got.Kind)
	}
}
