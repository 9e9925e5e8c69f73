package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// TestSweep: expired records of keys that are never asked for again are
// purged from the map (Len alone would not show it: it skips expired ones).
func TestSweep(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(Config{Now: func() time.Time { return now }, SweepEvery: time.Minute})
	ctx, fp := context.Background(), idempotency.NewFingerprint("POST", "/", nil, nil)
	ttls := idempotency.TTLs{Lease: time.Second, Record: time.Hour}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Begin(ctx, "t", k, fp, ttls); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(30 * time.Second) // expired, but no sweep is due yet
	if _, err := s.Begin(ctx, "t", "d", fp, ttls); err != nil {
		t.Fatal(err)
	}
	if n := len(s.records); n != 4 {
		t.Fatalf("%d records before the sweep is due, want 4", n)
	}
	now = now.Add(time.Minute)
	if _, err := s.Begin(ctx, "t", "e", fp, ttls); err != nil {
		t.Fatal(err)
	}
	if n := len(s.records); n != 1 {
		t.Fatalf("%d records after the sweep, want 1 (e)", n)
	}
}
