// Package memstore is an in-process lockout.Store: one replica's map with
// the same semantics as the Redis store. It suits a single replica, the
// embedded mode and tests (time is injected).
//
// Memory stays bounded: each key's state expires when its trips are
// forgotten (Policy.Forget after its latest lockout ends); every
// SweepEvery a Trip also purges the expired states of all keys, and
// MaxKeys, when set, caps the keys held.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/extauthz/extauthz/internal/expiry"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// Config configures a Store. The zero value is usable.
type Config struct {
	// Now returns the current time; default time.Now. Tests inject a clock.
	Now func() time.Time
	// SweepEvery is how often a Trip also purges the expired states of
	// all keys; default 1 minute.
	SweepEvery time.Duration
	// MaxKeys bounds the keys held; 0 is unbounded. A Trip of a new key on
	// a full store first drops the expired states it samples, else evicts
	// the sampled state forgotten soonest (least useful: it would vanish
	// soonest anyway). Eviction forgets a key's lockout, so size MaxKeys
	// above the keys locked or remembered at once.
	MaxKeys int
}

// sample is how many states a full store examines to pick one to evict:
// enough to find an expired or soon-forgotten one, few enough that a Trip
// stays O(1) however many keys are held.
const sample = 16

// state is one key's lockout.
type state struct {
	trips  int64
	last   time.Duration // the latest lockout
	until  time.Time     // when the latest lockout ends
	forget time.Time     // when the trips are forgotten (the state expires)
}

// Store is an in-memory lockout.Store, safe for concurrent use.
type Store struct {
	now     func() time.Time
	maxKeys int

	mu     sync.Mutex
	keys   map[string]state // nil once closed
	sweeps expiry.Schedule
}

var _ lockout.Store = (*Store)(nil)

// New returns an empty Store.
func New(cfg Config) *Store {
	s := &Store{now: cfg.Now, maxKeys: max(cfg.MaxKeys, 0), keys: map[string]state{}}
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

// Locked implements lockout.Store.
func (s *Store) Locked(_ context.Context, key string) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		return 0, lockout.ErrClosed
	}
	now := s.now()
	st, ok := s.live(key, now)
	if !ok || !now.Before(st.until) {
		return 0, nil
	}
	return st.until.Sub(now), nil
}

// Trip implements lockout.Store.
func (s *Store) Trip(_ context.Context, key string, p lockout.Policy) (time.Duration, int64, error) {
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		return 0, 0, lockout.ErrClosed
	}
	now := s.now()
	if s.sweeps.Due(now) {
		expiry.Prune(s.keys, alive(now))
	}
	st, ok := s.live(key, now)
	if ok && now.Before(st.until) {
		return st.until.Sub(now), st.trips, nil
	}
	if !ok {
		s.makeRoom(now)
	}
	st.trips++
	st.last = p.Next(st.last)
	st.until = now.Add(st.last)
	st.forget = st.until.Add(p.ForgetAfter())
	s.keys[key] = st
	return st.last, st.trips, nil
}

// Hold locks key for left from now, a lockout some other store decided
// (package lockout/failover keeps in its fallback the lockouts it saw in
// Redis, so that they still hold while Redis is down), unless key is
// locked longer already. trips is the count to keep (at least the one
// already held, at least 1); the state is forgotten forget after the
// lockout ends. Nothing happens when left is not positive or the store is
// closed.
func (s *Store) Hold(key string, left time.Duration, trips int64, forget time.Duration) {
	if left <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		return
	}
	now := s.now()
	st, ok := s.live(key, now)
	if ok && !now.Add(left).After(st.until) {
		return
	}
	if !ok {
		s.makeRoom(now)
	}
	st.trips = max(st.trips, trips, 1)
	st.last = left
	st.until = now.Add(left)
	st.forget = st.until.Add(max(forget, 0))
	s.keys[key] = st
}

// Close implements lockout.Store: it drops every state; later calls answer
// lockout.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = nil
	return nil
}

// Keys returns how many keys hold a state (expired ones not yet swept
// included), for tests and metrics.
func (s *Store) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// live returns key's state unless it has expired (then it is dropped).
func (s *Store) live(key string, now time.Time) (state, bool) {
	st, ok := s.keys[key]
	if ok && !alive(now)(st) {
		delete(s.keys, key)
		return state{}, false
	}
	return st, ok
}

// makeRoom frees one place for a new key on a full store: it drops the
// expired states among a sample, or else the sampled one forgotten
// soonest. Map iteration starts at a random place, so samples vary.
func (s *Store) makeRoom(now time.Time) {
	if s.maxKeys == 0 || len(s.keys) < s.maxKeys {
		return
	}
	var victim string
	var soonest time.Time
	n := 0
	for k, st := range s.keys {
		if !alive(now)(st) {
			delete(s.keys, k)
		} else if soonest.IsZero() || st.forget.Before(soonest) {
			victim, soonest = k, st.forget
		}
		if n++; n == sample {
			break
		}
	}
	if len(s.keys) >= s.maxKeys {
		delete(s.keys, victim)
	}
}

// alive reports a state whose trips are not yet forgotten at now.
func alive(now time.Time) func(state) bool {
	return func(st state) bool { return now.Before(st.forget) }
}
