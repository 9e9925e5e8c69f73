package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

// downWithReplicas is a failover Store over a primary that is down, whose
// fallback divides by replicas, on clk.
func downWithReplicas(t *testing.T, clk *fakeClock, replicas func() int) (*failover.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := failover.New(&flaky{down: true}, failover.Options{
		Fallback: newMem(t, clk.now), Registerer: reg, Now: clk.now, Replicas: replicas,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, reg
}

// admitted sends n one-hit requests at the clock's instant and counts the
// admitted ones.
func admitted(t *testing.T, s *failover.Store, key string, l ratelimit.Limit, n int) (int, ratelimit.Result) {
	t.Helper()
	count := 0
	var last ratelimit.Result
	for range n {
		res, err := s.Allow(context.Background(), key, l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			count++
		}
		last = res
	}
	return count, last
}

func replicas(n int) func() int { return func() int { return n } }

// TestFallbackTakesItsShare: with Redis down, each replica's fallback admits
// its share of a limit, Requests (and Burst) divided by the replicas and
// rounded down, so that the shares never add up to more than the limit;
// never less than one per window.
func TestFallbackTakesItsShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		limit    ratelimit.Limit
		replicas func() int
		want     int // admitted at one instant
	}{
		{"fixed_window by 3", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Hour}, replicas(3), 33},
		{"sliding_window by 2", ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Requests: 100, Period: time.Hour}, replicas(2), 50},
		{"sliding_log by 4", ratelimit.Limit{Algorithm: ratelimit.SlidingLog, Requests: 10, Period: time.Hour}, replicas(4), 2},
		{"gcra burst by 4", ratelimit.Limit{Requests: 10, Burst: 20, Period: time.Second}, replicas(4), 5},
		{"gcra without burst by 3", ratelimit.Limit{Requests: 10, Period: time.Second}, replicas(3), 3},
		{"fewer requests than replicas", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 2, Period: time.Hour}, replicas(5), 1},
		{"one replica", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Hour}, replicas(1), 100},
		{"no count", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Hour}, nil, 100},
		{"a count below 1", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Hour}, replicas(-2), 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// An instant at the start of an hour: one fixed window throughout.
			clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
			s, _ := downWithReplicas(t, clk, tc.replicas)
			got, last := admitted(t, s, "k", tc.limit, 200)
			if got != tc.want {
				t.Errorf("admitted %d of 200, want %d", got, tc.want)
			}
			if last.Limit != int64(tc.want) {
				t.Errorf("reported limit %d, want the share %d", last.Limit, tc.want)
			}
		})
	}
}

// TestFallbackGCRARefillsAtItsShare: a gcra share refills at the divided
// rate: 10/s over 4 replicas is 2/s (rounded down) each.
func TestFallbackGCRARefillsAtItsShare(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	s, _ := downWithReplicas(t, clk, replicas(4))
	l := ratelimit.Limit{Requests: 10, Period: time.Second}
	if got, _ := admitted(t, s, "k", l, 10); got != 2 {
		t.Fatalf("burst: admitted %d, want 2", got)
	}
	clk.add(time.Second)
	if got, _ := admitted(t, s, "k", l, 10); got != 2 {
		t.Fatalf("one second later: admitted %d, want 2 (the share's rate)", got)
	}
}

// TestFallbackShareFollowsTheCount: the count is read at each decision, so
// a replica whose count grows mid-window takes the smaller share of what is
// left (the state is the same; only the limit it is held to shrinks).
func TestFallbackShareFollowsTheCount(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	n := 1
	s, reg := downWithReplicas(t, clk, func() int { return n })
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Hour}
	if got, _ := admitted(t, s, "k", l, 10); got != 10 {
		t.Fatalf("alone: admitted %d of 10", got)
	}
	n = 4
	if got, _ := admitted(t, s, "k", l, 100); got != 15 {
		t.Fatalf("one of four: admitted %d more, want 15 (25 less the 10 counted)", got)
	}
	if got := gauge(t, reg, "extauthz_redis_fallback_replicas"); got != 4 {
		t.Errorf("extauthz_redis_fallback_replicas = %v, want 4", got)
	}
}

// gauge reads the value of an unlabelled gauge from reg; -1 when absent.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
