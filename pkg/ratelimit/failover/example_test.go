package failover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// down is a primary whose backend is unreachable.
type down struct{}

func (down) Allow(context.Context, string, ratelimit.Limit, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

func (down) AllowBatch(context.Context, []ratelimit.Request) ([]ratelimit.Decision, error) {
	return nil, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

func (down) Close() error { return nil }

// In open mode a failing primary's requests are decided by the in-process
// fallback under the same limits; in closed mode they are denied.
func ExampleNew() {
	fallback, _ := memstore.New(memstore.Options{})
	limit := ratelimit.Limit{Requests: 2, Period: time.Minute}
	for _, mode := range []failover.Mode{failover.Open, failover.Closed} {
		s, err := failover.New(down{}, failover.Options{Mode: mode, Fallback: fallback, Registerer: prometheus.NewRegistry()})
		if err != nil {
			fmt.Println(err)
			return
		}
		var answers []string
		for i := 0; i < 3; i++ {
			res, _ := s.Allow(context.Background(), "tenant|api|user=1|"+string(mode), limit, 1)
			answers = append(answers, fmt.Sprint(res.Allowed))
		}
		fmt.Printf("%s: %s\n", mode, strings.Join(answers, " "))
	}
	// Output:
	// open: true true false
	// closed: false false false
}
