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

// Reset drops this replica's slices of every limit of reqs, then resets
// the inner store. A lease in flight for a dropped slice installs nothing
// (a store without a ledger, such as the memory store, forgets its
// charge). Other replicas' slices are not reachable from here: they are
// used without asking the store again, so the store keeps them charged
// instead (each lease reports what its slice still holds; redisstore's
// reset.lua keeps that counted until it lapses). A reset then costs
// under-admission of at most the tokens the slices held at their last
// leases, until those lapse.
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
