package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

// hung is a primary that never answers: it returns only when its caller's
// context ends, like a go-redis call stuck waiting for a pool connection.
type hung struct{ flaky }

func (h *hung) AllowBatch(ctx context.Context, _ []ratelimit.Request) ([]ratelimit.Decision, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A primary that hangs must not hold the call past CallTimeout: the failure
// mode answers instead, even though the caller set no deadline.
func TestCallTimeoutBoundsAHangingPrimary(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, err := failover.New(&hung{}, failover.Options{
		Fallback: newMem(t, time.Now), Registerer: reg, CallTimeout: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan ratelimit.Result, 1)
	go func() {
		res, err := s.Allow(context.Background(), "k", oneMinute, 1)
		if err != nil {
			t.Errorf("Allow: %v", err)
		}
		done <- res
	}()
	select {
	case res := <-done:
		if !res.Allowed || res.Remaining != oneMinute.Requests-1 {
			t.Errorf("got %+v, want the fallback's first admission", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Allow still blocked on a hung primary: CallTimeout not applied")
	}
	if n := fallbacks(t, reg); n != 1 {
		t.Errorf("fallback decisions = %v, want 1", n)
	}
}

// fallbacks sums extauthz_redis_fallback_decisions_total over its labels.
func fallbacks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "extauthz_redis_fallback_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
