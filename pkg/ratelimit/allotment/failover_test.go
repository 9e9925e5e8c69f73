package allotment

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// downStore is a primary that always fails, as Redis does when unreachable.
type downStore struct{ ratelimit.Store }

func (downStore) AllowBatch(context.Context, []ratelimit.Request) ([]ratelimit.Decision, error) {
	return nil, errors.New("dial tcp: connection refused")
}

func (d downStore) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, d, key, l, hits)
}

func (downStore) Close() error { return nil }

// overFailover builds allotment(failover(down primary)) in mode.
func overFailover(t *testing.T, mode failover.Mode, clk *clock) *Store {
	t.Helper()
	var fallback ratelimit.Store
	if mode == failover.Open {
		m, err := memstore.New(memstore.Options{Now: clk.Now, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		fallback = m
	}
	reg := prometheus.NewRegistry()
	fs, err := failover.New(downStore{}, failover.Options{Mode: mode, Fallback: fallback, Registerer: reg, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(fs, Options{Registerer: reg, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestLeasesFollowTheFailureMode: with Redis down, open mode leases from the
// fallback (counting alone, as exact decisions then do) and says so, so the
// over-limit cache above remembers none of it; closed mode denies, and the
// denial is not remembered here either: the next request asks again.
func TestLeasesFollowTheFailureMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := allot(ratelimit.FixedWindow, 3, time.Hour)
	req := []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: 1}}

	clk := newClock()
	clk.Add(clk.Now().Truncate(time.Hour).Add(time.Hour).Sub(clk.Now()))
	open := overFailover(t, failover.Open, clk)
	admitted := 0
	for range 5 {
		d, primary, err := open.AllowBatchSource(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if primary {
			t.Error("open mode: a fallback answer reported as Redis's")
		}
		if d[0].Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("open mode admitted %d of 5, want the fallback's limit of 3", admitted)
	}

	closed := overFailover(t, failover.Closed, clk)
	for i := range 2 {
		d, primary, err := closed.AllowBatchSource(ctx, req)
		if err != nil || d[0].Allowed || primary {
			t.Errorf("closed mode call %d: %+v primary %v err %v, want a denial not from Redis", i, d, primary, err)
		}
	}
	e := closed.table.lookup(sliceID("k", l))
	e.mu.Lock()
	remembered := !e.s.deniedUntil.IsZero()
	e.mu.Unlock()
	if remembered {
		t.Error("closed mode: a denial made without Redis was remembered")
	}
}
