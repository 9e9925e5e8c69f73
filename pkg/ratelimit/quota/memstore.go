package quota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/extauthz/extauthz/internal/expiry"
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

	mu      sync.Mutex
	buckets map[string]map[string]demandEntry
	sweeps  expiry.Schedule
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
	return &MemoryStore{ttl: o.TTL, buckets: make(map[string]map[string]demandEntry), sweeps: expiry.Schedule{Every: o.TTL}}, nil
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
	if s.sweeps.Due(now) {
		expiry.PruneGroups(s.buckets, func(e demandEntry) bool { return now.Before(e.expires) })
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

// entries counts the stored entries, expired or not (tests).
func (s *MemoryStore) entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.buckets {
		n += len(b)
	}
	return n
}
