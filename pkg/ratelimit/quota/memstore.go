package quota

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryOptions configure a MemoryStore. The zero value is the defaults.
type MemoryOptions struct {
	// TTL is how long a report counts; default DefaultTTL.
	TTL time.Duration
}

// MemoryStore is a DemandStore in process memory, for a single replica (and
// tests). Time is the now its callers pass. It is safe for concurrent use.
type MemoryStore struct {
	ttl time.Duration

	mu        sync.Mutex
	buckets   map[string]map[string]demandEntry // demands
	grants    map[string]map[string]demandEntry // grants: demand is the granted rate
	lastSweep time.Time
}

type demandEntry struct {
	demand  float64
	expires time.Time
}

var _ DemandStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore(o MemoryOptions) (*MemoryStore, error) {
	if o.TTL < 0 {
		return nil, fmt.Errorf("%w: TTL must not be negative, got %s", ErrInvalidOptions, o.TTL)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	return &MemoryStore{ttl: o.TTL, buckets: make(map[string]map[string]demandEntry),
		grants: make(map[string]map[string]demandEntry)}, nil
}

// Report records the demand until now + TTL. Once per TTL it also drops every
// expired entry of every bucket, so buckets nobody reads any more do not
// accumulate.
func (s *MemoryStore) Report(_ context.Context, bucketKey, clientID string, demand float64, now time.Time) error {
	demand, err := CheckReport(bucketKey, clientID, demand)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[bucketKey]
	if b == nil {
		b = make(map[string]demandEntry)
		s.buckets[bucketKey] = b
	}
	if old, ok := b[clientID]; ok && demand == Unknown && old.demand != Unknown && now.Before(old.expires) {
		demand = old.demand // a moved stream's first report keeps the measured demand
	}
	b[clientID] = demandEntry{demand: demand, expires: now.Add(s.ttl)}
	if now.Sub(s.lastSweep) >= s.ttl || now.Before(s.lastSweep) {
		s.sweep(now)
	}
	return nil
}

// Demands returns the live demands of bucketKey and drops its expired ones.
func (s *MemoryStore) Demands(_ context.Context, bucketKey string, now time.Time) (map[string]float64, error) {
	if bucketKey == "" {
		return nil, ErrInvalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[bucketKey]
	out := make(map[string]float64, len(b))
	for id, e := range b {
		if !now.Before(e.expires) {
			delete(b, id)
			continue
		}
		out[id] = e.demand
	}
	if b != nil && len(b) == 0 {
		delete(s.buckets, bucketKey)
	}
	return out, nil
}

// GrowGrant records g, capped to what the budget leaves after the other
// clients' live grants.
func (s *MemoryStore) GrowGrant(_ context.Context, g Grant, budget float64, now time.Time) (float64, error) {
	rate, err := CheckGrant(g)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	others := 0.0
	for id, e := range s.grants[g.Bucket] {
		if id != g.Client && now.Before(e.expires) {
			others += e.demand
		}
	}
	rate = GrowRate(rate, budget, others)
	s.setGrant(g, rate, now)
	return rate, nil
}

// SetGrant records g as it is.
func (s *MemoryStore) SetGrant(_ context.Context, g Grant, now time.Time) error {
	rate, err := CheckGrant(g)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setGrant(g, rate, now)
	return nil
}

// setGrant stores a grant; s.mu is held.
func (s *MemoryStore) setGrant(g Grant, rate float64, now time.Time) {
	b := s.grants[g.Bucket]
	if b == nil {
		b = make(map[string]demandEntry)
		s.grants[g.Bucket] = b
	}
	b[g.Client] = demandEntry{demand: rate, expires: now.Add(g.TTL)}
	if now.Sub(s.lastSweep) >= s.ttl || now.Before(s.lastSweep) {
		s.sweep(now)
	}
}

// sweep drops expired entries and empty buckets of both maps; s.mu is held.
func (s *MemoryStore) sweep(now time.Time) {
	s.lastSweep = now
	for _, m := range []map[string]map[string]demandEntry{s.buckets, s.grants} {
		for key, b := range m {
			for id, e := range b {
				if !now.Before(e.expires) {
					delete(b, id)
				}
			}
			if len(b) == 0 {
				delete(m, key)
			}
		}
	}
}

// entries counts the stored entries, expired or not (tests).
func (s *MemoryStore) entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range []map[string]map[string]demandEntry{s.buckets, s.grants} {
		for _, b := range m {
			n += len(b)
		}
	}
	return n
}
