package envoytest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// FailingStore fails every call as a Redis client does: with the caller's
// context error, wrapped, once that context is done; else with err.
type FailingStore struct {
	ratelimit.Store
	Err error
}

// AllowBatch fails as the store was told to, or with the caller's own context error.
func (s FailingStore) AllowBatch(ctx context.Context, _ []ratelimit.Request) ([]ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return nil, s.Err
}

// StoreErrorCases are the classes of store failure every server maps the
// same way (envoy.StoreStatus): the caller's own end, else Unavailable.
var StoreErrorCases = []struct {
	Name string
	Ctx  func() (context.Context, context.CancelFunc)
	Err  error // the store's error when the caller's context is live
	Want codes.Code
}{
	{"caller cancelled", func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	}, nil, codes.Canceled},
	{"caller deadline passed", func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), time.Unix(0, 0))
	}, nil, codes.DeadlineExceeded},
	{"store failed", func() (context.Context, context.CancelFunc) {
		return context.WithCancel(context.Background())
	}, errors.New("connection refused"), codes.Unavailable},
	{"store's own timeout", func() (context.Context, context.CancelFunc) {
		return context.WithCancel(context.Background())
	}, fmt.Errorf("redis: %w", context.DeadlineExceeded), codes.Unavailable},
}
