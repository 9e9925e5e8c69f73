package authz

import (
	"context"
	"strconv"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/storetrace"
)

// BenchmarkShouldRateLimitTracing is BenchmarkShouldRateLimit (one
// descriptor) with tracing as cmd/extauthz wires it: the interceptor and
// the traced store over a real SDK provider whose batches are discarded.
//
//   - off: no provider, no interceptor, the bare store: the code path of
//     EXTAUTHZ_OTLP_ENDPOINT empty, which must cost what
//     BenchmarkShouldRateLimit costs;
//   - sampled: Envoy sends a sampled traceparent, two spans per call;
//   - unsampled: Envoy sends an unsampled one, so spans are not recorded.
func BenchmarkShouldRateLimitTracing(b *testing.B) {
	p := envoytest.WritePolicy(b, envoytest.EdgePolicy)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrlv3.RateLimitDescriptor{
			envoytest.Desc("tenant", "t"+strconv.Itoa(i), "source_cluster", "proxy", "destination_cluster", "mongo_1")}}
	}
	for _, c := range []struct {
		name, flags string // flags "": tracing off
	}{{"off", ""}, {"sampled", "01"}, {"unsampled", "00"}} {
		b.Run(c.name, func(b *testing.B) {
			call := tracedRLS(b, src, c.flags != "")
			ctx := context.Background()
			if c.flags != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("traceparent", "00-"+envoyTrace+"-"+envoySpan+"-"+c.flags))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := call(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// tracedRLS returns ShouldRateLimit over a memory store, behind the
// tracing interceptor and with a traced store when traced.
func tracedRLS(b *testing.B, src envoy.PolicySource, traced bool) func(context.Context, *rlsv3.RateLimitRequest) (any, error) {
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	store := envoytest.NewTestStore(b, time.Now)
	if !traced {
		s, err := rls.NewRLS(store, src, m)
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, r *rlsv3.RateLimitRequest) (any, error) { return s.ShouldRateLimit(ctx, r) }
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s, err := rls.NewRLS(storetrace.RateLimitStore(store, tp, storetrace.BackendMemory), src, m)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := envoy.NewTracing(tp, src)
	if err != nil {
		b.Fatal(err)
	}
	intercept := tr.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	handler := func(ctx context.Context, r any) (any, error) {
		return s.ShouldRateLimit(ctx, r.(*rlsv3.RateLimitRequest))
	}
	return func(ctx context.Context, r *rlsv3.RateLimitRequest) (any, error) {
		return intercept(ctx, r, info, handler)
	}
}

// discard is an exporter that drops every batch.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
