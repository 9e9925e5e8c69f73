package overlimit

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

const shardCount = 32

// entry is one remembered denial.
type entry struct {
	decided  time.Time // when the store was asked (before the call)
	until    time.Time // decided + the smallest RetryAfter of a denying limit
	minHits  int64     // requests with fewer hits are not covered
	decision ratelimit.Decision
}

type shard struct {
	mu sync.Mutex
	m  map[entryID]entry
}

// cache is a sharded map of denials, bounded by max entries in total.
type cache struct {
	seed     maphash.Seed
	perShard int
	shards   [shardCount]shard
}

func newCache(maxKeys int) *cache {
	c := &cache{seed: maphash.MakeSeed(), perShard: (maxKeys + shardCount - 1) / shardCount}
	for i := range c.shards {
		c.shards[i].m = make(map[entryID]entry)
	}
	return c
}

// entryID identifies a request by its key and each limit's full identity.
// A limit's Consistency is no part of it: exact and allotment decide on one
// shared state, so a denial remembered in one mode bounds the other too.
// The first limit is held as a value and the key as the request's own
// string, so that a one-limit request, the common case, costs no
// allocation; further limits are encoded in rest.
type entryID struct {
	key    string
	limits int             // how many
	first  ratelimit.Terms // the first's, when there is one
	rest   string          // the others', each "|alg/requests/period/burst"
}

// entryIDOf is r's entryID.
func entryIDOf(r ratelimit.Request) entryID {
	id := entryID{key: r.Key, limits: len(r.Limits)}
	if len(r.Limits) == 0 {
		return id
	}
	id.first = r.Limits[0].Terms()
	var b []byte
	for _, l := range r.Limits[1:] {
		b = append(b, '|')
		b = append(b, l.Algorithm.OrDefault()...)
		for _, n := range [...]int64{l.Requests, int64(l.Period), l.Burst} {
			b = append(b, '/')
			b = strconv.AppendInt(b, n, 10)
		}
	}
	id.rest = string(b)
	return id
}

// shard picks id's shard by its key alone: a key's entries under other
// limits share it, which spreads as well.
func (c *cache) shard(id entryID) *shard {
	return &c.shards[maphash.String(c.seed, id.key)%shardCount]
}

// get returns the remembered denial for id, aged to now, when it still
// covers a request of hits.
func (c *cache) get(id entryID, hits int64, now time.Time) (ratelimit.Decision, bool) {
	sh := c.shard(id)
	sh.mu.Lock()
	e, ok := sh.m[id]
	if ok && !now.Before(e.until) {
		delete(sh.m, id)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || hits < e.minHits {
		return ratelimit.Decision{}, false
	}
	return aged(e, now), true
}

// aged copies the stored decision with its durations shortened by the time
// since it was made.
func aged(e entry, now time.Time) ratelimit.Decision {
	elapsed := now.Sub(e.decided)
	d := ratelimit.Decision{Results: make([]ratelimit.Result, len(e.decision.Results))}
	for i, r := range e.decision.Results {
		r.ResetAfter = max(r.ResetAfter-elapsed, 0)
		if !r.Allowed {
			r.RetryAfter = max(r.RetryAfter-elapsed, time.Microsecond)
		}
		d.Results[i] = r
	}
	return d
}

// put remembers a denial decided at decided, until its earliest possible
// admission; a denial without a positive RetryAfter is not remembered.
// sliding_window's RetryAfter is no bound at all (its estimate floors the
// previous window's weight, so the hits may pass as soon as that weight
// drops by a fraction of a hit): its denials set no deadline.
func (c *cache) put(id entryID, hits int64, d ratelimit.Decision, limits []ratelimit.Limit, decided time.Time) {
	var wait time.Duration
	for i, r := range d.Results {
		if i < len(limits) && limits[i].Algorithm == ratelimit.SlidingWindow {
			continue
		}
		if !r.Allowed && r.RetryAfter > 0 && (wait == 0 || r.RetryAfter < wait) {
			wait = r.RetryAfter
		}
	}
	if wait == 0 {
		return
	}
	// The cache owns its copy of the results: the caller's may share
	// memory with the store that made them (a Redis call's), which an
	// entry must not keep alive, nor see changed.
	d.Results = slices.Clone(d.Results)
	e := entry{decided: decided, until: decided.Add(wait), minHits: hits, decision: d}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[id]; ok && old.minHits < hits && decided.Before(old.until) {
		return // the existing entry covers more requests
	}
	if len(sh.m) >= c.perShard {
		sh.evict(decided)
	}
	sh.m[id] = e
}

// evict drops expired entries or, when none expired, a sixteenth of the
// shard chosen arbitrarily, so that the scan is paid once per many inserts.
func (sh *shard) evict(now time.Time) {
	n := len(sh.m)
	for id, e := range sh.m {
		if !now.Before(e.until) {
			delete(sh.m, id)
		}
	}
	drop := n/16 + 1
	if len(sh.m) < n {
		return
	}
	for id := range sh.m {
		delete(sh.m, id)
		if drop--; drop == 0 {
			return
		}
	}
}

func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// forget drops the remembered denial of id, if any.
func (c *cache) forget(id entryID) {
	sh := c.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}
