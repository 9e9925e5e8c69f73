package rlqs

import (
	"sync"
	"time"

	"github.com/extauthz/extauthz/internal/expiry"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// allocCache shares one replica's reads of a bucket's allocation among its
// streams: a stream's tick reuses an allocation read less than maxAge ago
// (by a report or another stream's tick) instead of asking the store again.
// So the store sees about one read per bucket, replica and tick, plus one
// per report, however many Envoys on the replica hold the bucket: with
// quotaredis a read returns every client of the bucket, and one per stream
// and second would cost O(Envoys²) per second.
type allocCache struct {
	maxAge time.Duration

	mu     sync.Mutex
	m      map[string]cachedAlloc
	sweeps expiry.Schedule
}

type cachedAlloc struct {
	at     time.Time
	budget float64 // the rule's budget (its identity)
	// current is the budget divided: the rule's, or less for a rule with a
	// global limit (what the region may give its Envoys now).
	current float64
	shares  map[string]quota.Share // read-only once cached
}

func newAllocCache(maxAge time.Duration) *allocCache {
	return &allocCache{maxAge: maxAge, m: map[string]cachedAlloc{}, sweeps: expiry.Schedule{Every: maxAge}}
}

// get returns the allocation of key for budget read less than maxAge
// before now, and the budget it divided.
func (c *allocCache) get(key string, budget float64, now time.Time) (map[string]quota.Share, float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.budget != budget || now.Sub(e.at) >= c.maxAge || now.Before(e.at) {
		return nil, 0, false
	}
	return e.shares, e.current, true
}

// put caches an allocation read at now and, once per maxAge, drops the
// stale entries, so buckets no stream holds any more do not accumulate.
func (c *allocCache) put(key string, budget, current float64, shares map[string]quota.Share, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = cachedAlloc{at: now, budget: budget, current: current, shares: shares}
	if c.sweeps.Due(now) {
		expiry.Prune(c.m, func(e cachedAlloc) bool { return now.Sub(e.at) < c.maxAge })
	}
}

// len counts the entries (tests).
func (c *allocCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
