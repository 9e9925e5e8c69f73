// Package inflighttest is the behaviour every inflight.Store must show,
// written once and run against each implementation (memory, Redis
// standalone, Redis Cluster) from that store's tests.
package inflighttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// Harness adapts one Store implementation to the suite.
type Harness struct {
	// New returns an empty store for one test.
	New func(t *testing.T) inflight.Store
	// Advance lets d pass on s's clock: advance an injected clock, or wait
	// for Redis's own.
	Advance func(t *testing.T, s inflight.Store, d time.Duration)
	// TTL is the slot ttl of the tests that let slots expire: short for
	// stores on a real clock, so Advance waits little.
	TTL time.Duration
}

// long is the ttl of slots that must not expire during a test.
const long = time.Hour

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"LimitRespected", testLimit},
		{"ReleaseFreesExactlyOnce", testReleaseOnce},
		{"StaleTokenFreesNothing", testStaleToken},
		{"ExpiryFrees", testExpiry},
		{"RenewExtends", testRenew},
		{"HeldCountsWithoutTaking", testHeld},
		{"KeysIndependent", testKeysIndependent},
		{"HostileKeys", testHostileKeys},
		{"InvalidArguments", testInvalid},
		{"ConcurrentAcquireNeverExceedsLimit", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, h)
		})
	}
}

// Key returns a key unique to the test, so tests share no state.
func Key(t *testing.T) string { return fmt.Sprintf("tenant-%s-%d", t.Name(), time.Now().UnixNano()) }

func acquire(t *testing.T, s inflight.Store, key string, limit int, ttl time.Duration, want bool) (inflight.Slot, inflight.Result) {
	t.Helper()
	slot, r, err := s.Acquire(context.Background(), key, limit, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %d): %v", key, limit, err)
	}
	if r.Acquired != want {
		t.Fatalf("Acquire(%q, %d) = %+v, want Acquired %v", key, limit, r, want)
	}
	if r.Limit != limit {
		t.Fatalf("Result.Limit = %d, want %d", r.Limit, limit)
	}
	if want == (slot == "") {
		t.Fatalf("Acquire(%q) slot %q with Acquired %v", key, slot, want)
	}
	return slot, r
}

func release(t *testing.T, s inflight.Store, key string, slot inflight.Slot, want bool) {
	t.Helper()
	ok, err := s.Release(context.Background(), key, slot)
	if err != nil || ok != want {
		t.Fatalf("Release(%q, %q) = %v, %v; want %v", key, slot, ok, err, want)
	}
}

func renew(t *testing.T, s inflight.Store, key string, slot inflight.Slot, ttl time.Duration, want bool) {
	t.Helper()
	ok, err := s.Renew(context.Background(), key, slot, ttl)
	if err != nil || ok != want {
		t.Fatalf("Renew(%q, %q) = %v, %v; want %v", key, slot, ok, err, want)
	}
}

func testLimit(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	seen := map[inflight.Slot]bool{}
	for i := 1; i <= 3; i++ {
		slot, r := acquire(t, s, key, 3, long, true)
		if r.InFlight != i || seen[slot] {
			t.Fatalf("acquire %d: %+v slot %q (seen %v)", i, r, slot, seen[slot])
		}
		seen[slot] = true
	}
	_, r := acquire(t, s, key, 3, long, false)
	if r.InFlight != 3 || r.RetryAfter <= 0 || r.RetryAfter > long {
		t.Fatalf("over the limit: %+v, want InFlight 3 and RetryAfter in (0, %v]", r, long)
	}
	// A higher limit for the same key admits more; a lower one admits none.
	acquire(t, s, key, 4, long, true)
	acquire(t, s, key, 2, long, false)
}

func testReleaseOnce(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	a, _ := acquire(t, s, key, 2, long, true)
	acquire(t, s, key, 2, long, true)
	release(t, s, key, a, true)
	release(t, s, key, a, false) // the second release must not free b
	acquire(t, s, key, 2, long, true)
	_, r := acquire(t, s, key, 2, long, false)
	if r.InFlight != 2 {
		t.Fatalf("InFlight = %d, want 2", r.InFlight)
	}
	release(t, s, key, "", false)
	release(t, s, key, inflight.NewSlot(), false)
	renew(t, s, key, a, long, false)
}

// testStaleToken: a token whose slot expired cannot free or renew the slot
// that took its place.
func testStaleToken(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	old, _ := acquire(t, s, key, 1, h.TTL, true)
	h.Advance(t, s, h.TTL+h.TTL/5)
	acquire(t, s, key, 1, long, true)
	release(t, s, key, old, false)
	renew(t, s, key, old, long, false)
	acquire(t, s, key, 1, long, false)
}

// testExpiry: slots expire after their ttl for each operation on its own
// (three keys, so no operation's pruning hides another's).
func testExpiry(t *testing.T, h Harness) {
	s, base := h.New(t), Key(t)
	keys := [3]string{base + "-acquire", base + "-release", base + "-renew"}
	var short [3][2]inflight.Slot
	for i, key := range keys {
		// The long slot outlives the short ones, so the key (and in Redis
		// its expired members) stays while they expire.
		acquire(t, s, key, 3, long, true)
		short[i][0], _ = acquire(t, s, key, 3, h.TTL, true)
		short[i][1], _ = acquire(t, s, key, 3, h.TTL, true)
		_, r := acquire(t, s, key, 3, h.TTL, false)
		if r.RetryAfter <= 0 || r.RetryAfter > h.TTL {
			t.Fatalf("RetryAfter = %v, want in (0, %v]", r.RetryAfter, h.TTL)
		}
	}
	h.Advance(t, s, h.TTL+h.TTL/5)
	if _, r := acquire(t, s, keys[0], 3, long, true); r.InFlight != 2 {
		t.Fatalf("after expiry InFlight = %d, want 2", r.InFlight)
	}
	release(t, s, keys[1], short[1][0], false)
	renew(t, s, keys[2], short[2][1], long, false)
	for _, key := range keys[1:] {
		acquire(t, s, key, 3, long, true)
		acquire(t, s, key, 3, long, true)
		acquire(t, s, key, 3, long, false)
	}
}

func testRenew(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	slot, _ := acquire(t, s, key, 1, h.TTL, true)
	h.Advance(t, s, h.TTL/2)
	renew(t, s, key, slot, 2*h.TTL, true)
	h.Advance(t, s, h.TTL) // past the first expiry, well before the renewed one
	acquire(t, s, key, 1, long, false)
	release(t, s, key, slot, true)
	acquire(t, s, key, 1, long, true)
}

// testHeld: Held counts the live slots and the soonest expiry, and takes,
// renews or releases none; released and expired slots are not counted.
func testHeld(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	in, ok := s.(inflight.Inspector)
	if !ok {
		t.Fatalf("%T is not an inflight.Inspector", s)
	}
	held := func(want int) inflight.Held {
		t.Helper()
		got, err := in.Held(context.Background(), key)
		if err != nil || got.Slots != want || (want == 0) != (got.NextExpiry == 0) {
			t.Fatalf("Held = %+v, %v; want %d slots (and a next expiry with any)", got, err, want)
		}
		return got
	}
	held(0)
	short, _ := acquire(t, s, key, 3, h.TTL, true)
	acquire(t, s, key, 3, long, true)
	if got := held(2); got.NextExpiry > h.TTL {
		t.Fatalf("NextExpiry = %v, want at most the short slot's %v", got.NextExpiry, h.TTL)
	}
	held(2)
	third, _ := acquire(t, s, key, 3, long, true) // Held took none
	acquire(t, s, key, 3, long, false)
	release(t, s, key, short, true)
	if got := held(2); got.NextExpiry <= h.TTL {
		t.Fatalf("NextExpiry = %v after the short slot's release, want the long ones'", got.NextExpiry)
	}
	release(t, s, key, third, true)
	acquire(t, s, key, 3, h.TTL, true)
	held(2)
	h.Advance(t, s, h.TTL+h.TTL/5)
	held(1)
}

func testKeysIndependent(t *testing.T, h Harness) {
	s, a := h.New(t), Key(t)
	b := a + "-other"
	sa, _ := acquire(t, s, a, 1, long, true)
	acquire(t, s, a, 1, long, false)
	sb, r := acquire(t, s, b, 1, long, true)
	if r.InFlight != 1 {
		t.Fatalf("key b InFlight = %d, want 1", r.InFlight)
	}
	release(t, s, b, sa, false) // a's slot under b's key frees nothing
	release(t, s, a, sb, false)
	acquire(t, s, b, 1, long, false)
}

// testHostileKeys: keys that differ only in bytes a naive key builder would
// mangle (braces, separators, length beyond the hashing threshold) stay
// distinct.
func testHostileKeys(t *testing.T, h Harness) {
	s, base := h.New(t), Key(t)
	long := base + string(make([]byte, 300))
	keys := []string{base, base + "}", base + "{x}", base + ":if", base + "%7D", "", long, long + "x", "\xff\x00"}
	for _, k := range keys {
		acquire(t, s, k, 1, time.Hour, true)
	}
	for _, k := range keys {
		acquire(t, s, k, 1, time.Hour, false)
	}
}

func testInvalid(t *testing.T, h Harness) {
	s, key, ctx := h.New(t), Key(t), context.Background()
	for _, c := range []struct {
		limit int
		ttl   time.Duration
	}{{0, long}, {-1, long}, {1, 0}, {1, time.Microsecond}} {
		if _, _, err := s.Acquire(ctx, key, c.limit, c.ttl); !errors.Is(err, inflight.ErrInvalid) {
			t.Errorf("Acquire(limit %d, ttl %v) = %v, want ErrInvalid", c.limit, c.ttl, err)
		}
	}
	if _, err := s.Renew(ctx, key, inflight.NewSlot(), 0); !errors.Is(err, inflight.ErrInvalid) {
		t.Errorf("Renew(ttl 0) = %v, want ErrInvalid", err)
	}
}
