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
	buckets map[string]map[string]demandEntry // demands
	grants  map[string]map[string]grantEntry
	sweeps  expiry.Schedule
}

type demandEntry struct {
	demand  float64
	expires time.Time
}

type grantEntry struct {
	rate     float64
	expires  time.Time
	orphanOf string // the peer an orphan is left to; "" for a live client's grant
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
		grants: make(map[string]map[string]grantEntry), sweeps: expiry.Schedule{Every: o.TTL}}, nil
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
	s.maybeSweep(now)
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
// clients' live grants; when it does not fit, it first takes over the
// smallest orphan of g.Peer.
func (s *MemoryStore) GrowGrant(_ context.Context, g Grant, budget float64, now time.Time) (float64, error) {
	rate, err := CheckGrant(g)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.grants[g.Bucket]
	others := 0.0
	for id, e := range b {
		if id != g.Client && now.Before(e.expires) {
			others += e.rate
		}
	}
	if GrowRate(rate, budget, others) < rate {
		if id, ok := smallestOrphan(b, g.Peer, now); ok {
			others -= b[id].rate
			delete(b, id)
		}
	}
	rate = GrowRate(rate, budget, others)
	s.setGrant(g, grantEntry{rate: rate, expires: now.Add(g.TTL)}, now)
	return rate, nil
}

// smallestOrphan is the live orphan of peer with the smallest rate (then the
// smallest client ID); none for an empty peer.
func smallestOrphan(b map[string]grantEntry, peer string, now time.Time) (string, bool) {
	best, found := "", false
	for id, e := range b {
		if peer == "" || e.orphanOf != peer || !now.Before(e.expires) {
			continue
		}
		if !found || e.rate < b[best].rate || (e.rate == b[best].rate && id < best) {
			best, found = id, true
		}
	}
	return best, found
}

// SetGrant records g as it is.
func (s *MemoryStore) SetGrant(_ context.Context, g Grant, now time.Time) error {
	rate, err := CheckGrant(g)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setGrant(g, grantEntry{rate: rate, expires: now.Add(g.TTL)}, now)
	return nil
}

// OrphanGrant leaves g.Client's live grant to g.Peer.
func (s *MemoryStore) OrphanGrant(_ context.Context, g Grant, now time.Time) error {
	if g.Bucket == "" || g.Client == "" {
		return ErrInvalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.grants[g.Bucket][g.Client]; ok && now.Before(e.expires) {
		e.orphanOf = g.Peer
		s.grants[g.Bucket][g.Client] = e
	}
	return nil
}

// setGrant stores a grant; s.mu is held.
func (s *MemoryStore) setGrant(g Grant, e grantEntry, now time.Time) {
	b := s.grants[g.Bucket]
	if b == nil {
		b = make(map[string]grantEntry)
		s.grants[g.Bucket] = b
	}
	b[g.Client] = e
	s.maybeSweep(now)
}

// maybeSweep drops, once per TTL, the expired entries and empty buckets of
// both maps, so buckets nobody reads any more do not accumulate; s.mu is
// held.
func (s *MemoryStore) maybeSweep(now time.Time) {
	if !s.sweeps.Due(now) {
		return
	}
	expiry.PruneGroups(s.buckets, func(e demandEntry) bool { return now.Before(e.expires) })
	expiry.PruneGroups(s.grants, func(e grantEntry) bool { return now.Before(e.expires) })
}

// entries counts the stored entries, expired or not (tests).
func (s *MemoryStore) entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.buckets {
		n += len(b)
	}
	for _, b := range s.grants {
		n += len(b)
	}
	return n
}
