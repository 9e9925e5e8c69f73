package failover_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// down stands for a Redis lockout store that cannot be reached.
type down struct{ lockout.Store }

func (down) Locked(context.Context, string) (time.Duration, error) {
	return 0, errors.New("dial tcp: connection refused")
}

func (down) Trip(context.Context, string, lockout.Policy) (time.Duration, int64, error) {
	return 0, 0, errors.New("dial tcp: connection refused")
}

// In open mode (the default) a memory store decides while Redis fails: a
// key that trips meanwhile is locked on this replica.
func Example() {
	s, err := failover.New(down{}, failover.Options{
		Fallback:     memstore.New(memstore.Config{}),
		StoreOptions: breaker.StoreOptions{Registerer: prometheus.NewRegistry()},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	p := lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}
	d, n, err := s.Trip(ctx, "login|198.51.100.7", p)
	fmt.Println(d, n, err)
	left, err := s.Locked(ctx, "login|198.51.100.7")
	fmt.Println(left > 59*time.Second, err)
	// Output:
	// 1m0s 1 <nil>
	// true <nil>
}
