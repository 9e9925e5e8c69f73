package memstore

import (
	"strings"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// sampleSize is how many hash slots a new state's insertion examines for
// reclaiming. Each insertion deletes sampleSize*f expired states on average
// (f the expired fraction), so a shard settles at no more than
// sampleSize/(sampleSize-1) times its live states even when every request
// brings a new key and the janitor never runs.
const sampleSize = 8

// shrinkMin is the peak size from which a swept shard whose map shrank to a
// quarter of its peak is rebuilt: Go maps never give memory back by
// themselves, and a burst of keys would otherwise stay paid for.
const shrinkMin = 1024

// ident identifies one state: a limit's algorithm and period on a key.
type ident struct {
	key    string
	period time.Duration
	alg    uint8
}

func identOf(key string, l ratelimit.Limit) ident {
	return ident{key: key, period: l.Period, alg: algCode(l.Algorithm)}
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

// salt distinguishes the states of one key: the state's hash is the key's
// hash XOR salt. Multiplying by an odd constant is a bijection, so distinct
// (period, algorithm) pairs give distinct salts (for periods below 146
// years); collisions between keys are left to the 64-bit seeded hash and,
// should one ever happen, to the chain in entry.next.
func salt(id ident) uint64 {
	return (uint64(id.period)<<2 | uint64(id.alg)) * 0x9E3779B97F4A7C15
}

// entry is one stored state. The map is keyed by a uint64 hash rather than
// by ident: a struct key holding a string makes every lookup hash and
// compare through the generic path, several times slower than the uint64
// fast path, which matters on a path that takes about 100ns in all.
type entry struct {
	ident
	st   ratelimit.State
	next *entry // another state with the same hash; almost always nil
}

// shard is one independently locked part of the store.
type shard struct {
	mu        sync.Mutex
	m         map[uint64]*entry
	n         int // states held (chains included)
	max       int // states this shard may hold; 0 = unlimited
	peak      int // largest len(m) since the last rebuild
	evictions uint64
	last      int64    // latest instant decided at, µs
	_         [64]byte // keeps neighbouring shards' hot fields off this cache line
}

func (sh *shard) init(max int) {
	sh.m = make(map[uint64]*entry)
	sh.max = max
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

// find returns the entry of id stored under hash h, or nil.
func (sh *shard) find(h uint64, id ident) *entry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.ident == id {
			return e
		}
	}
	return nil
}

// insert stores a new state, first reclaiming room. The key is cloned so the
// map never pins a larger buffer the caller's string may point into.
func (sh *shard) insert(h uint64, id ident, st ratelimit.State, now int64) {
	sh.reclaim(id.key, now)
	id.key = strings.Clone(id.key)
	sh.m[h] = &entry{ident: id, st: st, next: sh.m[h]}
	sh.n++
	sh.peak = max(sh.peak, len(sh.m))
}

// reclaim examines up to sampleSize slots in the map's randomised iteration
// order and deletes the expired states. If the shard is still full, it
// evicts the sampled state that expires soonest, the least useful one (it
// would be forgotten soonest anyway), preferring states of other keys than
// own, whose request is being charged.
func (sh *shard) reclaim(own string, now int64) {
	var victim *entry
	var victimHash uint64
	seen := 0
	for h, head := range sh.m {
		for e := sh.prune(h, head, now); e != nil && sh.max > 0; e = e.next {
			if victim == nil || betterVictim(e, victim, own) {
				victim, victimHash = e, h
			}
		}
		if seen++; seen == sampleSize {
			break
		}
	}
	if sh.max > 0 && sh.n >= sh.max && victim != nil {
		sh.unlink(victimHash, victim)
		sh.evictions++
	}
}

// betterVictim reports whether e should be evicted rather than v.
func betterVictim(e, v *entry, own string) bool {
	eOwn, vOwn := e.key == own, v.key == own
	if eOwn != vOwn {
		return vOwn
	}
	return e.st.Expires < v.st.Expires
}

// prune removes the expired states from the chain at h and returns what
// is left of it.
func (sh *shard) prune(h uint64, head *entry, now int64) *entry {
	if head.next == nil { // the usual chain of one
		if head.st.Expires > now {
			return head
		}
		delete(sh.m, h)
		sh.n--
		return nil
	}
	var first *entry
	link := &first
	for e := head; e != nil; e = e.next {
		if e.st.Expires <= now {
			sh.n--
			continue
		}
		*link, link = e, &e.next
	}
	*link = nil
	switch {
	case first == nil:
		delete(sh.m, h)
	case first != head:
		sh.m[h] = first
	}
	return first
}

// unlink removes e from the chain at h.
func (sh *shard) unlink(h uint64, e *entry) {
	sh.n--
	head := sh.m[h]
	if head == e {
		if e.next == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = e.next
		}
		return
	}
	for p := head; p != nil; p = p.next {
		if p.next == e {
			p.next = e.next
			return
		}
	}
}

// sweep deletes every expired state, and rebuilds a map that has shrunk
// far below its peak.
func (sh *shard) sweep(now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for h, head := range sh.m {
		sh.prune(h, head, now)
	}
	if sh.peak >= shrinkMin && len(sh.m) < sh.peak/4 {
		m := make(map[uint64]*entry, len(sh.m))
		for h, e := range sh.m {
			m[h] = e
		}
		sh.m = m
		sh.peak = len(m)
	}
}

// clear drops every state.
func (sh *shard) clear() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	clear(sh.m)
	sh.n = 0
}
