// Package memstore is an in-process inflight.Store: one replica's map with
// the same semantics as the Redis store. It suits a single replica, the
// embedded mode and tests (time is injected).
//
// Memory stays bounded: a key holds at most limit slots, expired slots of a
// key are pruned whenever the key is touched, and every SweepEvery a call
// also purges expired slots and empty keys everywhere. MaxKeys, when set,
// caps the keys with live slots.
package memstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/extauthz/extauthz/internal/expiry"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// Config configures a Store. The zero value is usable.
type Config struct {
	// Now returns the current time; default time.Now. Tests inject a clock.
	Now func() time.Time
	// SweepEvery is how often expired slots of all keys are purged;
	// default 1 minute.
	SweepEvery time.Duration
	// MaxKeys bounds the keys with live slots; 0 is unbounded. An Acquire
	// for a new key on a full store (after a sweep) answers ErrFull: live
	// slots are never evicted, as that would let more than limit run.
	MaxKeys int
}

// ErrFull means the store holds MaxKeys keys with live slots.
var ErrFull = errors.New("inflight memstore: too many keys")

// Store is an in-memory inflight.Store, safe for concurrent use.
type Store struct {
	now     func() time.Time
	maxKeys int

	mu     sync.Mutex
	keys   map[string]map[inflight.Slot]time.Time // slot -> expiry
	sweeps expiry.Schedule
}

var (
	_ inflight.Store     = (*Store)(nil)
	_ inflight.Inspector = (*Store)(nil)
)

// New returns an empty Store.
func New(cfg Config) *Store {
	s := &Store{now: cfg.Now, maxKeys: cfg.MaxKeys, keys: map[string]map[inflight.Slot]time.Time{}}
	if s.now == nil {
		s.now = time.Now
	}
	s.sweeps.Every = cfg.SweepEvery
	if s.sweeps.Every <= 0 {
		s.sweeps.Every = time.Minute
	}
	s.sweeps.Due(s.now()) // the empty map needs no sweep: count one now
	return s
}

// Acquire implements inflight.Store.
func (s *Store) Acquire(_ context.Context, key string, limit int, ttl time.Duration) (inflight.Slot, inflight.Result, error) {
	if err := inflight.CheckAcquire(limit, ttl); err != nil {
		return "", inflight.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.maybeSweep(now)
	slots := s.live(key, now)
	if len(slots) >= limit {
		return "", inflight.Result{InFlight: len(slots), Limit: limit, RetryAfter: soonest(slots, now)}, nil
	}
	if slots == nil {
		if s.maxKeys > 0 && len(s.keys) >= s.maxKeys {
			s.sweep(now)
			if len(s.keys) >= s.maxKeys {
				return "", inflight.Result{}, ErrFull
			}
		}
		slots = map[inflight.Slot]time.Time{}
		s.keys[key] = slots
	}
	slot := inflight.NewSlot()
	slots[slot] = now.Add(ttl)
	return slot, inflight.Result{Acquired: true, InFlight: len(slots), Limit: limit}, nil
}

// Renew implements inflight.Store.
func (s *Store) Renew(_ context.Context, key string, slot inflight.Slot, ttl time.Duration) (bool, error) {
	if err := inflight.CheckTTL(ttl); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	slots := s.live(key, now)
	if _, ok := slots[slot]; !ok {
		return false, nil
	}
	slots[slot] = now.Add(ttl)
	return true, nil
}

// Release implements inflight.Store.
func (s *Store) Release(_ context.Context, key string, slot inflight.Slot) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slots := s.live(key, s.now())
	if _, ok := slots[slot]; !ok {
		return false, nil
	}
	delete(slots, slot)
	if len(slots) == 0 {
		delete(s.keys, key)
	}
	return true, nil
}

// Held implements inflight.Inspector.
func (s *Store) Held(_ context.Context, key string) (inflight.Held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	slots := s.live(key, now)
	if len(slots) == 0 {
		return inflight.Held{}, nil
	}
	return inflight.Held{Slots: len(slots), NextExpiry: soonest(slots, now)}, nil
}

// live prunes the expired slots of key and returns the rest, nil when none
// (the key is then dropped). A slot expires at its expiry instant, as in
// Redis, where a score equal to the time is pruned.
func (s *Store) live(key string, now time.Time) map[inflight.Slot]time.Time {
	slots := s.keys[key]
	if expiry.Prune(slots, alive(now)) == 0 {
		delete(s.keys, key)
		return nil
	}
	return slots
}

func (s *Store) maybeSweep(now time.Time) {
	if s.sweeps.Due(now) {
		s.sweep(now)
	}
}

func (s *Store) sweep(now time.Time) { expiry.PruneGroups(s.keys, alive(now)) }

// alive reports a slot expiring after now live.
func alive(now time.Time) func(time.Time) bool {
	return now.Before
}

// Keys returns how many keys hold live or unswept slots, for tests and
// metrics.
func (s *Store) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// soonest returns the time until the first of slots expires.
func soonest(slots map[inflight.Slot]time.Time, now time.Time) time.Duration {
	var first time.Time
	for _, exp := range slots {
		if first.IsZero() || exp.Before(first) {
			first = exp
		}
	}
	return first.Sub(now)
}
