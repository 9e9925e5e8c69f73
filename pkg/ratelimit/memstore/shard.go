package memstore

import (
	"strings"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// sampleSize is how many states a new state's insertion examines for
// reclaiming, moving a clock hand around the shard's ring. Every state is
// examined once per len(ring)/sampleSize insertions, so expired states wait
// at most that long: a shard settles at no more than
// sampleSize/(sampleSize-1) times its live states even when every request
// brings a new key and the janitor never runs.
const sampleSize = 8

// shrinkMin is the peak size from which a swept shard that shrank to a
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
	h    uint64 // map key
	pos  int    // index in shard.ring
	next *entry // another state with the same hash; almost always nil
	st   ratelimit.State
}

// slot is an entry's place in the ring, with a copy of its expiry so that
// reclaiming scans contiguous memory instead of chasing pointers.
type slot struct {
	e       *entry
	expires int64
}

// shard is one independently locked part of the store.
type shard struct {
	mu        sync.Mutex
	m         map[uint64]*entry
	ring      []slot // every entry once, in no particular order
	hand      int    // next ring index reclaim examines
	max       int    // states this shard may hold; 0 = unlimited
	peak      int    // largest len(ring) since the last rebuild
	evictions uint64
	last      int64    // latest instant decided at, µs
	_         [64]byte // keeps neighbouring shards' hot fields off this cache line
}

func (sh *shard) init(maxKeys int) {
	sh.m = make(map[uint64]*entry)
	sh.max = maxKeys
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

// set replaces e's state.
func (sh *shard) set(e *entry, st ratelimit.State) {
	e.st = st
	sh.ring[e.pos].expires = st.Expires
}

// insert stores a new state, first reclaiming room. The key is cloned so the
// map never pins a larger buffer the caller's string may point into.
func (sh *shard) insert(h uint64, id ident, st ratelimit.State, now int64) {
	sh.reclaim(id.key, now)
	id.key = strings.Clone(id.key)
	e := &entry{ident: id, h: h, pos: len(sh.ring), next: sh.m[h], st: st}
	sh.m[h] = e
	sh.ring = append(sh.ring, slot{e: e, expires: st.Expires})
	sh.peak = max(sh.peak, len(sh.ring))
}

// reclaim examines the next sampleSize states under the clock hand and
// removes the expired ones. If the shard is still full, it evicts the
// examined state that expires soonest, the least useful one (it would be
// forgotten soonest anyway), preferring states of other keys than own,
// whose request is being charged.
func (sh *shard) reclaim(own string, now int64) {
	var victim *entry
	for range sampleSize {
		if len(sh.ring) == 0 {
			return
		}
		if sh.hand >= len(sh.ring) {
			sh.hand = 0
		}
		sl := sh.ring[sh.hand]
		if sl.expires <= now {
			sh.remove(sl.e) // the last slot moves here: examined next
			continue
		}
		if sh.max > 0 && (victim == nil || betterVictim(sl.e, victim, own)) {
			victim = sl.e
		}
		sh.hand++
	}
	if sh.max > 0 && len(sh.ring) >= sh.max && victim != nil {
		sh.remove(victim)
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

// remove deletes e from the map (its hash chain) and the ring.
func (sh *shard) remove(e *entry) {
	if head := sh.m[e.h]; head == e {
		if e.next == nil {
			delete(sh.m, e.h)
		} else {
			sh.m[e.h] = e.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	last := len(sh.ring) - 1
	moved := sh.ring[last]
	sh.ring[e.pos] = moved
	moved.e.pos = e.pos
	sh.ring[last] = slot{} // drop the pointer for the collector
	sh.ring = sh.ring[:last]
}

// sweep removes every expired state, and rebuilds a shard that has shrunk
// far below its peak.
func (sh *shard) sweep(now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := 0; i < len(sh.ring); {
		if sh.ring[i].expires <= now {
			sh.remove(sh.ring[i].e)
			continue
		}
		i++
	}
	if sh.peak >= shrinkMin && len(sh.ring) < sh.peak/4 {
		m := make(map[uint64]*entry, len(sh.m))
		for h, e := range sh.m {
			m[h] = e
		}
		sh.m = m
		sh.ring = append(make([]slot, 0, len(sh.ring)), sh.ring...)
		sh.peak = len(sh.ring)
	}
}

// clear drops every state.
func (sh *shard) clear() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	clear(sh.m)
	sh.ring, sh.hand = nil, 0
}
