package rls_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

func ExampleRLS_ShouldRateLimit() {
	dir, _ := os.MkdirTemp("", "policy")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "api.yaml")
	_ = os.WriteFile(path, []byte(`
domain: api
descriptors:
  - key: route
    rate_limit: {name: per-route, unit: minute, requests_per_unit: 2, algorithm: fixed_window}
`), 0o600)
	pol, err := policy.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) // a fixed clock: 30 s left in the minute
	store, _ := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	defer store.Close()
	metrics, _ := envoy.NewMetrics(prometheus.NewRegistry())
	rls, _ := rls.NewRLS(store, envoy.PolicyFunc(func() *policy.Policy { return pol }), metrics)

	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "/orders"}},
	}}}
	for range 3 {
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Print(resp.GetOverallCode())
		for _, h := range resp.GetResponseHeadersToAdd() {
			fmt.Printf(" | %s: %s", h.GetKey(), h.GetValue())
		}
		fmt.Println()
	}
	// Output:
	// OK | ratelimit-policy: "per-route";q=2;w=60 | ratelimit: "per-route";r=1;t=30
	// OK | ratelimit-policy: "per-route";q=2;w=60 | ratelimit: "per-route";r=0;t=30
	// OVER_LIMIT | ratelimit-policy: "per-route";q=2;w=60 | ratelimit: "per-route";r=0;t=30 | retry-after: 30
}
