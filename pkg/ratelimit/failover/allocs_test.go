package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

// TestHealthyDecisionAllocatesNothing: in front of a healthy Router
// primary whose one node decides the batch, the Store adds no allocation
// to the primary's own (no groups, no method value per decision).
func TestHealthyDecisionAllocatesNothing(t *testing.T) {
	p := &routedFlaky{nodes: []string{"n1"}}
	s, err := failover.New(p, failover.Options{Mode: failover.Closed,
		Registerer: prometheus.NewRegistry(), Now: (&fakeClock{t: time.Unix(1000, 0)}).now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reqs := []ratelimit.Request{{Key: "k", Hits: 1, Limits: []ratelimit.Limit{{Requests: 10, Period: time.Second}}}}
	own := testing.AllocsPerRun(100, func() { _, _ = p.AllowBatch(ctx, reqs) })
	through := testing.AllocsPerRun(100, func() {
		if _, primary, err := s.AllowBatchSource(ctx, reqs); err != nil || !primary {
			t.Fatalf("primary %v, err %v", primary, err)
		}
	})
	if through != own {
		t.Errorf("through the Store %.0f allocations, the primary's own %.0f: want the same", through, own)
	}
}
