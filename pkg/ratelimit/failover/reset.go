package failover

import (
	"context"
	"errors"
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

var _ ratelimit.Resetter = (*Store)(nil)

// StateKeys names where the primary keeps each limit of r; nil when the
// primary is no Resetter.
func (s *Store) StateKeys(r ratelimit.Request) []string {
	if p, ok := s.primary.(ratelimit.Resetter); ok {
		return p.StateKeys(r)
	}
	return nil
}

// Reset resets the primary and the fallback: a state counted by the
// fallback while the primary failed is the same caller's usage, and an
// operator resetting it means both. The breakers are not consulted: an
// operator's reset is worth an attempt even while a node cools down, and
// its failure counts against no breaker.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	p, ok := s.primary.(ratelimit.Resetter)
	if !ok {
		return fmt.Errorf("primary: %w", ratelimit.ErrNotResettable)
	}
	err := p.Reset(ctx, reqs)
	if f, ok := s.fallback.(ratelimit.Resetter); ok {
		err = errors.Join(err, f.Reset(context.WithoutCancel(ctx), reqs))
	}
	return err
}
