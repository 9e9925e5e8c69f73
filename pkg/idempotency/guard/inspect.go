package guard

import (
	"context"
	"errors"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

var _ idempotency.Inspector = (*Store)(nil)

// errNoInspector means the guarded store cannot be inspected.
var errNoInspector = errors.New("idempotency guard: the inner store cannot be inspected")

// Inspect passes through to the inner store. The breaker is not consulted
// nor fed: an operator's look is worth a try while it is open, and its
// failures say nothing the request path has not said already.
func (s *Store) Inspect(ctx context.Context, scope, key string) (idempotency.Record, bool, error) {
	in, ok := s.inner.(idempotency.Inspector)
	if !ok {
		return idempotency.Record{}, false, errNoInspector
	}
	return in.Inspect(ctx, scope, key)
}

// Delete passes through to the inner store, as Inspect.
func (s *Store) Delete(ctx context.Context, scope, key string, force bool) (idempotency.Record, bool, error) {
	in, ok := s.inner.(idempotency.Inspector)
	if !ok {
		return idempotency.Record{}, false, errNoInspector
	}
	return in.Delete(ctx, scope, key, force)
}
