package overlimit

import (
	"context"
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

var _ ratelimit.Resetter = (*Store)(nil)

// StateKeys passes through to the inner store; nil when it is no Resetter.
func (s *Store) StateKeys(r ratelimit.Request) []string {
	if in, ok := s.inner.(ratelimit.Resetter); ok {
		return in.StateKeys(r)
	}
	return nil
}

// Reset forgets the remembered denials of reqs, then resets the inner
// store: a denial remembered here would otherwise outlive the reset until
// its retry-after.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	for _, r := range reqs {
		s.cache.forget(entryIDOf(r))
	}
	in, ok := s.inner.(ratelimit.Resetter)
	if !ok {
		return fmt.Errorf("inner: %w", ratelimit.ErrNotResettable)
	}
	return in.Reset(ctx, reqs)
}
