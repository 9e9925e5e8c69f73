package authz

import (
	"context"
	"strconv"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// BenchmarkHotPathCheck is one ext_authz Check on a route with one limit,
// per tenant, allowed, in process over the memory store.
func BenchmarkHotPathCheck(b *testing.B) {
	p := envoytest.WritePolicy(b, envoytest.HotPathPolicy)
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ev, err := NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	az, err := NewAuthz(envoytest.NewTestStore(b, time.Now), memstore.New(memstore.Config{}), envoy.PolicyFunc(func() *policy.Policy { return p }), m, ev)
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
