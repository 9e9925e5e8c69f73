package allotment

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

const shardCount = 32

// entry holds one slice under its own lock, so that requests for different
// keys never wait for each other.
type entry struct {
	mu sync.Mutex
	s  slice
}

type shard struct {
	mu sync.Mutex
	m  map[sliceKey]*entry
}

// table is a sharded map of slices by sliceKey, bounded in total, behind a
// doorkeeper that keeps cold keys out.
type table struct {
	seed     maphash.Seed
	perShard int
	shards   [shardCount]shard
	door     doorkeeper
}

func newTable(maxSlices int, horizon time.Duration) *table {
	t := &table{seed: maphash.MakeSeed(), perShard: max((maxSlices+shardCount-1)/shardCount, 1),
		door: newDoorkeeper(horizon)}
	for i := range t.shards {
		t.shards[i].m = make(map[sliceKey]*entry)
	}
	return t
}

// sliceKey identifies a slice by the key and the limit's full identity
// (algorithm, requests, period, burst): a limit whose terms changed leases
// afresh, since its tokens' lapse rules depend on them. The consistency is
// no part of it, nor of the store's state key. A struct, not a string
// built per call: a map hashes it without allocating.
type sliceKey struct {
	key string
	ratelimit.Terms
}

func sliceID(key string, l ratelimit.Limit) sliceKey {
	return sliceKey{key: key, Terms: l.Terms()}
}

func (t *table) shard(id sliceKey) *shard { return t.shardOf(t.keyHash(id), id) }

func (t *table) keyHash(id sliceKey) uint64 { return maphash.String(t.seed, id.key) }

// shardOf is the shard of id, whose key hashes to hk.
func (t *table) shardOf(hk uint64, id sliceKey) *shard {
	return &t.shards[(hk^uint64(id.Period))%shardCount]
}

// lookup returns the entry of id, or nil.
func (t *table) lookup(id sliceKey) *entry {
	sh := t.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[id]
}

// admit returns the entry of id, creating one for l when the doorkeeper saw
// the key within the horizon before now; nil for a cold key without one,
// which is then decided on the store as exact mode would decide it. The
// clock is read only then: a key with a slice reads it once, in take.
func (t *table) admit(id sliceKey, l ratelimit.Limit, clock func() time.Time) *entry {
	hk := t.keyHash(id)
	sh := t.shardOf(hk, id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[id]; e != nil {
		return e
	}
	now := clock()
	prev, warm := t.door.seen(doorHash(hk, id), now)
	if !warm {
		return nil
	}
	if len(sh.m) >= t.perShard {
		sh.evict(now)
	}
	e := &entry{s: slice{limit: l, primary: true, seen: now}}
	e.s.startMeter(prev)
	sh.m[id] = e
	return e
}

// drop forgets e, the slice of id, unless another replaced it, and tells
// the doorkeeper the key was seen at now: its next request within the
// horizon gets a slice again.
func (t *table) drop(id sliceKey, e *entry, now time.Time) {
	hk := t.keyHash(id)
	t.door.seen(doorHash(hk, id), now)
	sh := t.shardOf(hk, id)
	sh.mu.Lock()
	if sh.m[id] == e {
		delete(sh.m, id)
	}
	sh.mu.Unlock()
}

// evict drops the idle slices (nothing usable, no lease in flight, no
// denial in force) or, when none is idle, a sixteenth of the shard: their
// tokens are lost, which only admits less.
func (sh *shard) evict(now time.Time) {
	n := len(sh.m)
	for id, e := range sh.m {
		if e.mu.TryLock() {
			idle := e.s.leasing == nil && e.s.available(now) == 0 && !now.Before(e.s.deniedUntil)
			e.mu.Unlock()
			if idle {
				delete(sh.m, id)
			}
		}
	}
	if len(sh.m) < n {
		return
	}
	drop := n/16 + 1
	for id := range sh.m {
		delete(sh.m, id)
		if drop--; drop == 0 {
			return
		}
	}
}

// forget drops the slice of id and empties it: the requests and the lease
// in flight that still hold it find it dropped, and take and install
// nothing more from it.
func (t *table) forget(id sliceKey) {
	sh := t.shard(id)
	sh.mu.Lock()
	e := sh.m[id]
	delete(sh.m, id)
	sh.mu.Unlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	e.s.dropped = true
	clear(e.s.lots)
	e.s.lots = e.s.lots[:0]
	e.mu.Unlock()
}

func (t *table) len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
