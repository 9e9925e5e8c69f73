package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/guard"
)

// After two failures in a row the store is not asked until the cool-down
// is over; then one probe goes through and its success closes the circuit.
func Example() {
	clock := testclock.New(time.Unix(1_700_000_000, 0))
	redis := &fake{err: errors.New("connection refused")}
	s, _ := guard.New(redis, guard.Options{
		Registerer: prometheus.NewRegistry(), FailureThreshold: 2, CoolDown: time.Second, Now: clock.Now,
	})
	begin := func() error {
		_, err := s.Begin(context.Background(), "acme", "k", fp, ttls)
		return err
	}
	fmt.Println(begin())
	fmt.Println(begin())
	err := begin()
	fmt.Println(errors.Is(err, idempotency.ErrUnavailable), redis.count())

	redis.set(nil)
	clock.Advance(time.Second)
	fmt.Println(begin(), redis.count())
	// Output:
	// connection refused
	// connection refused
	// true 2
	// <nil> 3
}
