// Package lockouttest is the behaviour every lockout.Store must show,
// written once and run against each implementation (memory, Redis
// standalone, Redis Cluster) from that store's tests.
package lockouttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// Harness adapts one Store implementation to the suite.
type Harness struct {
	// New returns an empty store for one test.
	New func(t *testing.T) lockout.Store
	// Advance lets d pass on s's clock: advance an injected clock, or wait
	// for Redis's own.
	Advance func(t *testing.T, s lockout.Store, d time.Duration)
	// Unit scales the policies of the tests that let lockouts end: short
	// for stores on a real clock, so Advance waits little; at least 50ms.
	Unit time.Duration
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"FirstTripLocksForInitial", testFirstTrip},
		{"LockoutGrowsToMax", testGrowth},
		{"TripWhileLockedCountsNothing", testTripWhileLocked},
		{"ForgottenAfterQuiet", testForget},
		{"KeysIndependent", testKeysIndependent},
		{"HostileKeys", testHostileKeys},
		{"InvalidPolicy", testInvalid},
		{"ConcurrentTripsCountOnce", testConcurrent},
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

// hour is a policy whose lockouts outlast any test.
var hour = lockout.Policy{Initial: time.Hour, Factor: 2, Max: 8 * time.Hour}

// scaled is a policy of lockouts 1, 2, 4, 4 ... units, forgotten after
// forget units.
func scaled(h Harness, forget int) lockout.Policy {
	return lockout.Policy{Initial: h.Unit, Factor: 2, Max: 4 * h.Unit, Forget: time.Duration(forget) * h.Unit}
}

// trip trips key and checks the lockout and count it reports.
func trip(t *testing.T, s lockout.Store, key string, p lockout.Policy, want time.Duration, trips int64) {
	t.Helper()
	d, n, err := s.Trip(context.Background(), key, p)
	if err != nil || d != want || n != trips {
		t.Fatalf("Trip(%q) = %v, %d, %v; want %v, %d", key, d, n, err, want, trips)
	}
}

// locked checks that key is locked for at most most and more than least.
func locked(t *testing.T, s lockout.Store, key string, least, most time.Duration) {
	t.Helper()
	d, err := s.Locked(context.Background(), key)
	if err != nil || d <= least || d > most {
		t.Fatalf("Locked(%q) = %v, %v; want in (%v, %v]", key, d, err, least, most)
	}
}

// unlocked checks that key is not locked.
func unlocked(t *testing.T, s lockout.Store, key string) {
	t.Helper()
	if d, err := s.Locked(context.Background(), key); err != nil || d != 0 {
		t.Fatalf("Locked(%q) = %v, %v; want 0", key, d, err)
	}
}

// settle is the margin added to a wait for a lockout to end.
func settle(h Harness) time.Duration { return h.Unit / 4 }

func testFirstTrip(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	unlocked(t, s, key)
	trip(t, s, key, hour, time.Hour, 1)
	locked(t, s, key, time.Hour-time.Minute, time.Hour)
	unlocked(t, s, key+"-other")

	short := Key(t) + "-short"
	trip(t, s, short, scaled(h, 10), h.Unit, 1)
	h.Advance(t, s, h.Unit+settle(h))
	unlocked(t, s, short)
}

// testGrowth: each trip after the lockout ended doubles it, up to Max.
func testGrowth(t *testing.T, h Harness) {
	s, key, p := h.New(t), Key(t), scaled(h, 10)
	for i, units := range []time.Duration{1, 2, 4, 4} {
		trip(t, s, key, p, units*h.Unit, int64(i+1))
		h.Advance(t, s, units*h.Unit+settle(h))
		unlocked(t, s, key)
	}
}

// testTripWhileLocked: responses of requests admitted before a lockout
// that trip during it neither count nor extend it.
func testTripWhileLocked(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	trip(t, s, key, hour, time.Hour, 1)
	d, n, err := s.Trip(context.Background(), key, hour)
	if err != nil || n != 1 || d <= time.Hour-time.Minute || d > time.Hour {
		t.Fatalf("Trip while locked = %v, %d, %v; want the time left and 1 trip", d, n, err)
	}
	locked(t, s, key, time.Hour-time.Minute, time.Hour)

	short, p := Key(t)+"-short", scaled(h, 10)
	trip(t, s, short, p, h.Unit, 1)
	if _, n, err := s.Trip(context.Background(), short, p); err != nil || n != 1 {
		t.Fatalf("Trip while locked = %d trips, %v; want 1", n, err)
	}
	h.Advance(t, s, h.Unit+settle(h))
	unlocked(t, s, short) // the second trip did not extend the lockout
	trip(t, s, short, p, 2*h.Unit, 2)
}

// testForget: trips are forgotten Forget after the latest lockout ends,
// and not before.
func testForget(t *testing.T, h Harness) {
	s, key, p := h.New(t), Key(t), scaled(h, 2)
	trip(t, s, key, p, h.Unit, 1)
	// The lockout ends at 1 unit; the trips are kept until 3.
	h.Advance(t, s, 2*h.Unit)
	trip(t, s, key, p, 2*h.Unit, 2)
	// That lockout ends at 2 units; the trips are forgotten at 4.
	h.Advance(t, s, 4*h.Unit+settle(h))
	unlocked(t, s, key)
	trip(t, s, key, p, h.Unit, 1)

	// Forget 0 means 2*Max: a lockout of one unit (the cap) is
	// remembered for two units after it ends.
	def, dp := Key(t)+"-default", lockout.Policy{Initial: h.Unit, Factor: 2, Max: h.Unit}
	trip(t, s, def, dp, h.Unit, 1)
	h.Advance(t, s, h.Unit+settle(h))
	trip(t, s, def, dp, h.Unit, 2)
	h.Advance(t, s, 3*h.Unit+settle(h))
	trip(t, s, def, dp, h.Unit, 1)
}

func testKeysIndependent(t *testing.T, h Harness) {
	s, a := h.New(t), Key(t)
	b := a + "-other"
	trip(t, s, a, hour, time.Hour, 1)
	unlocked(t, s, b)
	trip(t, s, b, lockout.Policy{Initial: 2 * time.Hour, Factor: 1, Max: 2 * time.Hour}, 2*time.Hour, 1)
	locked(t, s, a, time.Hour-time.Minute, time.Hour)
}

// testHostileKeys: keys that differ only in bytes a naive key builder would
// mangle (braces, separators, length beyond the hashing threshold) stay
// distinct.
func testHostileKeys(t *testing.T, h Harness) {
	s, base := h.New(t), Key(t)
	long := base + string(make([]byte, 300))
	keys := []string{base, base + "}", base + "{x}", base + ":lock", base + "%7D", "", long, long + "x", "\xff\x00"}
	for _, k := range keys {
		unlocked(t, s, k)
		trip(t, s, k, hour, time.Hour, 1)
	}
	for _, k := range keys {
		locked(t, s, k, time.Hour-time.Minute, time.Hour)
	}
}

// testInvalid: an invalid policy is an ErrInvalid and trips nothing.
func testInvalid(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t)
	for _, p := range []lockout.Policy{
		{},
		{Initial: time.Minute, Factor: 0.5, Max: time.Hour},
		{Initial: time.Hour, Factor: 2, Max: time.Minute},
		{Initial: time.Minute, Factor: 2, Max: time.Hour, Forget: -1},
	} {
		if _, _, err := s.Trip(context.Background(), key, p); !errors.Is(err, lockout.ErrInvalid) {
			t.Errorf("Trip(%+v) = %v, want ErrInvalid", p, err)
		}
	}
	unlocked(t, s, key)
}
