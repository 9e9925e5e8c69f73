package region

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// Exchanger is one replica's background exchange: for every key the
// replica has decided recently, it reports the region's demand to the
// global store and moves the region's grants towards its fair share. Only
// one replica of a region exchanges a key at a time (a lease in the
// region's Redis); the others' steps are no-ops. Safe for concurrent use.
type Exchanger struct {
	topo   Topology
	local  *Local
	global *Global
	owner  string
	// now is the clock of the exchange schedule (nil: time.Now; a
	// simulation sets its virtual clock). Demand is measured on the region
	// Redis's clock.
	now clock

	mu   sync.Mutex
	keys map[string]*tracked
}

func (e *Exchanger) clock() time.Time {
	if e.now == nil {
		return time.Now()
	}
	return e.now()
}

// idleSteps is how many exchanges without a hit keep a key exchanged.
const idleSteps = 3

// NewExchanger returns the exchanger of one replica (owner: a random ID
// unique to the replica).
func NewExchanger(t Topology, local *Local, global *Global, owner string) (*Exchanger, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if local == nil || global == nil || owner == "" {
		return nil, errors.New("region: exchanger needs a local store, a global store and an owner ID")
	}
	return &Exchanger{topo: t, local: local, global: global, owner: owner, keys: map[string]*tracked{}}, nil
}

// Track makes sure k is exchanged under r: the request path calls it on
// every decision (a map lookup, no I/O).
func (e *Exchanger) Track(k string, r Rule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.lookup(k, r)
	t.rule, t.hit = r, true
}

// notOwner records that another replica holds k's lease. On a regular
// turn it counts an exchange step the lease made a no-op: this replica keeps
// the key while it decides it, so that it can take over when the holder
// stops.
func (e *Exchanger) notOwner(k string, due bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.keys[k]
	if !ok {
		return
	}
	t.owner = false
	if !due {
		return
	}
	if t.hit {
		t.idle = 0
	} else {
		t.idle++
	}
	t.hit = false
}

// Outcome says what one exchange step did.
type Outcome struct {
	// Owner is false when another replica exchanges the key.
	Owner bool
	// Demand is the region's demand reported, hits per window.
	Demand float64
	// Target is the region's fair share computed, hits per window.
	Target int64
	// Grants are the region's grants after the step.
	Grants Grants
	// Early is true when the step came before the key's interval was up,
	// because the region's demand moved.
	Early bool
	// Retry is true when the step came before the key's interval was up
	// because the last left the region short of its share while another
	// region held more than its own (see exchange).
	Retry bool
}

// Step exchanges key k once, now: take the lease, measure the demand,
// report it, compute the fair share, lower the local caps before a global
// shrink, grow the global grant, then mirror it locally. An error leaves
// the local caps at or below the global grants: a failed step never admits
// more. The key's next regular exchange is an interval later.
func (e *Exchanger) Step(ctx context.Context, k string, r Rule) (Outcome, error) {
	e.plan(k, true)
	out, _, err := e.turn(ctx, k, r, true)
	return out, err
}

// Tick is one turn of k's exchange; Run calls it every quarter interval.
// It exchanges k when its interval is up (as Step does), or sooner when the
// lease holder's reading of the region's count of hits asked shows that
// the demand moved (at most once between two regular exchanges); otherwise
// it reads the count at most, or does nothing. done is false when it did not
// exchange; a failed reading between exchanges is left to the next regular
// one.
func (e *Exchanger) Tick(ctx context.Context, k string, r Rule) (out Outcome, done bool, err error) {
	due, read := e.plan(k, false)
	if !due && !read {
		return Outcome{}, false, nil
	}
	return e.turn(ctx, k, r, due)
}

// plan says whether k's regular exchange is due (and if so schedules the
// next one an interval on: turns are a tick apart, so half a tick early
// counts) and whether this replica reads its count meanwhile. A key not
// tracked is due; observe adds it if this replica holds its lease.
func (e *Exchanger) plan(k string, force bool) (due, read bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.keys[k]
	if !ok {
		return true, false
	}
	if now := e.clock(); force || !now.Before(t.due) {
		t.due = e.next(now)
		return true, true
	}
	return false, t.owner
}

// next is when a key exchanged at now is next due.
func (e *Exchanger) next(now time.Time) time.Time {
	return now.Add(e.topo.Interval - tick(e.topo)/2)
}

// turn claims k's lease, reads the region's count and exchanges k when
// observe says so (always when due).
func (e *Exchanger) turn(ctx context.Context, k string, r Rule, due bool) (Outcome, bool, error) {
	c, ok, err := e.local.claim(ctx, k, e.owner, r, e.topo)
	if err != nil {
		if !due {
			return Outcome{}, false, nil
		}
		return Outcome{}, true, err
	}
	if !ok {
		e.notOwner(k, due)
		return Outcome{}, due, nil
	}
	demand, kind := e.observe(k, r, c, due)
	if kind == turnRead {
		return Outcome{Owner: true}, false, nil
	}
	// The region's RLQS Envoys ask on top of the decisions counted here
	// (their reservations do not count as hits asked).
	out, err := e.exchange(ctx, k, r, c, demand+c.quota, kind)
	out.Early, out.Retry = !due && kind != turnRetry, kind == turnRetry
	return out, true, err
}

// rest is what a region asks for the rest of the current window. Its fair
// share, except: a region whose demand is within its share gives back what
// its projection (admitted so far plus demand over the time left, with
// headroom) says it will not use; a region whose demand is above its share
// asks for its projection, which the allocator grants only from room no
// region holds (what others gave back). So a window's budget unused by one
// region is used by another within the window, and no region takes what
// another holds. The next window starts again from the fair shares.
func rest(r Rule, share int64, demand float64, used int64, now time.Time) int64 {
	if math.IsInf(demand, 1) {
		return share
	}
	left := float64(r.Window(now)+1)*float64(r.Period) - float64(now.UnixNano())
	projected := float64(used) + demand*left/float64(r.Period)
	// Target rounds a share down: a demand within its share is below the
	// share plus one hit (293.3 against 293 is its whole share, not more),
	// and such a region may keep its demand rounded up (294) from room no
	// one holds.
	if demand < float64(share)+1 {
		whole := max(share, int64(math.Ceil(demand)))
		return min(whole, max(used, int64(math.Ceil(projected*keepHeadroom))+restSlack))
	}
	return max(share, min(int64(math.Ceil(projected*takeHeadroom))+restSlack, r.Limit))
}

// Demand is measured over an interval (or the ticks since it moved) and
// varies: a region keeps half as much again as its projection before it
// gives any back (what it gives is gone for the window once another takes
// it), and takes a quarter more than its projection from room no one holds.
const (
	keepHeadroom = 1.5
	takeHeadroom = 1.25
	restSlack    = 2
)

// Target is a region's fair share of r's limit, hits per window. Every
// configured region's floor is reserved first (the allocator keeps it for
// the region whether or not it reports, so that it may admit that much cut
// off); the rest is divided among the regions that report by quota.Shares,
// max-min fair by demand above the floor, the unused part split equally.
// A region's target is its floor plus its part. So a region that alone
// reports demand gets the whole limit less the others' floors, and the
// targets with the floors never sum above the limit.
func Target(demands map[string]float64, r Rule, t Topology) int64 {
	floor := float64(r.FloorHits())
	if _, ok := demands[t.Region]; !ok {
		return int64(floor)
	}
	regions := map[string]bool{}
	for _, name := range t.Regions {
		regions[name] = true
	}
	above := make(map[string]float64, len(demands))
	for name, d := range demands {
		regions[name] = true
		above[name] = max(d-floor, 0)
	}
	rest := float64(r.Limit) - floor*float64(len(regions))
	shares := quota.Shares(rest, above, quota.SpareEqual)
	return int64(math.Floor(floor + shares[t.Region]))
}

// Run turns every tracked key each quarter interval until ctx ends, at
// most parallel keys at once: each is exchanged every interval, and sooner
// when its demand moved (Tick). Each exchange's outcome goes to onStep
// (nil: ignored); a key whose exchange fails keeps its caps, which lapse on
// their own.
func (e *Exchanger) Run(ctx context.Context, parallel int, onStep func(key string, out Outcome, err error)) {
	ticker := time.NewTicker(tick(e.topo))
	defer ticker.Stop()
	for {
		e.Round(ctx, parallel, onStep)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Round turns every tracked key once (Tick), reporting the exchanges to
// onStep, and drops the keys idle for idleSteps exchanges.
func (e *Exchanger) Round(ctx context.Context, parallel int, onStep func(key string, out Outcome, err error)) {
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for k, r := range e.snapshot() {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// Two WAN round trips: bounded by the lease, not the interval,
			// which may be shorter than they are.
			sctx, cancel := context.WithTimeout(ctx, e.topo.Lease)
			defer cancel()
			out, done, err := e.Tick(sctx, k, r)
			if done && onStep != nil {
				onStep(k, out, err)
			}
		}()
	}
	wg.Wait()
}

// Tracked is how many keys the exchanger follows.
func (e *Exchanger) Tracked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.keys)
}

// snapshot returns the tracked keys and their rules, dropping idle ones.
func (e *Exchanger) snapshot() map[string]Rule {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Rule, len(e.keys))
	for k, t := range e.keys {
		if t.idle >= idleSteps {
			delete(e.keys, k)
			continue
		}
		out[k] = t.rule
	}
	return out
}

// Decide is the request path: decide k in the region's Redis and make sure
// the key is exchanged. Nothing here crosses a region.
func (e *Exchanger) Decide(ctx context.Context, k string, r Rule, hits int64) (Result, error) {
	e.Track(k, r)
	return e.local.Decide(ctx, k, r, e.topo, hits, "i")
}
