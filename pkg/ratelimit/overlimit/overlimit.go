// Package overlimit answers requests already known to be over their limit
// without asking the backing store. A denied request is remembered until the
// earliest instant any of its denying limits could admit it again; until
// then the same request (same key, same limits, at least as many hits) is
// denied locally. Abusive callers, who make most of the traffic to a full
// key, then cost no Redis round trip.
//
// The cache entry is keyed by the key and every limit's full identity
// (algorithm, requests, period, burst), so a request whose limit changed, as
// with Envoy's per-descriptor limit override, is a different entry and is
// decided by the store (envoyproxy/ratelimit keys its cache by the Redis key
// alone and keeps denying a raised override: its issue #1077).
//
// Remembered denials stay correct because gcra, fixed_window and sliding_log
// never admit sooner than their RetryAfter while other traffic can only push
// that instant later (sliding_window's RetryAfter is no such bound, so its
// denials alone are not remembered); the clock
// is read before the store is asked, so the entry never outlives the store's
// own answer. Denials an inner store made without its backend (package
// failover's fallback while Redis is down) are not remembered. Charges
// (ratelimit.ChargeAlways) always reach the store; a refund, the one thing
// that makes a key admit sooner, forgets the same request's remembered
// denial (see remember). A reservation (ratelimit.ChargeReserve) is
// admitted on one hit: its refusal is remembered, and answered, as a
// denial of one hit.
package overlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// DefaultMaxEntries bounds the cache when Options.MaxEntries is zero.
const DefaultMaxEntries = 100_000

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid overlimit options")

// Options configures a Store.
type Options struct {
	// MaxEntries bounds the remembered denials; default 100,000. When full,
	// expired entries are dropped first, then arbitrary ones (forgetting a
	// denial only costs a store round trip).
	MaxEntries int
	// Registerer receives the metrics; required.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Store is a ratelimit.Store that remembers denials of an inner store. It
// owns the inner store: Close closes it.
type Store struct {
	inner ratelimit.Store
	now   func() time.Time
	cache *cache
	hits  prometheus.Counter
}

var _ ratelimit.Store = (*Store)(nil)

// New wraps inner.
func New(inner ratelimit.Store, opts Options) (*Store, error) {
	switch {
	case inner == nil:
		return nil, fmt.Errorf("%w: nil inner store", ErrInvalidOptions)
	case opts.Registerer == nil:
		return nil, fmt.Errorf("%w: nil Registerer", ErrInvalidOptions)
	case opts.MaxEntries < 0:
		return nil, fmt.Errorf("%w: negative MaxEntries", ErrInvalidOptions)
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{inner: inner, now: opts.Now, cache: newCache(opts.MaxEntries)}
	s.hits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "extauthz_ratelimit_local_cache_hits_total",
		Help: "Rate-limit requests denied from the local over-limit cache without asking the store.",
	})
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "extauthz_ratelimit_local_cache_entries",
		Help: "Denials remembered by the local over-limit cache, expired ones included until swept.",
	}, func() float64 { return float64(s.cache.len()) })
	for _, c := range []prometheus.Collector{s.hits, size} {
		if err := opts.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("overlimit metrics: %w", err)
		}
	}
	return s, nil
}

// Allow decides one limit for one key.
func (s *Store) Allow(ctx context.Context, key string, limit ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, s, key, limit, hits)
}

// AllowBatch answers remembered denials locally and sends the rest to the
// inner store in one batch.
func (s *Store) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if len(reqs) == 0 {
		return []ratelimit.Decision{}, nil
	}
	now := s.now()
	var out []ratelimit.Decision // made at the first remembered denial
	var missBuf [4]int           // the usual batch: no allocation
	miss := missBuf[:0]
	for i, r := range reqs {
		d, ok := s.remembered(r, now)
		if !ok {
			miss = append(miss, i)
			continue
		}
		if out == nil {
			out = make([]ratelimit.Decision, len(reqs))
		}
		out[i] = d
		s.hits.Inc()
	}
	if len(miss) == 0 { // every request remembered
		return out, nil
	}
	sub := reqs
	if len(miss) < len(reqs) {
		sub = make([]ratelimit.Request, len(miss))
		for j, i := range miss {
			sub[j] = reqs[i]
		}
	}
	got, authoritative, err := s.askInner(ctx, sub)
	if err != nil {
		return nil, err
	}
	for j, i := range miss {
		s.remember(reqs[i], got[j], authoritative, now)
	}
	if out == nil { // nothing remembered: the inner store's answer is the whole answer
		return got, nil
	}
	for j, i := range miss {
		out[i] = got[j]
	}
	return out, nil
}

// remembered is r's remembered denial, if any. A charge (ChargeAlways)
// must land, denied or not: it is never answered here.
func (s *Store) remembered(r ratelimit.Request, now time.Time) (ratelimit.Decision, bool) {
	if r.Charge == ratelimit.ChargeAlways {
		return ratelimit.Decision{}, false
	}
	return s.cache.get(entryIDOf(r), admissionHits(r), now)
}

// admissionHits is the hits r's admission is decided on: one for a
// reservation (ChargeReserve, whose refusal is a one-hit denial), else
// its hits.
func admissionHits(r ratelimit.Request) int64 {
	if r.Charge == ratelimit.ChargeReserve {
		return 1
	}
	return r.Hits
}

// remember records what r's decision d teaches the cache. A denial is
// remembered when the store made it (authoritative), except a forced
// charge's: ChargeAlways reports the state after its charge, not a denial
// of its hits. A refund forgets the remembered denial of the same request,
// which it may have made wrong; one made through another replica is seen
// here when the remembered denial ends, at most its RetryAfter later.
func (s *Store) remember(r ratelimit.Request, d ratelimit.Decision, authoritative bool, now time.Time) {
	switch {
	case r.Charge == ratelimit.ChargeAlways && r.Hits < 0:
		s.cache.forget(entryIDOf(r))
	case r.Charge == ratelimit.ChargeAlways, !authoritative, d.Allowed:
	default:
		s.cache.put(entryIDOf(r), admissionHits(r), d, r.Limits, now)
	}
}

// sourced is implemented by an inner store that may answer without its
// backend (package failover's fallback or Closed-mode denials): fromPrimary
// is false then, and such denials are not remembered.
type sourced interface {
	AllowBatchSource(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error)
}

// askInner asks the inner store and reports whether its answer may be
// remembered.
func (s *Store) askInner(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error) {
	if src, ok := s.inner.(sourced); ok {
		return src.AllowBatchSource(ctx, reqs)
	}
	d, err := s.inner.AllowBatch(ctx, reqs)
	return d, true, err
}

// Ready reports the inner store's readiness when it has one.
func (s *Store) Ready(ctx context.Context) error {
	if r, ok := s.inner.(interface{ Ready(context.Context) error }); ok {
		return r.Ready(ctx)
	}
	return nil
}

// Close closes the inner store.
func (s *Store) Close() error { return s.inner.Close() }
