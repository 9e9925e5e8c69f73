package authz

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Sizing of RouteLatency.
const (
	// latencySamples is how many recent lease durations a route keeps: few
	// enough that a route's estimate follows a change of its upstream
	// within a few dozen requests, enough for a 90th percentile that one
	// outlier does not move.
	latencySamples = 32
	// latencyRoutes bounds the routes kept. A policy has far fewer; the cap
	// only matters when reloads keep renaming routes, and then a forgotten
	// route merely starts again from the default.
	latencyRoutes = 1024
	// latencyQuantile is the share of recent requests that had finished
	// within the estimate: a duplicate that obeys Retry-After finds the
	// first request done nine times in ten, and never waits for the
	// slowest outlier.
	latencyQuantile = 0.9
)

// DefaultInProgressWait is Retry-After for a duplicate on a route with no
// finished request on this replica yet (capped by the lease's remaining
// time). Most idempotent writes finish within a second or two; a client
// that comes back too early costs one more 409 (by then possibly with an
// estimate), while the remaining lease (e.g. 30s) would make every client
// of a fast route wait half a minute.
const DefaultInProgressWait = 2 * time.Second

// RouteLatency remembers, per policy route, how long the last requests
// held their idempotency lease on this replica: from the lease taken (or
// handed over by ext_authz) to the reply stored, the lease released or the
// request given up as not replayable. It is what a duplicate waits for, so
// its 90th percentile is the Retry-After of a 409 (inProgressWait).
//
// It is per process on purpose: no Redis round trip on the 409 path, and
// each replica sees a fair share of a route's requests, so its estimate
// converges like a shared one would. Safe for concurrent use; memory is
// bounded (latencyRoutes × latencySamples durations).
type RouteLatency struct {
	now    func() time.Time
	mu     sync.Mutex
	routes map[string]*latencyRing
}

// latencyRing is a route's last latencySamples durations.
type latencyRing struct {
	d    [latencySamples]time.Duration
	n    int // samples held, up to latencySamples
	next int // where the next sample goes
}

// NewRouteLatency returns an empty RouteLatency reading time from now
// (nil: time.Now); tests inject a clock.
func NewRouteLatency(now func() time.Time) *RouteLatency {
	if now == nil {
		now = time.Now
	}
	return &RouteLatency{now: now, routes: map[string]*latencyRing{}}
}

// Observe records that a request of route held its lease for d.
func (l *RouteLatency) Observe(route string, d time.Duration) {
	if d < 0 {
		return // a clock stepped back: no information
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.routes[route]
	if r == nil {
		if len(l.routes) >= latencyRoutes {
			for k := range l.routes { // forget an arbitrary route
				delete(l.routes, k)
				break
			}
		}
		r = &latencyRing{}
		l.routes[route] = r
	}
	r.d[r.next] = d
	r.next = (r.next + 1) % latencySamples
	r.n = min(r.n+1, latencySamples)
}

// Estimate returns the 90th percentile (nearest rank) of route's recent
// durations, and false when none finished on this replica yet.
func (l *RouteLatency) Estimate(route string) (time.Duration, bool) {
	l.mu.Lock()
	r := l.routes[route]
	if r == nil {
		l.mu.Unlock()
		return 0, false
	}
	ds := slices.Clone(r.d[:r.n])
	l.mu.Unlock()
	slices.Sort(ds)
	rank := int(math.Ceil(latencyQuantile * float64(len(ds)))) // 1-based
	return ds[max(rank-1, 0)], true
}

// since is the time elapsed from t by l's clock.
func (l *RouteLatency) since(t time.Time) time.Duration { return l.now().Sub(t) }

// inProgressWait is the Retry-After of a duplicate of a request still
// holding its lease: the route's estimate less the time the request has
// already run, between 1s and the lease's remaining time; without an
// estimate, DefaultInProgressWait capped by the remaining time. ok reports
// whether the estimate was used.
//
// The elapsed time is lease TTL − remaining: exact until the first
// renewal (every TTL/3), which restarts the TTL, after that an
// underestimate — so the wait errs long, never short.
func inProgressWait(est time.Duration, ok bool, ttl, remaining time.Duration) time.Duration {
	if !ok {
		return min(DefaultInProgressWait, remaining)
	}
	elapsed := max(ttl-remaining, 0)
	return min(max(est-elapsed, time.Second), remaining)
}
