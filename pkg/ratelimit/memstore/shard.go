package memstore

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// sampleSize is how many entries a new state's insertion examines for
// reclaiming. Each insertion deletes sampleSize*f expired entries on average
// (f the expired fraction), so the map settles at no more than
// sampleSize/(sampleSize-1) times the live states even when every request
// brings a new key and the janitor never runs.
const sampleSize = 8

// shrinkMin is the peak size from which a swept shard whose map shrank to a
// quarter of its peak is rebuilt: Go maps never give memory back by
// themselves, and a burst of keys would otherwise stay paid for.
const shrinkMin = 1024

// stateKey identifies one state: a limit's algorithm and period on a key.
// A struct key avoids building a string per call.
type stateKey struct {
	key    string
	period time.Duration
	alg    uint8
}

func keyOf(key string, l ratelimit.Limit) stateKey {
	return stateKey{key: key, period: l.Period, alg: algCode(l.Algorithm)}
}

func algCode(a ratelimit.Algorithm) uint8 {
	switch a {
	case ratelimit.SlidingLog:
		return 1
	case ratelimit.SlidingWindow:
		return 2
	case ratelimit.FixedWindow:
		return 3
	}
	return 0 // GCRA, and invalid names that Decide rejects
}

// shard is one independently locked part of the store.
type shard struct {
	mu        sync.Mutex
	m         map[stateKey]*ratelimit.State // pointers: one map operation per decision
	max       int                           // states this shard may hold; 0 = unlimited
	peak      int                           // largest len(m) since the last rebuild
	evictions uint64
	last      int64    // latest instant decided at, µs
	_         [64]byte // keeps neighbouring shards' hot fields off this cache line
}

// monotonic returns now, or the latest instant already used in this shard
// if that is later. Goroutines read the clock before taking the lock, so
// the order they get it in may invert their readings by a little; decisions
// on one key must never see time step back (a sliding log would then insert
// mid-log, and a window could be revisited).
func (sh *shard) monotonic(now int64) int64 {
	if now < sh.last {
		return sh.last
	}
	sh.last = now
	return now
}

func (sh *shard) init(max int) {
	sh.m = make(map[stateKey]*ratelimit.State)
	sh.max = max
}

// insert stores a new state, first reclaiming room. The key is cloned so the
// map never pins a larger buffer the caller's string may point into.
func (sh *shard) insert(k stateKey, st ratelimit.State, now int64) {
	sh.reclaim(k.key, now)
	k.key = strings.Clone(k.key)
	p := new(ratelimit.State)
	*p = st
	sh.m[k] = p
	sh.peak = max(sh.peak, len(sh.m))
}

// reclaim examines up to sampleSize entries in the map's randomised
// iteration order and deletes the expired ones. If the shard is still full,
// it evicts the sampled state that expires soonest, the least useful one
// (it would be forgotten soonest anyway), preferring states of other keys
// than own, whose request is being charged.
func (sh *shard) reclaim(own string, now int64) {
	var victim stateKey
	found, victimOwn, victimExp := false, false, int64(math.MaxInt64)
	seen := 0
	for k, e := range sh.m {
		if e.Expires <= now {
			delete(sh.m, k)
		} else if sh.max > 0 {
			isOwn := k.key == own
			if !found || (victimOwn && !isOwn) || (victimOwn == isOwn && e.Expires < victimExp) {
				victim, victimOwn, victimExp, found = k, isOwn, e.Expires, true
			}
		}
		if seen++; seen == sampleSize {
			break
		}
	}
	if sh.max > 0 && len(sh.m) >= sh.max && found {
		delete(sh.m, victim)
		sh.evictions++
	}
}

// sweep deletes every expired state, and rebuilds a map that has shrunk
// far below its peak.
func (sh *shard) sweep(now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, e := range sh.m {
		if e.Expires <= now {
			delete(sh.m, k)
		}
	}
	if sh.peak >= shrinkMin && len(sh.m) < sh.peak/4 {
		m := make(map[stateKey]*ratelimit.State, len(sh.m))
		for k, e := range sh.m {
			m[k] = e
		}
		sh.m = m
		sh.peak = len(m)
	}
}

// decide evaluates every limit of r against the current states, writing
// one Result per limit into res, and charges them all only if all admit.
func (s *Store) decide(now int64, r ratelimit.Request, res []ratelimit.Result) (bool, error) {
	sh := s.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return false, ratelimit.ErrClosed
	}
	now = sh.monotonic(now)
	var entBuf [4]*ratelimit.State
	var nextBuf [4]ratelimit.State
	ents, nexts := entBuf[:0], nextBuf[:0]
	allowed := true
	for i, l := range r.Limits {
		e := sh.m[keyOf(r.Key, l)]
		var cur ratelimit.State
		if e != nil {
			cur = *e
		}
		rr, next, err := ratelimit.Decide(l, now, cur, r.Hits)
		if err != nil {
			return false, err
		}
		res[i], allowed = rr, allowed && rr.Allowed
		ents, nexts = append(ents, e), append(nexts, next)
	}
	if !allowed || r.Hits == 0 {
		return allowed, nil
	}
	// Existing states first: an insertion may reclaim or evict entries, and
	// every write through a pointer must land before that. Charged states
	// expire after now, so reclaiming never takes them; only an eviction of
	// last resort can (see reclaim).
	for i, e := range ents {
		if e != nil {
			*e = nexts[i]
		}
	}
	for i, e := range ents {
		if e == nil {
			sh.insert(keyOf(r.Key, r.Limits[i]), nexts[i], now)
		}
	}
	return true, nil
}

// validateRequest checks what Decide cannot see: the request as a whole.
func validateRequest(r ratelimit.Request) error {
	if len(r.Limits) == 0 {
		return fmt.Errorf("%w: a request needs at least one limit", ratelimit.ErrInvalidLimit)
	}
	if r.Hits < 0 {
		return fmt.Errorf("%w: %d is negative", ratelimit.ErrInvalidHits, r.Hits)
	}
	for i, l := range r.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %d: %w", i, err)
		}
		for _, o := range r.Limits[:i] {
			if o.Algorithm.OrDefault() == l.Algorithm.OrDefault() && o.Period == l.Period {
				return fmt.Errorf("%w: limits %q and %q share algorithm %s and period %s",
					ratelimit.ErrInvalidLimit, o.Name, l.Name, l.Algorithm.OrDefault(), l.Period)
			}
		}
	}
	return nil
}
