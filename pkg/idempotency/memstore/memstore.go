// Package memstore is an in-process idempotency.Store: one replica's map
// with the same semantics as the Redis store. It suits a single replica, the
// embedded mode and tests (time is injected).
package memstore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// Config configures a Store. The zero value is usable.
type Config struct {
	// Now returns the current time; default time.Now. Tests inject a clock.
	Now func() time.Time
	// MaxBodyBytes caps a stored body (Complete answers ErrTooLarge
	// above it): a backstop, the routes' max_body_bytes is the operative
	// cap. Default 16 MiB; negative means no cap.
	MaxBodyBytes int64
	// SweepEvery is how often expired records are purged; default 1 minute.
	SweepEvery time.Duration
	// MaxKeys bounds the records kept; 0 is unbounded. A Begin of a new
	// key on a full store purges expired records, then evicts completed
	// records (soonest-expiring first) before live leases, in batches of
	// MaxKeys/16. Evicting a completed record lets a retry run again, so
	// size it for the traffic of a record TTL.
	MaxKeys int
}

// DefaultMaxBodyBytes is the body cap when Config.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 16 << 20

type state int

const (
	inProgress state = iota + 1
	completed
)

type record struct {
	state   state
	token   string
	fp      idempotency.Fingerprint
	resp    idempotency.Response
	expires time.Time
}

type id struct{ scope, key string }

// Store is an in-memory idempotency.Store, safe for concurrent use.
type Store struct {
	now     func() time.Time
	maxBody int64
	every   time.Duration
	maxKeys int

	mu        sync.Mutex
	records   map[id]*record
	lastSweep time.Time
	closed    bool
}

var _ idempotency.Store = (*Store)(nil)

// New returns an empty Store.
func New(cfg Config) *Store {
	s := &Store{now: cfg.Now, maxBody: cfg.MaxBodyBytes, every: cfg.SweepEvery, maxKeys: cfg.MaxKeys, records: map[id]*record{}}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.every <= 0 {
		s.every = time.Minute
	}
	s.lastSweep = s.now()
	return s
}

// Begin implements idempotency.Store.
func (s *Store) Begin(_ context.Context, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs) (idempotency.Outcome, error) {
	if err := idempotency.CheckBegin(key, ttls); err != nil {
		return idempotency.Outcome{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return idempotency.Outcome{}, idempotency.ErrClosed
	}
	now := s.now()
	s.sweep(now)
	r := s.live(id{scope, key}, now)
	switch {
	case r == nil:
		s.makeRoom(now)
		lease := idempotency.Lease{Scope: scope, Key: key, Token: idempotency.NewToken(), TTLs: ttls}
		s.records[id{scope, key}] = &record{state: inProgress, token: lease.Token, fp: fp, expires: now.Add(ttls.Lease)}
		return idempotency.Outcome{Kind: idempotency.Acquired, Lease: lease}, nil
	case r.fp != fp:
		return idempotency.Outcome{Kind: idempotency.Mismatch}, nil
	case r.state == inProgress:
		return idempotency.Outcome{Kind: idempotency.InProgress, RetryAfter: max(r.expires.Sub(now), time.Millisecond)}, nil
	case r.resp.NotReplayable:
		return idempotency.Outcome{Kind: idempotency.Unreplayable, Response: r.resp.Clone()}, nil
	default:
		return idempotency.Outcome{Kind: idempotency.Replay, Response: r.resp.Clone()}, nil
	}
}

// Complete implements idempotency.Store.
func (s *Store) Complete(_ context.Context, l idempotency.Lease, resp idempotency.Response) error {
	if err := idempotency.CheckLease(l); err != nil {
		return err
	}
	if err := idempotency.CheckResponse(resp, s.maxBody); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return idempotency.ErrClosed
	}
	now := s.now()
	r := s.live(id{l.Scope, l.Key}, now)
	switch {
	case r != nil && r.state == completed && r.token == l.Token && r.resp.Equal(resp):
		return nil // a repeated Complete: already done
	case r == nil || r.state != inProgress || r.token != l.Token:
		return idempotency.ErrLeaseLost
	}
	r.state, r.resp, r.expires = completed, resp.Clone(), now.Add(l.TTLs.Record)
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(_ context.Context, l idempotency.Lease) error {
	if err := idempotency.CheckLease(l); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return idempotency.ErrClosed
	}
	r := s.live(id{l.Scope, l.Key}, s.now())
	switch {
	case r == nil:
		return nil // free already: a repeated Release
	case r.state != inProgress || r.token != l.Token:
		return idempotency.ErrLeaseLost
	}
	delete(s.records, id{l.Scope, l.Key})
	return nil
}

// Renew implements idempotency.Store.
func (s *Store) Renew(_ context.Context, l idempotency.Lease) error {
	if err := idempotency.CheckLease(l); err != nil {
		return err
	}
	return s.withLease(l, func(r *record, now time.Time) { r.expires = now.Add(l.TTLs.Lease) })
}

// Close implements idempotency.Store; it drops every record.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.records = true, nil
	return nil
}

// Len returns the number of live records (for tests and metrics).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, n := s.now(), 0
	for _, r := range s.records {
		if now.Before(r.expires) {
			n++
		}
	}
	return n
}

// withLease runs f on the lease's record if it is live, IN_PROGRESS and
// owned by l.Token (the fencing check), else reports ErrLeaseLost.
func (s *Store) withLease(l idempotency.Lease, f func(*record, time.Time)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return idempotency.ErrClosed
	}
	now := s.now()
	r := s.live(id{l.Scope, l.Key}, now)
	if r == nil || r.state != inProgress || r.token != l.Token {
		return idempotency.ErrLeaseLost
	}
	f(r, now)
	return nil
}

// live returns the unexpired record of k, deleting an expired one.
func (s *Store) live(k id, now time.Time) *record {
	r := s.records[k]
	if r != nil && !now.Before(r.expires) {
		delete(s.records, k)
		return nil
	}
	return r
}

// sweep purges expired records once per s.every, so that keys never
// retried do not accumulate.
func (s *Store) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < s.every {
		return
	}
	s.purge(now)
}

func (s *Store) purge(now time.Time) {
	s.lastSweep = now
	for k, r := range s.records {
		if !now.Before(r.expires) {
			delete(s.records, k)
		}
	}
}

// makeRoom keeps a new key within MaxKeys: expired records go first, then
// a batch of completed records, soonest-expiring first, then live leases.
func (s *Store) makeRoom(now time.Time) {
	if s.maxKeys <= 0 || len(s.records) < s.maxKeys {
		return
	}
	s.purge(now)
	if len(s.records) < s.maxKeys {
		return
	}
	n := len(s.records) - s.maxKeys + max(1, s.maxKeys/16)
	type entry struct {
		k id
		r *record
	}
	all := make([]entry, 0, len(s.records))
	for k, r := range s.records {
		all = append(all, entry{k, r})
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].r, all[j].r
		if (a.state == completed) != (b.state == completed) {
			return a.state == completed
		}
		return a.expires.Before(b.expires)
	})
	for _, e := range all[:min(n, len(all))] {
		delete(s.records, e.k)
	}
}
