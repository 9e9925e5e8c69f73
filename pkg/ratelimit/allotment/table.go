package allotment

import (
	"hash/maphash"
	"strconv"
	"strings"
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
	m  map[string]*entry
}

// table is a sharded map of slices by sliceID, bounded in total.
type table struct {
	seed     maphash.Seed
	perShard int
	shards   [shardCount]shard
}

func newTable(maxSlices int) *table {
	t := &table{seed: maphash.MakeSeed(), perShard: max((maxSlices+shardCount-1)/shardCount, 1)}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*entry)
	}
	return t
}

// sliceID identifies a slice by the key and the limit's full identity
// (algorithm, requests, period, burst): a limit whose terms changed leases
// afresh, since its tokens' lapse rules depend on them. The consistency is
// no part of it, nor of the store's state key.
func sliceID(key string, l ratelimit.Limit) string {
	var b strings.Builder
	b.Grow(len(key) + 40)
	b.WriteString(strconv.Itoa(len(key)))
	b.WriteByte(':')
	b.WriteString(key)
	b.WriteByte('|')
	b.WriteString(string(l.Algorithm.OrDefault()))
	for _, n := range []int64{l.Requests, int64(l.Period), l.Burst} {
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(n, 10))
	}
	return b.String()
}

func (t *table) shard(id string) *shard {
	return &t.shards[maphash.String(t.seed, id)%shardCount]
}

// lookup returns the entry of id, or nil.
func (t *table) lookup(id string) *entry {
	sh := t.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[id]
}

// get returns the entry of id, creating it for l when absent.
func (t *table) get(id string, l ratelimit.Limit, now time.Time) *entry {
	sh := t.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[id]; e != nil {
		return e
	}
	if len(sh.m) >= t.perShard {
		sh.evict(now)
	}
	e := &entry{s: slice{limit: l, primary: true}}
	sh.m[id] = e
	return e
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

// forget drops the slice of id.
func (t *table) forget(id string) {
	sh := t.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
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
