package envoy

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// StoreStatus maps a failed store call to the gRPC status a server answers
// with, the one mapping every server here uses: when the caller's own
// context is done (Envoy gave up, or its deadline passed), its Canceled or
// DeadlineExceeded, since the store failing then says nothing about the
// store; anything else Unavailable, on which Envoy applies the filter's
// failure mode. A store's own timeout, under a live caller context, is a
// store failure.
func StoreStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rate-limit store: %v", err)
}
