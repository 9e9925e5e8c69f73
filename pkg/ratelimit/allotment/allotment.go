// Package allotment decides rate limits with `consistency: allotment` from
// slices of their budget leased by this replica, so that a hot key costs a
// store round trip per slice instead of per request.
//
// A Store wraps another ratelimit.Store (in production the Redis stack:
// failover over redisstore). For a limit whose Consistency is Allotment it
// leases n tokens in one atomic step, by asking the inner store for n hits;
// the inner store charges them all or none, and when it refuses, its
// Result.Remaining says how many it would give, which are then leased
// instead. Leased tokens are charged to the shared state when leased, so the
// replicas together never admit more than the limit; tokens a replica does
// not use in time lapse (they are not given back), which is the price:
// transient under-admission, bounded by the slices outstanding.
//
// Lapse rules (lot.go), computed from the lease's Result and the local
// instant read before the lease was sent, so latency and clock offset only
// make them earlier:
//   - fixed_window and sliding_window: a token lapses at the end of the
//     window it was charged in.
//   - gcra: token k of a lease of n has the slot newTAT - (n-k)*T and may be
//     used at or before it; every use then lies within the tolerance before
//     its own cell, so all replicas' uses together conform to the GCRA.
//
// sliding_log cannot be leased (ratelimit.Limit.Validate rejects it).
//
// A key gets a slice only once it shows a second request within
// Options.Horizon (door.go): a cold key, seen once, is decided like exact,
// its request passed to the inner store, which charges its hits to the
// same shared count leases take from; so is a key whose slice is found
// empty after more than the horizon of silence (the slice is dropped). A
// cold key then costs what an exact decision costs, without the slice's
// bookkeeping, and the under-admission bound does not grow (fewer slices
// are outstanding).
//
// Slices are sized from this replica's own recent demand for the key,
// measured by quota.Meter (the RLQS allocator's meter of a client's demand,
// sampled at each lease): demand x Options.Horizon tokens, at least 1 (the
// first lease of a new slice leases one token in the request's path), at
// most Options.MaxFraction of the limit (of the burst for gcra). When a slice
// falls below half its last lease, one lease for the next one starts in the
// background; requests that find the slice empty wait for the lease in
// flight. A refused lease is remembered until its RetryAfter, so a key over
// its limit costs one round trip per retry period.
//
// Requests whose limits are all Exact, checks (Hits 0), and requests
// charged in another mode than ratelimit.ChargeIfAdmitted (checks of a
// budget charged later, reservations taken with their check, and those
// charges), go to the inner store unchanged. A request mixing both reserves its allotment tokens
// first, then asks the inner store for the exact limits (with those of
// cold keys, in the same call), and gives the reserved tokens back to its
// slices when anything denies.
package allotment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/randtoken"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Defaults for Options.
const (
	DefaultHorizon     = 50 * time.Millisecond
	DefaultMaxFraction = 1.0 / 16
	DefaultMaxSlices   = 100_000
)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid allotment options")

// Options configures a Store.
type Options struct {
	// Registerer receives the metrics; required.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Horizon is how long a slice should last at the key's recent demand;
	// default DefaultHorizon (50ms).
	Horizon time.Duration
	// MaxFraction bounds a slice to this fraction of the limit's Requests
	// (of its burst for gcra), at least one token; default
	// DefaultMaxFraction (1/16). The under-admission bound grows with it.
	MaxFraction float64
	// MaxSlices bounds the slices held (one per key and limit); default
	// DefaultMaxSlices. When full, idle ones are dropped first.
	MaxSlices int
}

// Store is a ratelimit.Store that decides allotment limits from leased
// slices. It owns the inner store: Close closes it.
type Store struct {
	inner    ratelimit.Store
	now      func() time.Time
	horizon  time.Duration
	fraction float64
	table    *table
	m        metrics
	// id names this Store in the shared store's lease ledgers; holders
	// counts the slices that leased, each a holder of its own (newHolder).
	id      string
	holders atomic.Uint64

	// ctx is the background leases' context, cancelled by Close; closeMu
	// orders their start against Close's wait (closed is read on every
	// call, without the lock).
	ctx     context.Context
	cancel  context.CancelFunc
	closeMu sync.RWMutex
	closed  atomic.Bool
	wg      sync.WaitGroup
}

var (
	_ ratelimit.Store    = (*Store)(nil)
	_ ratelimit.Resetter = (*Store)(nil)
)

// New wraps inner.
func New(inner ratelimit.Store, opts Options) (*Store, error) {
	switch {
	case inner == nil:
		return nil, fmt.Errorf("%w: nil inner store", ErrInvalidOptions)
	case opts.Registerer == nil:
		return nil, fmt.Errorf("%w: nil Registerer", ErrInvalidOptions)
	case opts.Horizon < 0 || opts.MaxFraction < 0 || opts.MaxFraction > 1 || opts.MaxSlices < 0:
		return nil, fmt.Errorf("%w: negative Horizon or MaxSlices, or MaxFraction outside [0, 1]", ErrInvalidOptions)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Horizon == 0 {
		opts.Horizon = DefaultHorizon
	}
	if opts.MaxFraction == 0 {
		opts.MaxFraction = DefaultMaxFraction
	}
	if opts.MaxSlices == 0 {
		opts.MaxSlices = DefaultMaxSlices
	}
	s := &Store{inner: inner, now: opts.Now, horizon: opts.Horizon, fraction: opts.MaxFraction,
		table: newTable(opts.MaxSlices, opts.Horizon), id: randtoken.Hex(16)}
	var err error
	if s.m, err = newMetrics(opts.Registerer, s.table); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// maxSlice is the largest lease for l: MaxFraction of its Requests (its
// burst for gcra), at least 1.
func (s *Store) maxSlice(l ratelimit.Limit) int64 {
	of := l.Requests
	if l.Algorithm.OrDefault() == ratelimit.GCRA && l.Burst > 0 {
		of = l.Burst
	}
	return max(int64(float64(of)*s.fraction), 1)
}

// Allow decides one limit for one key.
func (s *Store) Allow(ctx context.Context, key string, limit ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, s, key, limit, hits)
}

// AllowBatch decides reqs: allotment limits from slices, the rest on the
// inner store.
func (s *Store) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	d, _, err := s.AllowBatchSource(ctx, reqs)
	return d, err
}

// Ready reports the inner store's readiness when it has one.
func (s *Store) Ready(ctx context.Context) error {
	if r, ok := s.inner.(interface{ Ready(context.Context) error }); ok {
		return r.Ready(ctx)
	}
	return nil
}

// Close stops the background leases and closes the inner store. Tokens
// held are lost (under-admission until they would have lapsed). Safe to
// call twice.
func (s *Store) Close() error {
	s.closeMu.Lock()
	already := s.closed.Swap(true)
	s.closeMu.Unlock()
	if already {
		return nil
	}
	s.cancel()
	s.wg.Wait()
	return s.inner.Close()
}

// goBackground runs f on a goroutine unless the store is closed.
func (s *Store) goBackground(f func()) bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *Store) isClosed() bool { return s.closed.Load() }

// newHolder names a slice in the lease ledgers: this Store and a number no
// other slice of it has, so that a slice dropped with a lease in flight
// (reset, evicted) and the one that replaces it never overwrite each
// other's record: the tokens of both stay counted.
func (s *Store) newHolder() string {
	return s.id + ":" + strconv.FormatUint(s.holders.Add(1), 10)
}
