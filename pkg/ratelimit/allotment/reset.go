package allotment

import (
	"context"
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// StateKeys passes through to the inner store; nil when it is no Resetter.
// Slices live under the store's own keys: leasing adds none.
func (s *Store) StateKeys(r ratelimit.Request) []string {
	if in, ok := s.inner.(ratelimit.Resetter); ok {
		return in.StateKeys(r)
	}
	return nil
}

// Reset drops this replica's slices of every limit of reqs (their tokens
// would otherwise be used after the reset, against a count that no longer
// holds them), then resets the inner store. Other replicas' slices are not
// reachable from here: they lapse by their rules, which only admits less.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	for _, r := range reqs {
		for _, l := range r.Limits {
			s.table.forget(sliceID(r.Key, l))
		}
	}
	in, ok := s.inner.(ratelimit.Resetter)
	if !ok {
		return fmt.Errorf("inner: %w", ratelimit.ErrNotResettable)
	}
	return in.Reset(ctx, reqs)
}
