package envoy

import (
	"context"
	"strconv"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// hotPathPolicy is the shape of bench/peer.sh's load: one descriptor (or
// one HTTP route) with a limit that is never reached, per key.
const hotPathPolicy = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: fixed_window}
http:
  tenant: {header: x-tenant-id}
  routes:
    - name: api
      path_prefix: /
      rate_limits: [{requests_per_unit: 1000000000, unit: second, algorithm: fixed_window}]
`

// BenchmarkHotPathRLS is one matched, allowed descriptor per call, in
// process over the memory store: what each RLS decision costs besides
// gRPC and the store's own work.
func BenchmarkHotPathRLS(b *testing.B) {
	s := benchRLS(b, hotPathPolicy)
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = request("bench", desc("user", "u"+strconv.Itoa(i)))
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

// BenchmarkHotPathCheck is one ext_authz Check on a route with one limit,
// per tenant, allowed, in process over the memory store.
func BenchmarkHotPathCheck(b *testing.B) {
	p := writePolicy(b, hotPathPolicy)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ev, err := NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	az, err := NewAuthz(newTestStore(b, time.Now), memstore.New(memstore.Config{}), PolicyFunc(func() *policy.Policy { return p }), m, ev)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*authv3.CheckRequest, 1024)
	for i := range reqs {
		reqs[i] = checkReq("GET", "/items/1", nil, "x-tenant-id", "t"+strconv.Itoa(i), ":authority", "api.example", "user-agent", "bench")
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		resp, err := az.Check(ctx, reqs[i%len(reqs)])
		if err != nil || resp.GetOkResponse() == nil {
			b.Fatalf("%v %v", resp, err)
		}
		i++
	}
}

// benchRLS is an RLS over the memory store under policy yaml.
func benchRLS(b *testing.B, yaml string) *RLS {
	b.Helper()
	p := writePolicy(b, yaml)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewRLS(newTestStore(b, time.Now), PolicyFunc(func() *policy.Policy { return p }), m)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
