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

// kind says how a request is decided: leased (it charges hits and has an
// allotment limit), checked (Hits 0 with an allotment limit: on the inner
// store, then the tokens held here are added), or plain. One scan of the
// limits; requests without allotment limits cost nothing more.
func kind(r ratelimit.Request) (leased, checked bool) {
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
	var mine []int
	checks := false
	for i := range reqs {
		leased, checked := kind(reqs[i])
		if leased {
			mine = append(mine, i)
		}
		checks = checks || checked
	}
	if len(mine) == 0 {
		d, primary, err := s.askInner(ctx, reqs)
		if err == nil && checks {
			s.addHeld(reqs, d)
		}
		return d, primary, err
	}
	for _, i := range mine {
		if err := validate(reqs[i]); err != nil {
			return nil, false, fmt.Errorf("request %d: %w", i, err)
		}
	}
	return s.mixedBatch(ctx, reqs, mine)
}

// validate checks what the inner store would before any lease: valid
// limits, and no two sharing a state (same algorithm and period), which
// would lease from one count under two slices.
func validate(r ratelimit.Request) error {
	type slot struct {
		alg    ratelimit.Algorithm
		period time.Duration
	}
	seen := make(map[slot]bool, len(r.Limits))
	for i, l := range r.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %d: %w", i, err)
		}
		k := slot{l.Algorithm.OrDefault(), l.Period}
		if seen[k] {
			return fmt.Errorf("%w: limit %d repeats algorithm %s and period %s", ratelimit.ErrInvalidLimit, i, k.alg, l.Period)
		}
		seen[k] = true
	}
	return nil
}

// mixedBatch decides the requests in mine from slices, each on its own
// goroutine when there are several (their leases then overlap, as one
// pipelined batch would), and the others in one inner call.
func (s *Store) mixedBatch(ctx context.Context, reqs []ratelimit.Request, mine []int) ([]ratelimit.Decision, bool, error) {
	out := make([]ratelimit.Decision, len(reqs))
	var rest []ratelimit.Request
	var restAt []int
	for i, j := 0, 0; i < len(reqs); i++ {
		if j < len(mine) && mine[j] == i {
			j++
			continue
		}
		rest, restAt = append(rest, reqs[i]), append(restAt, i)
	}
	var mu sync.Mutex
	primary := true
	var firstErr error
	run := func(f func() ([]ratelimit.Decision, bool, error), at []int) {
		d, p, err := f()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		primary = primary && p
		for k, i := range at {
			out[i] = d[k]
		}
	}
	var wg sync.WaitGroup
	spawn := func(f func() ([]ratelimit.Decision, bool, error), at []int) {
		if len(mine)+min(len(rest), 1) == 1 {
			run(f, at) // one piece of work: no goroutine
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); run(f, at) }()
	}
	if len(rest) > 0 {
		spawn(func() ([]ratelimit.Decision, bool, error) {
			d, p, err := s.askInner(ctx, rest)
			if err == nil {
				s.addHeld(rest, d) // checks of allotment limits, if any
			}
			return d, p, err
		}, restAt)
	}
	for _, i := range mine {
		spawn(func() ([]ratelimit.Decision, bool, error) {
			d, p, err := s.decide(ctx, reqs[i])
			return []ratelimit.Decision{d}, p, err
		}, []int{i})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, false, firstErr
	}
	return out, primary, nil
}

// addHeld adds to the Remaining of each allotment limit answered by the
// inner store (checks) the tokens this replica holds for it.
func (s *Store) addHeld(reqs []ratelimit.Request, ds []ratelimit.Decision) {
	now := s.now()
	for i, r := range reqs {
		for j, l := range r.Limits {
			if l.Consistency != ratelimit.Allotment || i >= len(ds) || j >= len(ds[i].Results) {
				continue
			}
			ds[i].Results[j].Remaining += s.table.held(sliceID(r.Key, l), now)
		}
	}
}
