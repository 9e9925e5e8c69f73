package rls

import (
	"context"
	"strconv"
	"testing"

	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimit measures one call made in-process (no gRPC)
// over the memory store: translation, matching, one batch, headers.
func BenchmarkShouldRateLimit(b *testing.B) {
	s := benchRLS(b, envoytest.EdgePolicy)
	for _, n := range []int{1, 5} {
		b.Run(strconv.Itoa(n)+"-descriptors", func(b *testing.B) {
			reqs := make([]*rlsv3.RateLimitRequest, 1024)
			for i := range reqs {
				descs := make([]*commonrlv3.RateLimitDescriptor, n)
				for j := range descs {
					descs[j] = envoytest.Desc("tenant", "t"+strconv.Itoa(i), "source_cluster", "proxy",
						"destination_cluster", "mongo_"+strconv.Itoa(j))
				}
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs}
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
