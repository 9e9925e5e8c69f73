package envoy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// decideStore is an in-test Store over ratelimit.Decide (the memory store's
// algorithms), on an injected clock.
type decideStore struct {
	mu     sync.Mutex
	now    func() time.Time
	states map[string]ratelimit.State
}

func newTestStore(t *testing.T, now func() time.Time) ratelimit.Store {
	t.Helper()
	return &decideStore{now: now, states: map[string]ratelimit.State{}}
}

func (s *decideStore) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	d, err := s.AllowBatch(ctx, []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: hits}})
	if err != nil {
		return ratelimit.Result{}, err
	}
	return d[0].Results[0], nil
}

func (s *decideStore) AllowBatch(_ context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	out := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		d := ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(r.Limits))}
		next := make([]ratelimit.State, len(r.Limits))
		for j, l := range r.Limits {
			res, st, err := ratelimit.Decide(l, now, s.states[stateKey(r.Key, l)], r.Hits)
			if err != nil {
				return nil, err
			}
			d.Results[j], next[j] = res, st
			d.Allowed = d.Allowed && res.Allowed
		}
		if d.Allowed && r.Hits > 0 {
			for j, l := range r.Limits {
				s.states[stateKey(r.Key, l)] = next[j]
			}
		}
		out[i] = d
	}
	return out, nil
}

func stateKey(key string, l ratelimit.Limit) string {
	return fmt.Sprintf("%s/%s/%d", key, l.Algorithm.OrDefault(), l.Period)
}

func (s *decideStore) Close() error { return nil }
