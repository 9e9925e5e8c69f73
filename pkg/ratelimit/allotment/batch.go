package allotment

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// sourced is implemented by an inner store that may answer without its
// backend (package failover's fallback, or its Closed-mode denials).
type sourced interface {
	AllowBatchSource(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error)
}

// askInner asks the inner store and reports whether its backend decided.
func (s *Store) askInner(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error) {
	if src, ok := s.inner.(sourced); ok {
		return src.AllowBatchSource(ctx, reqs)
	}
	d, err := s.inner.AllowBatch(ctx, reqs)
	return d, true, err
}

// kind says how a request is decided: leased (it charges hits if admitted
// and has an allotment limit), checked (Hits 0 with an allotment limit: on
// the inner store, then the tokens held here are added), or plain. One scan
// of the limits; requests without allotment limits cost nothing more. A
// request of another charge mode is plain: a check of hits (ChargeNever),
// a charge whatever the outcome (ChargeAlways) or a reservation taken with
// its check (ChargeReserve) goes to the shared store as it is, which is
// exact, and cannot come from a slice, whose tokens are only ever admitted
// hits.
func kind(r ratelimit.Request) (leased, checked bool) {
	if r.Charge != ratelimit.ChargeIfAdmitted {
		return false, false
	}
	for i := range r.Limits {
		if r.Limits[i].Consistency == ratelimit.Allotment {
			return r.Hits > 0, r.Hits == 0
		}
	}
	return false, false
}

// AllowBatchSource is AllowBatch that also reports whether every answer
// came from the inner store's backend (false when a fallback decided a
// lease or a request), for package overlimit above.
func (s *Store) AllowBatchSource(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error) {
	if s.isClosed() {
		return nil, false, ratelimit.ErrClosed
	}
	if len(reqs) == 1 { // the usual call
		if leased, _ := kind(reqs[0]); leased {
			return s.decideOne(ctx, reqs)
		}
	}
	var mine []int
	for i := range reqs {
		if leased, _ := kind(reqs[i]); leased {
			mine = append(mine, i)
		}
	}
	if len(mine) == 0 {
		return s.askRest(ctx, reqs, 0)
	}
	for _, i := range mine {
		if err := validate(reqs[i]); err != nil {
			return nil, false, fmt.Errorf("request %d: %w", i, err)
		}
	}
	return s.mixedBatch(ctx, reqs, mine)
}

// askRest asks the inner store, in one call, for the requests decided
// there: exact ones, checks (to which the tokens held here are added), and
// cold ones, whose number cold is counted as decisions.
func (s *Store) askRest(ctx context.Context, reqs []ratelimit.Request, cold int) ([]ratelimit.Decision, bool, error) {
	d, primary, err := s.askInner(ctx, reqs)
	if err == nil {
		s.forgetRefunded(reqs)
		s.addHeld(reqs, d)
		s.m.cold.Add(float64(cold))
	}
	return d, primary, err
}

// admitSole admits the only allotment limit of r, a leased request: its
// entry, or cold when its key is cold, which makes r an exact request. A
// request with several allotment limits (nil, false) is admitted limit by
// limit in decide.
func (s *Store) admitSole(r ratelimit.Request) (e *entry, cold bool) {
	at := -1
	for i := range r.Limits {
		if r.Limits[i].Consistency == ratelimit.Allotment {
			if at >= 0 {
				return nil, false
			}
			at = i
		}
	}
	e = s.table.admit(sliceID(r.Key, r.Limits[at]), r.Limits[at], s.now)
	return e, e == nil
}

// validate checks what the inner store would before any lease: valid
// limits, and no two sharing a state (same algorithm and period), which
// would lease from one count under two slices. Requests hold a few limits:
// comparing pairs costs less than a map.
func validate(r ratelimit.Request) error {
	for i, l := range r.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %d: %w", i, err)
		}
		for _, o := range r.Limits[:i] {
			if o.Algorithm.OrDefault() == l.Algorithm.OrDefault() && o.Period == l.Period {
				return fmt.Errorf("%w: limit %d repeats algorithm %s and period %s",
					ratelimit.ErrInvalidLimit, i, l.Algorithm.OrDefault(), l.Period)
			}
		}
	}
	return nil
}

// mixedBatch decides the requests in mine from slices, each on its own
// goroutine when there are several (their leases then overlap, as one
// pipelined batch would), and the others in one inner call: exact
// requests, checks, and those whose only allotment limit's key is cold.
func (s *Store) mixedBatch(ctx context.Context, reqs []ratelimit.Request, mine []int) ([]ratelimit.Decision, bool, error) {
	sole := make([]*entry, 0, len(mine))
	warm := mine[:0]
	for _, i := range mine {
		if e, cold := s.admitSole(reqs[i]); !cold {
			warm, sole = append(warm, i), append(sole, e)
		}
	}
	cold := len(mine) - len(warm)
	if len(warm) == 0 {
		return s.askRest(ctx, reqs, cold)
	}
	c := &collector{out: make([]ratelimit.Decision, len(reqs)), primary: true}
	var pieces []func()
	if rest, at := others(reqs, warm); len(rest) > 0 {
		pieces = append(pieces, func() {
			d, p, err := s.askRest(ctx, rest, cold)
			c.put(at, d, p, err)
		})
	}
	for k, i := range warm {
		pieces = append(pieces, func() {
			d, p, err := s.decide(ctx, reqs[i], sole[k])
			c.put([]int{i}, []ratelimit.Decision{d}, p, err)
		})
	}
	var wg sync.WaitGroup
	for _, f := range pieces[1:] {
		wg.Go(f)
	}
	pieces[0]()
	wg.Wait()
	if c.err != nil {
		return nil, false, c.err
	}
	return c.out, c.primary, nil
}

// decideOne decides a batch of one leased request, without goroutines; a
// cold one as the exact request it then is, passed on unchanged.
func (s *Store) decideOne(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error) {
	r := reqs[0]
	if err := validate(r); err != nil {
		return nil, false, fmt.Errorf("request 0: %w", err)
	}
	sole, cold := s.admitSole(r)
	if cold {
		return s.askRest(ctx, reqs, 1)
	}
	out := make([]ratelimit.Decision, 1)
	var primary bool
	var err error
	if out[0], primary, err = s.decide(ctx, r, sole); err != nil {
		return nil, false, err
	}
	return out, primary, nil
}

// others returns the requests of reqs not in mine (sorted), with their
// indexes.
func others(reqs []ratelimit.Request, mine []int) ([]ratelimit.Request, []int) {
	var rest []ratelimit.Request
	var at []int
	for i, j := 0, 0; i < len(reqs); i++ {
		if j < len(mine) && mine[j] == i {
			j++
			continue
		}
		rest, at = append(rest, reqs[i]), append(at, i)
	}
	return rest, at
}

// collector gathers the decisions of the pieces of one batch.
type collector struct {
	mu      sync.Mutex
	out     []ratelimit.Decision
	primary bool
	err     error
}

// put files the decisions d of the requests at (indexes into the batch).
func (c *collector) put(at []int, d []ratelimit.Decision, primary bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return
	}
	c.primary = c.primary && primary
	for k, i := range at {
		c.out[i] = d[k]
	}
}

// addHeld adds to the Remaining of each allotment limit of the checks
// (Hits 0) answered by the inner store the tokens this replica holds for it.
// Requests that charged hits have none held: the cold ones.
func (s *Store) addHeld(reqs []ratelimit.Request, ds []ratelimit.Decision) {
	var now time.Time
	for i, r := range reqs {
		if r.Hits != 0 {
			continue
		}
		if now.IsZero() {
			now = s.now()
		}
		for j, l := range r.Limits {
			if l.Consistency != ratelimit.Allotment || i >= len(ds) || j >= len(ds[i].Results) {
				continue
			}
			ds[i].Results[j].Remaining += s.table.held(sliceID(r.Key, l), now)
		}
	}
}
