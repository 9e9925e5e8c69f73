package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/lockouttest"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// clock is an injected clock, safe for the suite's concurrent test.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// storeOn pairs a store with its clock, for Advance.
type storeOn struct {
	*memstore.Store
	clk *clock
}

func TestSuite(t *testing.T) {
	lockouttest.Run(t, lockouttest.Harness{
		New: func(*testing.T) lockout.Store {
			c := newClock()
			return storeOn{memstore.New(memstore.Config{Now: c.now}), c}
		},
		Advance: func(_ *testing.T, s lockout.Store, d time.Duration) { s.(storeOn).clk.advance(d) },
		Unit:    time.Minute,
	})
}

var login = lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}

func mustTrip(t *testing.T, s *memstore.Store, key string, p lockout.Policy) (time.Duration, int64) {
	t.Helper()
	d, n, err := s.Trip(context.Background(), key, p)
	if err != nil {
		t.Fatalf("Trip(%q): %v", key, err)
	}
	return d, n
}

func mustLocked(t *testing.T, s *memstore.Store, key string) time.Duration {
	t.Helper()
	d, err := s.Locked(context.Background(), key)
	if err != nil {
		t.Fatalf("Locked(%q): %v", key, err)
	}
	return d
}

// Each trip right after the lockout ends doubles it: 1m, 2m, 4m ... and
// the cap of 1h holds from the seventh on.
func TestGrowthCapped(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now})
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, m := range want {
		d, n := mustTrip(t, s, "k", login)
		if d != m*time.Minute || n != int64(i+1) {
			t.Fatalf("trip %d = %v, %d; want %v, %d", i+1, d, n, m*time.Minute, i+1)
		}
		c.advance(d - 1)
		if got := mustLocked(t, s, "k"); got != 1 {
			t.Fatalf("1ns before the lockout ends: Locked = %v", got)
		}
		c.advance(1)
		if got := mustLocked(t, s, "k"); got != 0 {
			t.Fatalf("at the lockout's end: Locked = %v", got)
		}
	}
}

// A factor that is not a whole number grows to the millisecond, as the
// Redis script computes it.
func TestGrowthFractionalFactor(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now})
	p := lockout.Policy{Initial: 1001 * time.Millisecond, Factor: 1.5, Max: time.Hour}
	for _, ms := range []time.Duration{1001, 1501, 2251, 3376} {
		d, _ := mustTrip(t, s, "k", p)
		if d != ms*time.Millisecond {
			t.Fatalf("lockout %v, want %vms", d, ms)
		}
		c.advance(d)
	}
}

// Trips are forgotten exactly Forget after the latest lockout ends.
func TestForgetAtInstant(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now})
	p := login
	p.Forget = 10 * time.Minute
	mustTrip(t, s, "k", p)
	c.advance(time.Minute + 10*time.Minute - 1)
	if _, n := mustTrip(t, s, "k", p); n != 2 {
		t.Fatalf("1ns before forgetting: trip %d, want 2", n)
	}
	c.advance(2*time.Minute + 10*time.Minute)
	if d, n := mustTrip(t, s, "k", p); n != 1 || d != time.Minute {
		t.Fatalf("once forgotten: %v, %d; want a first trip", d, n)
	}
}

// A key nobody touches again is swept by a later Trip of another key.
func TestSweepBoundsMemory(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now, SweepEvery: time.Minute})
	for i := range 100 {
		mustTrip(t, s, fmt.Sprint("old", i), login)
	}
	c.advance(time.Minute + 2*time.Hour) // past every forget instant
	mustTrip(t, s, "new", login)
	if n := s.Keys(); n != 1 {
		t.Fatalf("%d keys after the sweep, want 1", n)
	}
}

// A full store evicts to admit a new key: never more than MaxKeys, the
// expired first, else the state forgotten soonest among a sample.
func TestMaxKeys(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now, MaxKeys: 10, SweepEvery: time.Hour * 1000})
	short := lockout.Policy{Initial: time.Minute, Factor: 1, Max: time.Minute, Forget: time.Minute}
	mustTrip(t, s, "short", short) // forgotten at 2m, the soonest
	for i := range 9 {
		mustTrip(t, s, fmt.Sprint("k", i), login)
	}
	mustTrip(t, s, "new", login)
	if n := s.Keys(); n != 10 {
		t.Fatalf("%d keys, want 10", n)
	}
	if d := mustLocked(t, s, "short"); d != 0 {
		t.Fatalf("the state forgotten soonest was kept (Locked %v) and another evicted", d)
	}
	for i := range 9 {
		if d := mustLocked(t, s, fmt.Sprint("k", i)); d != time.Minute {
			t.Fatalf("k%d: Locked %v, want 1m", i, d)
		}
	}
	for i := range 50 {
		mustTrip(t, s, fmt.Sprint("more", i), login)
		if n := s.Keys(); n > 10 {
			t.Fatalf("%d keys, want at most 10", n)
		}
	}
}

// Concurrent trips of many keys are race-free (under -race) and each key
// counts one trip.
func TestConcurrentKeys(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				key := fmt.Sprint("k", i)
				if _, n, err := s.Trip(context.Background(), key, login); err != nil || n != 1 {
					t.Errorf("worker %d: Trip(%s) = %d, %v", w, key, n, err)
				}
				if _, err := s.Locked(context.Background(), key); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := s.Keys(); n != 50 {
		t.Fatalf("%d keys, want 50", n)
	}
}

func TestClose(t *testing.T) {
	s := memstore.New(memstore.Config{})
	mustTrip(t, s, "k", login)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Trip(context.Background(), "k", login); !errors.Is(err, lockout.ErrClosed) {
		t.Fatalf("Trip after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Locked(context.Background(), "k"); !errors.Is(err, lockout.ErrClosed) {
		t.Fatalf("Locked after Close = %v, want ErrClosed", err)
	}
}

// Hold locks a key for the time given unless it is locked longer; a trip
// after the held lockout ends escalates from it while the key is
// remembered, and is a first trip once forgotten.
func TestHold(t *testing.T) {
	c := newClock()
	s := memstore.New(memstore.Config{Now: c.now})
	s.Hold("k", 10*time.Minute, 3, time.Hour)
	if d := mustLocked(t, s, "k"); d != 10*time.Minute {
		t.Fatalf("held: Locked %v, want 10m", d)
	}
	s.Hold("k", 5*time.Minute, 1, time.Hour) // shorter: changes nothing
	if d, n := mustTrip(t, s, "k", login); d != 10*time.Minute || n != 3 {
		t.Fatalf("trip while held = %v, %d; want 10m left, 3 trips", d, n)
	}
	c.advance(10 * time.Minute)
	if d, n := mustTrip(t, s, "k", login); d != 20*time.Minute || n != 4 {
		t.Fatalf("trip after the held lockout = %v, %d; want 20m (twice it), trip 4", d, n)
	}
	s.Hold("gone", 0, 1, time.Hour)
	s.Hold("short", time.Minute, 0, 0) // forgotten as its lockout ends
	if n := s.Keys(); n != 2 {
		t.Fatalf("%d keys, want k and short", n)
	}
	c.advance(time.Minute)
	if d, n := mustTrip(t, s, "short", login); d != time.Minute || n != 1 {
		t.Fatalf("trip once the held state is forgotten = %v, %d; want a first trip", d, n)
	}
}
