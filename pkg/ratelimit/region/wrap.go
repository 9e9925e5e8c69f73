package region

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Store is a ratelimit.Store that decides the limits of scope global from
// the region's share (Exchanger, in the region's Redis) and passes every
// other limit to inner. Safe for concurrent use.
//
// A request with several limits is decided global limits first, each
// charged when it admits, then the rest by inner only when every global
// limit admitted. A request denied by a later limit has still been charged
// to the global limits before it: they under-admit, never over.
type Store struct {
	inner ratelimit.Store
	ex    *Exchanger
}

var _ ratelimit.Store = (*Store)(nil)

// NewStore wraps inner. It does not own ex (its Run loop is the caller's).
func NewStore(inner ratelimit.Store, ex *Exchanger) (*Store, error) {
	if inner == nil || ex == nil {
		return nil, errors.New("region: NewStore needs an inner store and an exchanger")
	}
	return &Store{inner: inner, ex: ex}, nil
}

// ruleOf is the Rule of a global limit. A floor too large for the number
// of regions is cut to an equal split (policy validation cannot know the
// regions; a decision must not fail on it).
func (s *Store) ruleOf(l ratelimit.Limit) Rule {
	r := Rule{Limit: l.Requests, Period: l.Period, Floor: l.Floor}
	if n := float64(len(s.ex.topo.Regions)); r.Floor*n > 1 {
		r.Floor = 1 / n
	}
	return r
}

// globalKey keeps a limit's terms in its key, so that a changed limit
// starts a fresh count instead of inheriting shares granted under others.
func globalKey(key string, l ratelimit.Limit) string {
	return fmt.Sprintf("%s|#global=%d/%dms", key, l.Requests, l.Period.Milliseconds())
}

// staticSplit reports whether the floors already divide the whole limit
// among the regions: then no grant can add anything, and the key is never
// exchanged.
func staticSplit(r Rule, regions int) bool {
	return r.FloorHits()*int64(regions) >= r.Limit
}

// chargeMode is m as local_decide.lua names it. Every mode past
// ChargeAlways is a reservation (ChargeReserve on main: check one hit,
// charge all): a switch, never an index, so a new mode cannot panic.
func chargeMode(m ratelimit.ChargeMode) string {
	switch m {
	case ratelimit.ChargeIfAdmitted:
		return "i"
	case ratelimit.ChargeNever:
		return "n"
	case ratelimit.ChargeAlways:
		return "a"
	}
	return "r"
}

// allOrNone reports whether a refusal under m charges nothing, so that a
// request's other limits must not be charged either.
func allOrNone(m ratelimit.ChargeMode) bool {
	return m != ratelimit.ChargeNever && m != ratelimit.ChargeAlways
}

func (s *Store) decideGlobal(ctx context.Context, key string, l ratelimit.Limit, hits int64, m ratelimit.ChargeMode) (ratelimit.Result, error) {
	if err := l.Validate(); err != nil {
		return ratelimit.Result{}, err
	}
	if err := ratelimit.CheckCharge(hits, m); err != nil {
		return ratelimit.Result{}, err
	}
	r, k := s.ruleOf(l), globalKey(key, l)
	if !staticSplit(r, len(s.ex.topo.Regions)) {
		s.ex.Track(k, r)
	}
	res, err := s.ex.local.Decide(ctx, k, r, s.ex.topo, hits, chargeMode(m))
	if err != nil {
		return s.decideFloor(ctx, k, l, r, hits, m)
	}
	out := ratelimit.Result{Allowed: res.Allowed, Limit: l.Requests, Remaining: res.Remaining, ResetAfter: res.ResetAfter}
	if !res.Allowed {
		out.RetryAfter = max(res.ResetAfter, time.Millisecond)
	}
	return out, nil
}

// decideFloor decides a global limit when the region's Redis failed: as a
// regional limit of the region's floor, by the inner store, whose failure
// mode (fail open to an in-process store, or closed) then applies as it
// does to every regional limit; a floor of 0 denies. The region admits what
// it may when cut off. A window in which the region's Redis flaps may see
// both its count there and this one: up to one floor more.
func (s *Store) decideFloor(ctx context.Context, k string, l ratelimit.Limit, r Rule, hits int64, m ratelimit.ChargeMode) (ratelimit.Result, error) {
	if r.FloorHits() == 0 {
		return ratelimit.Result{Allowed: hits <= 0, Limit: l.Requests, RetryAfter: l.Period}, nil
	}
	floor := ratelimit.Limit{Name: l.Name, Algorithm: ratelimit.FixedWindow, Requests: r.FloorHits(), Period: l.Period}
	ds, err := s.inner.AllowBatch(ctx, []ratelimit.Request{{Key: k + "|#floor", Limits: []ratelimit.Limit{floor}, Hits: hits, Charge: m}})
	if err != nil {
		return ratelimit.Result{}, err
	}
	res := ds[0].Results[0]
	res.Limit = l.Requests
	return res, nil
}

// Allow decides one limit.
func (s *Store) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	if l.Scope != ratelimit.Global {
		return s.inner.Allow(ctx, key, l, hits)
	}
	return s.decideGlobal(ctx, key, l, hits, ratelimit.ChargeIfAdmitted)
}

// AllowBatch decides each request's global limits here and the rest in one
// batch of inner.
func (s *Store) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	out := make([]ratelimit.Decision, len(reqs))
	var rest []ratelimit.Request
	var restOf []int   // the request each rest answers
	var restAt [][]int // where each of its limits sits in the request
	for i, req := range reqs {
		others, positions, err := s.decideGlobals(ctx, req, &out[i])
		if err != nil {
			return nil, err
		}
		if len(others.Limits) > 0 {
			rest, restOf, restAt = append(rest, others), append(restOf, i), append(restAt, positions)
		}
	}
	if len(rest) == 0 {
		return out, nil
	}
	ds, err := s.inner.AllowBatch(ctx, rest)
	if err != nil {
		return nil, err
	}
	for n, d := range ds {
		i := restOf[n]
		for m, res := range d.Results {
			out[i].Results[restAt[n][m]] = res
		}
		out[i].Allowed = out[i].Allowed && d.Allowed
	}
	return out, nil
}

// decideGlobals decides req's global limits into d and returns the request
// of its other limits (charged never when a global limit denied an
// if-admitted request, so they are reported but not charged) and where
// each of them sits in req.Limits.
func (s *Store) decideGlobals(ctx context.Context, req ratelimit.Request, d *ratelimit.Decision) (ratelimit.Request, []int, error) {
	*d = ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(req.Limits))}
	others := req
	others.Limits = nil
	var positions []int
	for j, l := range req.Limits {
		switch {
		case l.Scope != ratelimit.Global:
			others.Limits = append(others.Limits, l)
			positions = append(positions, j)
		case !d.Allowed && allOrNone(req.Charge):
			d.Results[j] = ratelimit.Result{Limit: l.Requests} // not charged: an earlier one denied
		default:
			res, err := s.decideGlobal(ctx, req.Key, l, req.Hits, req.Charge)
			if err != nil {
				return others, nil, err
			}
			d.Results[j] = res
			d.Allowed = d.Allowed && res.Allowed
		}
	}
	if !d.Allowed && allOrNone(req.Charge) {
		others.Charge = ratelimit.ChargeNever
	}
	return others, positions, nil
}

// Close closes inner.
func (s *Store) Close() error { return s.inner.Close() }

var _ ratelimit.Resetter = (*Store)(nil)

// StateKeys names the region's hash of each global limit and asks inner
// for the others (empty when inner is no Resetter).
func (s *Store) StateKeys(r ratelimit.Request) []string {
	out := make([]string, len(r.Limits))
	others := r
	others.Limits = nil
	var at []int
	for j, l := range r.Limits {
		if l.Scope == ratelimit.Global {
			out[j] = s.ex.local.Key(globalKey(r.Key, l))
			continue
		}
		others.Limits, at = append(others.Limits, l), append(at, j)
	}
	if in, ok := s.inner.(ratelimit.Resetter); ok && len(at) > 0 {
		for m, k := range in.StateKeys(others) {
			out[at[m]] = k
		}
	}
	return out
}

// Reset forgets this region's count of each global limit in the current
// window (its caps stay: they are the region's share, held in the global
// store too) and passes the other limits to inner.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	var rest []ratelimit.Request
	for _, r := range reqs {
		others := r
		others.Limits = nil
		for _, l := range r.Limits {
			if l.Scope != ratelimit.Global {
				others.Limits = append(others.Limits, l)
				continue
			}
			if err := s.ex.local.resetCount(ctx, globalKey(r.Key, l), s.ruleOf(l)); err != nil {
				return err
			}
		}
		if len(others.Limits) > 0 {
			rest = append(rest, others)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	in, ok := s.inner.(ratelimit.Resetter)
	if !ok {
		return ratelimit.ErrNotResettable
	}
	return in.Reset(ctx, rest)
}
