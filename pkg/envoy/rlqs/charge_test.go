package rlqs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// A policy whose tree has no tenant level: RLS takes the leading tenant
// entry out of a descriptor, and RLQS the tenant entry out of a bucket.
const tenantPolicy = `
domain: shared
descriptors:
  - key: route
    value: orders
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: fixed_window}
`

// TestReportedUsageIsOneBudgetWithRLS: what an Envoy reports admitting on a
// bucket is charged to the counter RLS decides the same descriptor on, per
// tenant; a report larger than what is left fills the counter.
func TestReportedUsageIsOneBudgetWithRLS(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shared.yaml")
	if err := os.WriteFile(path, []byte(tenantPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	current := func() *policy.Policy { return pol }
	h0 := &clock{}
	limits, err := memstore.New(memstore.Options{Now: func() time.Time { return h0.Now() }})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Options{Policy: current, Limits: limits, TenantKey: "tenant"}, nil)
	h0.now = h.clock.Now()
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.NewRLS(limits, envoy.PolicyFunc(current), m, rls.WithTenantKey("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	remaining := func(tenant string) uint32 {
		t.Helper()
		resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shared", HitsAddend: 1,
			Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
				{Key: "tenant", Value: tenant}, {Key: "route", Value: "orders"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetLimitRemaining()
	}

	c := h.open(t)
	send(t, c, "shared", usage(map[string]string{"tenant": "acme", "route": "orders"}, 25, 3))
	_ = recv(t, c)
	if got := remaining("acme"); got != 60-25-1 {
		t.Errorf("acme after an Envoy reported 25 admitted: RLS remaining %d, want %d", got, 60-25-1)
	}
	if got := remaining("globex"); got != 59 {
		t.Errorf("globex: remaining %d, want 59 (its own budget)", got)
	}
	send(t, c, "", usage(map[string]string{"tenant": "acme", "route": "orders"}, 500, 0))
	// The assignment does not change, so no answer marks the report done.
	deadline := time.Now().Add(5 * time.Second)
	for value(t, h.srv.metrics.charges.WithLabelValues(chargeSaturated)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("charges{saturated} did not reach 1 after a report past the limit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if resp := remaining("acme"); resp != 0 {
		t.Errorf("acme after a report past the limit: remaining %d, want 0 (counter filled)", resp)
	}
	if got := value(t, h.srv.metrics.charges.WithLabelValues(chargeCharged)); got != 1 {
		t.Errorf("charges{charged} = %v, want 1", got)
	}
}
