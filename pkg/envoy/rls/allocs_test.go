package rls

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// hotPathAllocs is what one matched, allowed descriptor allocates besides
// the store's own work: its plan and store request (one), the counter key,
// the converted entries, the response with its status (one), and the
// headers' buffer, string and values.
const hotPathAllocs = 7

// TestHotPathAllocates keeps BenchmarkHotPathRLS's request within
// hotPathAllocs allocations of the store's own.
func TestHotPathAllocates(t *testing.T) {
	s := benchRLS(t, envoytest.HotPathPolicy)
	req := envoytest.Request("bench", envoytest.Desc("user", "u1"))
	_, reqs, _ := s.planAll(req)
	ctx := context.Background()
	store := testing.AllocsPerRun(100, func() { _, _ = s.store.AllowBatch(ctx, reqs) })
	all := testing.AllocsPerRun(100, func() {
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v %v", resp.GetOverallCode(), err)
		}
	})
	if got := all - store; got > hotPathAllocs {
		t.Errorf("ShouldRateLimit allocates %.0f times besides the store's %.0f, want at most %d", got, store, hotPathAllocs)
	}
}
