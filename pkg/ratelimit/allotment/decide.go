package allotment

import (
	"context"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// taken is the outcome of one allotment limit of a request.
type taken struct {
	res     ratelimit.Result
	parts   reservation // tokens reserved, to give back if the request is denied
	ok      bool
	primary bool
	cold    bool // the key is cold: decide the limit on the store, as exact
}

// decide decides one request with at least one allotment limit and Hits > 0:
// all its limits admit and are charged, or none is. sole is the entry of
// its only allotment limit, which the caller admitted; nil when it has
// several, admitted here. The limits of cold keys join the exact ones: one
// inner call charges them all or none, so nothing needs giving back.
func (s *Store) decide(ctx context.Context, r ratelimit.Request, sole *entry) (ratelimit.Decision, bool, error) {
	d := ratelimit.Decision{Results: make([]ratelimit.Result, len(r.Limits))}
	var held []part
	var exact []int
	cold := 0
	primary := true
	for i, l := range r.Limits {
		if l.Consistency != ratelimit.Allotment {
			exact = append(exact, i)
			continue
		}
		e := sole
		if e == nil {
			e = s.table.admit(sliceID(r.Key, l), l, s.now)
		}
		t, err := s.take(ctx, e, r.Key, l, r.Hits)
		if err != nil {
			s.giveBack(held)
			return d, false, err
		}
		if t.cold {
			exact, cold = append(exact, i), cold+1
			continue
		}
		d.Results[i], primary = t.res, primary && t.primary
		if !t.ok {
			s.giveBack(held)
			p, err := s.fillDenied(ctx, r, i, exact, d.Results)
			return d, primary && p, err
		}
		if len(r.Limits) > 1 { // one limit has nothing to give back
			held = append(held, t.parts.list()...)
		}
	}
	if len(exact) == 0 {
		d.Allowed = true
		return d, primary, nil
	}
	p, err := s.askExact(ctx, r, exact, cold, &d)
	if err != nil || !d.Allowed {
		s.giveBack(held)
	}
	return d, primary && p, err
}

// askExact decides the limits of r at exact, cold of them allotment limits
// of cold keys, in one inner call (the whole request when they are all its
// limits) and files their Results in d.
func (s *Store) askExact(ctx context.Context, r ratelimit.Request, exact []int, cold int, d *ratelimit.Decision) (bool, error) {
	sub := r
	if len(exact) < len(r.Limits) {
		sub.Limits = pick(r.Limits, exact)
	}
	got, primary, err := s.askInner(ctx, []ratelimit.Request{sub})
	if err != nil {
		return false, err
	}
	s.m.cold.Add(float64(cold))
	for k, i := range exact {
		d.Results[i] = got[0].Results[k]
	}
	d.Allowed = got[0].Allowed
	return primary, nil
}

// fillDenied completes, without charging anything, the Results of a
// request that its allotment limit at index denied refused: the allotment
// limits after it from their slices, its exact limits (those before it in
// exact, and those after) by one check on the inner store.
func (s *Store) fillDenied(ctx context.Context, r ratelimit.Request, denied int, exact []int, out []ratelimit.Result) (bool, error) {
	now := s.now()
	for i := denied + 1; i < len(r.Limits); i++ {
		l := r.Limits[i]
		if l.Consistency != ratelimit.Allotment {
			exact = append(exact, i)
			continue
		}
		held := s.table.held(sliceID(r.Key, l), now)
		out[i] = ratelimit.Result{Allowed: held >= r.Hits, Limit: reported(l), Remaining: held}
	}
	if len(exact) == 0 {
		return true, nil
	}
	check := ratelimit.Request{Key: r.Key, Limits: pick(r.Limits, exact), Hits: 0}
	got, primary, err := s.askInner(ctx, []ratelimit.Request{check})
	if err != nil {
		return false, err
	}
	for k, i := range exact {
		out[i] = got[0].Results[k]
	}
	return primary, nil
}

func pick(ls []ratelimit.Limit, at []int) []ratelimit.Limit {
	out := make([]ratelimit.Limit, len(at))
	for k, i := range at {
		out[k] = ls[i]
	}
	return out
}

// giveBack returns reserved tokens to their slices (not to the store).
func (s *Store) giveBack(parts []part) {
	now := s.now()
	for _, p := range parts {
		p.entry.mu.Lock()
		if p.entry.s.reports != p.report || !p.lot.giveBack(p.from, p.n, now) {
			s.m.lapsedAdd(p.entry.s.limit, p.n)
		}
		p.entry.mu.Unlock()
	}
}

// take reserves hits tokens of l on key from e, the key's slice: from the
// slice when it holds enough, else after the lease in flight, else by
// leasing now. A cold key (e nil, or a slice found empty after more than
// the horizon of silence) takes nothing: taken.cold.
func (s *Store) take(ctx context.Context, e *entry, key string, l ratelimit.Limit, hits int64) (taken, error) {
	if e == nil {
		return taken{cold: true}, nil
	}
	now := s.now()
	e.mu.Lock()
	quiet := e.s.dropped || now.Sub(e.s.seen) > s.horizon
	e.s.seen = now
	e.s.noteDemand(hits)
	for {
		if res, ok := e.s.remembered(hits, now); ok {
			e.mu.Unlock()
			s.m.local.Inc()
			return taken{res: res, primary: true}, nil
		}
		parts, ok, lapsed := e.s.reserve(e, hits, now)
		s.m.lapsedAdd(l, lapsed)
		if ok {
			t := taken{res: e.s.result(true, now), parts: parts, ok: true, primary: e.s.primary}
			s.maybePrefetch(e, key, now)
			e.mu.Unlock()
			s.m.local.Inc()
			return t, nil
		}
		if e.s.leasing == nil {
			if quiet {
				return s.cool(e, key, l, now) // unlocks e
			}
			return s.leaseNow(ctx, e, key, l, hits, now) // unlocks e
		}
		ch := e.s.leasing
		if err := e.wait(ctx, hits); err != nil {
			return taken{}, err
		}
		if t, failed, err := e.s.shared(ch, hits); failed {
			e.mu.Unlock()
			return t, err
		}
		quiet = quiet || e.s.dropped // reset while waiting: decided as exact
		now = s.now()
	}
}

// cool drops e, an empty slice whose key went quiet for more than the
// horizon: the key is cold again, its request decided as exact, and it
// gets a slice again only when a second request follows within the
// horizon. Without this, every key that once showed two requests close
// together would keep a slice and lease one token per request. A request
// that already holds e finds it dropped and is decided as exact too.
// Called with e locked; returns with it unlocked.
func (s *Store) cool(e *entry, key string, l ratelimit.Limit, now time.Time) (taken, error) {
	e.s.dropped = true
	e.mu.Unlock()
	s.table.drop(sliceID(key, l), e, now)
	return taken{cold: true}, nil
}

// wait waits, unlocked, for the lease in flight on e; it returns locked.
func (e *entry) wait(ctx context.Context, hits int64) error {
	ch := e.s.leasing
	e.s.waiting += hits
	e.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	e.mu.Lock()
	e.s.waiting -= hits
	if err != nil {
		e.mu.Unlock()
	}
	return err
}

// leaseNow leases in the request's path: enough for the demand and for the
// requests waiting, at least hits. The request that caused it arrived
// before the lease was sent, so it may use the first tokens whatever their
// slot. Called with e locked; returns with it unlocked.
func (s *Store) leaseNow(ctx context.Context, e *entry, key string, l ratelimit.Limit, hits int64, now time.Time) (taken, error) {
	maxN := s.maxSlice(l)
	n := max(hits, min(max(e.s.size(s.horizon, maxN), hits+e.s.waiting), maxN))
	e.s.sample(now)
	by := s.leaseBy(&e.s, now)
	done := make(chan struct{})
	e.s.leasing = done
	e.mu.Unlock()

	g, err := s.lease(ctx, key, l, n, hits, by)

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.s.leasing == done {
		e.s.leasing = nil
	}
	close(done)
	e.s.noteFailure(done, g, err)
	s.m.store.Inc()
	if err != nil {
		return taken{}, err
	}
	now = s.now()
	if g.n == 0 {
		e.s.refuse(g, hits)
		g.res.Remaining += e.s.available(now)
		return taken{res: g.res, primary: g.primary}, nil
	}
	if e.s.dropped {
		// Reset while leasing: the lease may have been granted against the
		// state the reset forgot. Its tokens are not installed; the
		// request that sent it was admitted before the reset and keeps
		// its hits.
		s.m.lease(l, "sync")
		return taken{res: g.res, ok: true, primary: g.primary}, nil
	}
	o := e.s.install(l, g)
	o.used = hits
	s.m.lease(l, "sync")
	t := taken{res: e.s.result(true, now), ok: true, primary: g.primary}
	t.parts.parts[0], t.parts.n = part{entry: e, lot: o, n: hits, report: e.s.reports}, 1
	return t, nil
}

// held is the tokens the slice of id holds usable at now; 0 without one.
func (t *table) held(id sliceKey, now time.Time) int64 {
	e := t.lookup(id)
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.s.available(now)
}
