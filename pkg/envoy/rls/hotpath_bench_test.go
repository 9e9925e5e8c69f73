package rls

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/policy"
)

// BenchmarkHotPathRLS is one matched, allowed descriptor per call, in
// process over the memory store: what each RLS decision costs besides
// gRPC and the store's own work.
func BenchmarkHotPathRLS(b *testing.B) {
	s := benchRLS(b, envoytest.HotPathPolicy)
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = envoytest.Request("bench", envoytest.Desc("user", "u"+strconv.Itoa(i)))
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		resp, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp.GetOverallCode(), err)
		}
		i++
	}
}

// benchRLS is an RLS over the memory store under policy yaml.
func benchRLS(b testing.TB, yaml string) *RLS {
	b.Helper()
	p := envoytest.WritePolicy(b, yaml)
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewRLS(envoytest.NewTestStore(b, time.Now), envoy.PolicyFunc(func() *policy.Policy { return p }), m)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
