// Package memstore is an in-process ratelimit.Store: the embedded store used
// when no Redis is configured, and the fallback limiter when Redis fails.
//
// State lives in sharded maps, one mutex per shard, keyed by (key,
// algorithm, period). Decisions are those of ratelimit.Decide, the same
// semantics as the Redis store's scripts. Every state carries its own expiry
// and expired states are reclaimed as new keys arrive and by a background
// sweep, so memory follows the number of keys active within their periods;
// Options.MaxKeys adds a hard bound.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

var _ ratelimit.Store = (*Store)(nil)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid memstore options")

// Defaults for zero Options fields.
const (
	DefaultShards        = 64
	DefaultSweepInterval = time.Minute
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// Now returns the current time; tests inject a fake clock. Instants are
	// taken with microsecond precision. nil means the system clock, read as
	// the wall time at New advanced by the monotonic clock: cheaper than
	// time.Now, and it never steps back.
	Now func() time.Time
	// Shards is the number of independently locked maps, a power of two;
	// 0 means DefaultShards (or fewer, to stay at most MaxKeys).
	Shards int
	// MaxKeys bounds the number of stored states (one per key, algorithm
	// and period); 0 means unlimited. A shard holds at most
	// MaxKeys/Shards states; when a new state would exceed that, the state
	// expiring soonest among the few examined for reclaiming is evicted
	// (least useful: it would be forgotten soonest anyway). Eviction
	// forgets a caller's usage, so that caller may be admitted beyond its
	// limit: size MaxKeys above the number of keys active at once.
	MaxKeys int
	// SweepInterval is how often a background goroutine removes expired
	// states; 0 means DefaultSweepInterval, negative disables the goroutine
	// (expired states are still reclaimed as new keys arrive).
	SweepInterval time.Duration
}

// Store is an in-memory ratelimit.Store, safe for concurrent use.
type Store struct {
	now    func() int64 // µs since the epoch
	seed   maphash.Seed
	shift  uint // 64 - log2(len(shards)): a key's shard is hash >> shift
	shards []shard

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{} // closed by Close to stop the janitor
	done      chan struct{} // closed by the janitor when it returns
}

// New returns a Store configured by opts. Construction is cheap (a few
// small allocations and one goroutine unless SweepInterval is negative).
func New(opts Options) (*Store, error) {
	n, err := shardCount(opts.Shards, opts.MaxKeys)
	if err != nil {
		return nil, err
	}
	s := &Store{
		now:    clockMicros(opts.Now),
		seed:   maphash.MakeSeed(),
		shift:  uint(64 - bits.TrailingZeros(uint(n))),
		shards: make([]shard, n),
	}
	for i := range s.shards {
		s.shards[i].init(opts.MaxKeys / n)
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	if interval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.janitor(interval)
	}
	return s, nil
}

// clockMicros returns a reader of now in µs since the epoch.
func clockMicros(now func() time.Time) func() int64 {
	if now != nil {
		return func() int64 { return now().UnixMicro() }
	}
	// time.Since of a Time with a monotonic reading reads one clock;
	// time.Now reads two (wall and monotonic).
	base := time.Now()
	baseMicros := base.UnixMicro()
	return func() int64 { return baseMicros + time.Since(base).Microseconds() }
}

// shardCount validates Shards and MaxKeys and returns the number of shards.
func shardCount(shards, maxKeys int) (int, error) {
	switch {
	case maxKeys < 0:
		return 0, fmt.Errorf("%w: MaxKeys must not be negative, got %d", ErrInvalidOptions, maxKeys)
	case shards < 0 || shards > 1<<16 || bits.OnesCount(uint(shards)) > 1:
		return 0, fmt.Errorf("%w: Shards must be a power of two up to 65536, got %d", ErrInvalidOptions, shards)
	case shards == 0 && maxKeys > 0 && maxKeys < DefaultShards:
		// Fewer shards, so each can hold at least one state.
		return 1 << (bits.Len(uint(maxKeys)) - 1), nil
	case shards == 0:
		return DefaultShards, nil
	case maxKeys > 0 && maxKeys < shards:
		return 0, fmt.Errorf("%w: MaxKeys (%d) must be 0 or at least Shards (%d)", ErrInvalidOptions, maxKeys, shards)
	}
	return shards, nil
}

// Allow decides one limit for one key.
func (s *Store) Allow(ctx context.Context, key string, limit ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	if err := s.usable(ctx); err != nil {
		return ratelimit.Result{}, err
	}
	now := s.now()
	sh, h := s.locate(key)
	id := ident{key: key, period: limit.Period, alg: algCode(limit.Algorithm)}
	var res ratelimit.Result
	// No defer: allowLocked cannot panic, and this path is short enough
	// for defer's cost to show.
	sh.mu.Lock()
	err := s.allowLocked(sh, h^salt(id), id, &limit, now, hits, &res)
	sh.mu.Unlock()
	return res, err
}

// allowLocked is Allow under sh's lock; it writes the Result to *res.
func (s *Store) allowLocked(sh *shard, h uint64, id ident, l *ratelimit.Limit, now, hits int64, res *ratelimit.Result) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	now = sh.monotonic(now)
	if e := sh.find(h, id); e != nil {
		err := e.st.ApplyTo(res, l, now, hits)
		if err == nil && res.Allowed && hits > 0 {
			sh.ring[e.pos].expires = e.st.Expires
		}
		return err
	}
	var st ratelimit.State
	err := st.ApplyTo(res, l, now, hits)
	if err == nil && res.Allowed && hits > 0 {
		sh.insert(h, id, st, now)
	}
	return err
}

// AllowBatch decides each request in order: the limits of one request all
// admit and are all charged, or none is (or as its Charge mode says). An invalid request (no limits, an
// invalid limit, two limits with the same algorithm and period, negative
// hits) fails the whole batch before anything is charged.
func (s *Store) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	total := 0
	for i, r := range reqs {
		if err := validateRequest(r); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		total += len(r.Limits)
	}
	now := s.now()
	out := make([]ratelimit.Decision, len(reqs))
	results := make([]ratelimit.Result, total)
	for i, r := range reqs {
		res := results[:len(r.Limits):len(r.Limits)]
		results = results[len(r.Limits):]
		allowed, err := s.decide(now, r, res)
		if err != nil {
			return nil, err
		}
		out[i] = ratelimit.Decision{Allowed: allowed, Results: res}
	}
	return out, nil
}

// Close stops the background sweep and drops all state. It is safe to call
// twice; the Store answers ErrClosed afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		for i := range s.shards {
			s.shards[i].clear()
		}
	})
	return nil
}

// Stats is a snapshot of a Store's size.
type Stats struct {
	// States is the number of stored states, expired ones not yet
	// reclaimed included.
	States int
	// Evictions counts live states dropped to honour MaxKeys.
	Evictions uint64
}

// Stats returns the current size of the store.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.States += len(sh.ring)
		st.Evictions += sh.evictions
		sh.mu.Unlock()
	}
	return st
}

func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if ctx != nil {
		return ctx.Err()
	}
	return nil
}

func (s *Store) janitor(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep removes every expired state, one shard (one lock) at a time.
func (s *Store) sweep() {
	for i := range s.shards {
		s.shards[i].sweep(s.now())
	}
}
