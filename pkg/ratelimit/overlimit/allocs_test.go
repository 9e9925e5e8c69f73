package overlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestAdmittedDecisionAllocatesNothing: a one-limit request the cache
// does not cover costs no allocation besides the inner store's: its entry
// ID is a value and the inner store's decisions are returned as they are.
func TestAdmittedDecisionAllocatesNothing(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	ctx := context.Background()
	reqs := []ratelimit.Request{{Key: "tenant|api|user=1", Hits: 1,
		Limits: []ratelimit.Limit{{Algorithm: ratelimit.FixedWindow, Requests: 1_000_000_000, Period: time.Hour}}}}
	own := testing.AllocsPerRun(100, func() { _, _ = inner.AllowBatch(ctx, reqs) })
	through := testing.AllocsPerRun(100, func() {
		if d, err := s.AllowBatch(ctx, reqs); err != nil || !d[0].Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	})
	// Exact under the race detector too (CI's build): the batch's list of
	// requests to send on lives in an array on the stack, so no build
	// needs an allowance that would hide a new allocation.
	if through > own {
		t.Errorf("through the cache %.0f allocations, the inner store's own %.0f: want at most %.0f", through, own, own)
	}
}
