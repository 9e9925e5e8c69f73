package quotatest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// The grant tests of the suite (quota.GrantStore), run by Run.

func grow(t *testing.T, s quota.DemandStore, key, client string, rate, budget float64, ttl time.Duration, now time.Time) float64 {
	t.Helper()
	got, err := s.GrowGrant(context.Background(), quota.Grant{Bucket: key, Client: client, Rate: rate, TTL: ttl}, budget, now)
	if err != nil {
		t.Fatalf("GrowGrant(%q, %q, %v): %v", key, client, rate, err)
	}
	return got
}

func set(t *testing.T, s quota.DemandStore, key, client string, rate float64, ttl time.Duration, now time.Time) {
	t.Helper()
	if err := s.SetGrant(context.Background(), quota.Grant{Bucket: key, Client: client, Rate: rate, TTL: ttl}, now); err != nil {
		t.Fatalf("SetGrant(%q, %q, %v): %v", key, client, rate, err)
	}
}

func wantRate(t *testing.T, what string, got, want float64) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: granted %v, want %v", what, got, want)
	}
}

// A grant grows only into what the other clients' grants leave; a client's
// own previous grant does not count against it; a grant set lower frees
// room at once.
func testGrantsCapToRoom(t *testing.T, h Harness) {
	s, key, ttl := h.New(t), Key(t, ""), h.TTL
	wantRate(t, "a alone", grow(t, s, key, "a", 6, 10, ttl, t0), 6)
	wantRate(t, "b, 4 left", grow(t, s, key, "b", 6, 10, ttl, t0), 4)
	wantRate(t, "c, nothing left", grow(t, s, key, "c", 1, 10, ttl, t0), 0)
	wantRate(t, "a again, its own 6 not counted", grow(t, s, key, "a", 6, 10, ttl, t0), 6)
	set(t, s, key, "a", 2, ttl, t0)
	wantRate(t, "c after a shrank to 2", grow(t, s, key, "c", 5, 10, ttl, t0), 4)
	// Shares computed to sum to the budget are not cut by float rounding.
	third := 10.0 / 3
	k2 := Key(t, "thirds")
	for _, c := range []string{"x", "y", "z"} {
		wantRate(t, "a third of 10", grow(t, s, k2, c, third, 10, ttl, t0), third)
	}
}

// Grants expire at their own TTL: an expired grant holds no room.
func testGrantsExpire(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	ttl := h.TTL
	grow(t, s, key, "short", 10, 10, ttl, t0)
	grow(t, s, key, "long", 0, 10, 2*ttl, t0)
	wantRate(t, "before short's TTL", grow(t, s, key, "late", 5, 10, ttl, t0.Add(ttl-time.Millisecond)), 0)
	wantRate(t, "at short's TTL", grow(t, s, key, "late", 5, 10, ttl, t0.Add(ttl)), 5)
	set(t, s, key, "late", 5, ttl, t0.Add(ttl)) // a re-send extends it
	wantRate(t, "late holds 5", grow(t, s, key, "other", 10, 10, ttl, t0.Add(2*ttl-time.Millisecond)), 5)
}

// Grants are per bucket, and they are not demands.
func testGrantsIsolated(t *testing.T, h Harness) {
	s := h.New(t)
	a, b := Key(t, "a"), Key(t, "a}")
	grow(t, s, a, "c", 10, 10, h.TTL, t0)
	wantRate(t, "another bucket", grow(t, s, b, "c", 10, 10, h.TTL, t0), 10)
	same(t, "demands of a bucket with grants", demands(t, s, a, t0), map[string]float64{})
}

// Bad rates are recorded as 0; empty keys and a TTL of 0 are errors.
func testGrantsInvalid(t *testing.T, h Harness) {
	s, key, ctx := h.New(t), Key(t, ""), context.Background()
	for _, r := range []float64{math.NaN(), -1, math.Inf(-1)} {
		wantRate(t, fmt.Sprint(r), grow(t, s, key, "bad", r, 10, h.TTL, t0), 0)
	}
	wantRate(t, "the bad client holds nothing", grow(t, s, key, "good", 10, 10, h.TTL, t0), 10)
	for _, g := range []quota.Grant{{Client: "c", TTL: h.TTL}, {Bucket: key, TTL: h.TTL}} {
		if _, err := s.GrowGrant(ctx, g, 10, t0); !errors.Is(err, quota.ErrInvalid) {
			t.Errorf("GrowGrant(%+v): %v, want ErrInvalid", g, err)
		}
		if err := s.SetGrant(ctx, g, t0); !errors.Is(err, quota.ErrInvalid) {
			t.Errorf("SetGrant(%+v): %v, want ErrInvalid", g, err)
		}
	}
	if _, err := s.GrowGrant(ctx, quota.Grant{Bucket: key, Client: "c"}, 10, t0); !errors.Is(err, quota.ErrInvalidOptions) {
		t.Errorf("GrowGrant without a TTL: %v, want ErrInvalidOptions", err)
	}
}

// Clients growing their grants at once (replicas on one store) never take
// the same room twice.
func testGrantsConcurrent(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	const clients = 32
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total float64
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := quota.Grant{Bucket: key, Client: fmt.Sprintf("c%d", i), Rate: 1, TTL: h.TTL}
			r, err := s.GrowGrant(context.Background(), g, 10, t0)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += r
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 10 {
		t.Fatalf("32 clients asking 1 of a budget of 10 were granted %v in all, want 10", total)
	}
}

func orphan(t *testing.T, s quota.DemandStore, key, client, peer string, now time.Time) {
	t.Helper()
	if err := s.OrphanGrant(context.Background(), quota.Grant{Bucket: key, Client: client, Peer: peer}, now); err != nil {
		t.Fatalf("OrphanGrant(%q, %q): %v", key, client, err)
	}
}

func growFrom(t *testing.T, s quota.DemandStore, key, client, peer string, rate, budget float64, ttl time.Duration, now time.Time) float64 {
	t.Helper()
	g := quota.Grant{Bucket: key, Client: client, Rate: rate, TTL: ttl, Peer: peer}
	got, err := s.GrowGrant(context.Background(), g, budget, now)
	if err != nil {
		t.Fatalf("GrowGrant(%q, %q, %v, peer %q): %v", key, client, rate, peer, err)
	}
	return got
}

// A grant that does not fit takes over the smallest orphan of its peer, and
// only then; orphans of other peers, and orphans not needed, still count.
func testGrantsTakeOverOrphans(t *testing.T, h Harness) {
	s, key, ttl := h.New(t), Key(t, ""), h.TTL
	grow(t, s, key, "live", 2, 10, ttl, t0)
	grow(t, s, key, "big", 5, 10, ttl, t0)
	grow(t, s, key, "small", 3, 10, ttl, t0)
	orphan(t, s, key, "big", "p", t0)
	orphan(t, s, key, "small", "p", t0)
	orphan(t, s, key, "never-granted", "p", t0) // no grant: nothing to mark
	wantRate(t, "another peer takes nothing", growFrom(t, s, key, "q1", "q", 4, 10, ttl, t0), 0)
	wantRate(t, "p takes the smallest orphan (3)", growFrom(t, s, key, "p1", "p", 4, 10, ttl, t0), 3)
	wantRate(t, "p again takes the other (5)", growFrom(t, s, key, "p2", "p", 9, 10, ttl, t0), 5)
	wantRate(t, "no orphan left", growFrom(t, s, key, "p3", "p", 1, 10, ttl, t0), 0)

	k2 := Key(t, "fits")
	grow(t, s, k2, "old", 2, 10, ttl, t0)
	orphan(t, s, k2, "old", "p", t0)
	wantRate(t, "fits without the orphan", growFrom(t, s, k2, "new", "p", 5, 10, ttl, t0), 5)
	wantRate(t, "the orphan still counts", grow(t, s, k2, "other", 10, 10, ttl, t0), 3)

	k3 := Key(t, "expired")
	grow(t, s, k3, "old", 10, 10, ttl, t0)
	orphan(t, s, k3, "old", "p", t0.Add(ttl)) // expired: not marked, not revived
	wantRate(t, "after the orphan's TTL", grow(t, s, k3, "new", 10, 10, ttl, t0.Add(ttl)), 10)
}
