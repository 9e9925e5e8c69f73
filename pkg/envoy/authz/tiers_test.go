package authz

import (
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// tiersPolicy: route api takes its limits from the caller's x-plan header
// (free 2/min, the default; pro 4/min), route claims from a JWT claim.
const tiersPolicy = `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  tiers:
    plans:
      attribute: {header: x-plan}
      default: free
      limits:
        free: [{requests_per_unit: 2, unit: minute, name: free}]
        pro: [{requests_per_unit: 4, unit: minute}]
    claims:
      attribute: {jwt_claim: {metadata_key: jwt_payload, claim: plan}}
      default: free
      limits:
        free: [{requests_per_unit: 1, unit: minute, name: claim-free}]
        pro: [{requests_per_unit: 3, unit: minute, name: claim-pro}]
    by-extension:
      attribute: {context_extension: plan}
      default: free
      limits:
        free: [{requests_per_unit: 1, unit: minute, name: ext-free}]
        pro: [{requests_per_unit: 2, unit: minute, name: ext-pro}]
  routes:
    - {name: api, path_prefix: /api, tier_limits: plans}
    - {name: claims, path_prefix: /claims, tier_limits: claims}
    - {name: ext, path_prefix: /ext, tier_limits: by-extension}
`

// admitted sends req n+1 times and reports how many were admitted before
// the first 429, failing if one after it is admitted; it returns the
// RateLimit-Policy of the first answer.
func admitted(t *testing.T, e *idemEnv, req *authv3.CheckRequest, n int) (int, string) {
	t.Helper()
	got, policyHeader := 0, ""
	for i := 0; i <= n; i++ {
		resp := e.check(t, req)
		if i == 0 {
			for _, h := range resp.GetOkResponse().GetResponseHeadersToAdd() {
				if h.GetHeader().GetKey() == "ratelimit-policy" {
					policyHeader = h.GetHeader().GetValue()
				}
			}
		}
		if resp.GetOkResponse() == nil {
			wantDenied(t, resp, 429, ProblemQuotaExceeded)
			continue
		}
		if got != i {
			t.Fatalf("request %d admitted after a 429", i)
		}
		got++
	}
	return got, policyHeader
}

// TestTiersChooseTheBudget: two callers on two plans get their plan's
// budget and RateLimit-Policy; a caller without a plan and one with an
// unknown plan get the default tier's, counted under the default tier
// (never the value they sent).
func TestTiersChooseTheBudget(t *testing.T) {
	e := startIdem(t, tiersPolicy)
	for _, tt := range []struct {
		name, tenant, plan string
		want               int
		policy             string
	}{
		{"free caller", "acme", "free", 2, `"free";q=2;w=60`},
		{"pro caller", "globex", "pro", 4, `"api.pro";q=4;w=60`},
		{"no plan: the default", "initech", "", 2, `"free";q=2;w=60`},
		{"unknown plan: the default", "hooli", "platinum", 2, `"free";q=2;w=60`},
		{"plans are case-sensitive", "umbrella", "PRO", 2, `"free";q=2;w=60`},
	} {
		kv := []string{"x-tenant-id", tt.tenant}
		if tt.plan != "" {
			kv = append(kv, "x-plan", tt.plan)
		}
		got, pol := admitted(t, e, checkReq("GET", "/api/x", nil, kv...), tt.want)
		if got != tt.want || pol != tt.policy {
			t.Errorf("%s: admitted %d with RateLimit-Policy %q, want %d with %q", tt.name, got, pol, tt.want, tt.policy)
		}
	}
	for _, call := range e.limits.Calls() {
		for _, r := range call {
			if strings.Contains(r.Key, "platinum") || strings.Contains(r.Key, "PRO") {
				t.Errorf("counter key %q holds a tier value that is no tier", r.Key)
			}
		}
	}
	// An upgrade takes effect at once: acme, out of its free budget, gets
	// the whole pro budget as soon as its plan says pro.
	if got, _ := admitted(t, e, checkReq("GET", "/api/x", nil, "x-tenant-id", "acme", "x-plan", "pro"), 4); got != 4 {
		t.Errorf("acme upgraded to pro: admitted %d, want 4", got)
	}
	// Each tier is its own rule in the metrics: 2 callers x 5 requests on
	// pro, 4 x 3 on free.
	for rule, want := range map[string]float64{"http.api.pro": 10, "http.api.free": 12} {
		labels := map[string]string{"api": envoy.APIExtAuthz, "rule": rule, "stat": envoy.StatTotalHits}
		if got := envoytest.CounterValue(t, e.reg, "extauthz_rule_hits_total", labels); got != want {
			t.Errorf("rule %s total_hits = %v, want %v", rule, got, want)
		}
	}
}

func planClaim(plan string) *corev3.Metadata {
	payload, _ := structpb.NewStruct(map[string]any{"plan": plan})
	outer := &structpb.Struct{Fields: map[string]*structpb.Value{"jwt_payload": structpb.NewStructValue(payload)}}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{policy.JWTAuthnNamespace: outer}}
}

// TestTiersFromAJWTClaim: the tier comes from jwt_authn's metadata as the
// identity chain's jwt_claim reads it (or from a context extension); a
// token without the claim gets the default.
func TestTiersFromAJWTClaim(t *testing.T) {
	e := startIdem(t, tiersPolicy)
	for _, tt := range []struct {
		tenant, plan string
		want         int
	}{{"a", "pro", 3}, {"b", "free", 1}, {"c", "", 1}} {
		req := checkReq("GET", "/claims", nil, "x-tenant-id", tt.tenant)
		if tt.plan != "" {
			req.Attributes.MetadataContext = planClaim(tt.plan)
		}
		if got, _ := admitted(t, e, req, tt.want); got != tt.want {
			t.Errorf("claim plan %q: admitted %d, want %d", tt.plan, got, tt.want)
		}
	}
	// The same from the route's ext_authz context_extensions.
	for _, tt := range []struct {
		tenant, plan string
		want         int
	}{{"a", "pro", 2}, {"b", "", 1}} {
		req := checkReq("GET", "/ext", nil, "x-tenant-id", tt.tenant)
		req.Attributes.ContextExtensions = map[string]string{"plan": tt.plan}
		if got, _ := admitted(t, e, req, tt.want); got != tt.want {
			t.Errorf("context extension plan %q: admitted %d, want %d", tt.plan, got, tt.want)
		}
	}
}

// TestTiersExplain: the admin explanation names the caller's tier and its
// limits, charging nothing.
func TestTiersExplain(t *testing.T) {
	clk := testclock.New(envoytest.T0)
	p := envoytest.WritePolicy(t, tiersPolicy)
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	az, err := NewAuthz(envoytest.NewTestStore(t, clk.Now), memstore.New(memstore.Config{Now: clk.Now}),
		envoy.PolicyFunc(func() *policy.Policy { return p }), m, events)
	if err != nil {
		t.Fatal(err)
	}
	for plan, want := range map[string][]string{"pro": {"pro", "api.pro"}, "gold": {"free", "free"}} {
		ex, err := az.Explain(context.Background(), HTTPRequest{Method: "GET", Path: "/api", Headers: map[string]string{"x-tenant-id": "acme", "x-plan": plan}})
		if err != nil {
			t.Fatal(err)
		}
		if ex.Tier != want[0] || len(ex.Names) != 1 || ex.Names[0] != want[1] || !ex.Allowed {
			t.Errorf("plan %q: tier %q, names %v, allowed %v; want tier %q named %q", plan, ex.Tier, ex.Names, ex.Allowed, want[0], want[1])
		}
	}
}
