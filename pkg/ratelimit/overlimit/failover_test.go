package overlimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/overlimit"
)

// switchable fails while down is set, and otherwise asks its inner store.
type switchable struct {
	ratelimit.Store
	down atomic.Bool
}

func (s *switchable) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if s.down.Load() {
		return nil, errors.New("connection refused")
	}
	return s.Store.AllowBatch(ctx, reqs)
}

// TestFallbackDenialsAreNotCached: in the production stack (overlimit over
// failover over Redis), a denial made without the primary (the per-replica
// fallback while Redis is down, or a Closed-mode denial) is not what the
// primary knows; once the primary is back it decides, not the cache.
func TestFallbackDenialsAreNotCached(t *testing.T) {
	t.Parallel()
	for _, mode := range []failover.Mode{failover.Open, failover.Closed} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
			primary := &switchable{Store: newMem(t, clk)}
			opts := failover.Options{Mode: mode, Registerer: prometheus.NewRegistry(), Now: clk.now}
			if mode == failover.Open {
				fb, err := memstore.New(memstore.Options{Now: clk.now, SweepInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				opts.Fallback = fb
			}
			fs, err := failover.New(primary, opts)
			if err != nil {
				t.Fatal(err)
			}
			s, err := overlimit.New(fs, overlimit.Options{Registerer: prometheus.NewRegistry(), Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1, Period: time.Hour}
			primary.down.Store(true)
			for range 2 { // Open: the fallback admits 1, denies the 2nd; Closed: both denied
				_, _ = s.Allow(ctx, "k", l, 1)
			}
			primary.down.Store(false)
			res, err := s.Allow(ctx, "k", l, 1)
			if err != nil || !res.Allowed {
				t.Fatalf("primary back, key never charged there: %+v, %v; want admitted by the primary", res, err)
			}
		})
	}
}
