package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/guard"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

// down is a store whose backend is gone.
type down struct{ inflight.Store }

func (down) Acquire(context.Context, string, int, time.Duration) (inflight.Slot, inflight.Result, error) {
	return "", inflight.Result{}, errors.New("connection refused")
}

// After two failures in a row the guard stops asking the backend.
func Example() {
	s, _ := guard.New(down{memstore.New(memstore.Config{})}, guard.Options{
		Registerer: prometheus.NewRegistry(), FailureThreshold: 2, CoolDown: time.Minute})
	for range 3 {
		_, _, err := s.Acquire(context.Background(), "acme|reports", 10, 30*time.Second)
		fmt.Println(errors.Is(err, inflight.ErrUnavailable), err)
	}
	// Output:
	// false connection refused
	// false connection refused
	// true inflight: store unavailable: circuit open after 2 consecutive failures, last: connection refused
}
