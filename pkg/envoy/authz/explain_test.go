package authz

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

// TestExplainChargesNothingAndForetellsTheAnswer: Explain names the route,
// the identity and its source, the limits' state and the answer, charges
// nothing, and agrees with Check up to and past exhaustion.
func TestExplainChargesNothingAndForetellsTheAnswer(t *testing.T) {
	t.Parallel()
	clk := testclock.New(envoytest.T0)
	p := envoytest.WritePolicy(t, idemPolicy)
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
	ctx := context.Background()
	req := checkReq("GET", "/limited/x", nil, "x-tenant-id", "acme")
	hr := HTTPRequest{Method: "GET", Path: "/limited/x", Headers: map[string]string{"X-Tenant-Id": "acme"}, SourceAddress: "10.0.0.7:5555"}
	for call := range 3 {
		var ex Explanation
		for range 2 { // twice: the first must have charged nothing
			if ex, err = az.Explain(ctx, hr); err != nil {
				t.Fatal(err)
			}
		}
		if ex.Route == nil || ex.Route.Name != "limited" || ex.Identity != "acme" || ex.Source != policy.IdentityTenantHeader {
			t.Fatalf("route %v identity %q source %q", ex.Route, ex.Identity, ex.Source)
		}
		if ex.Request == nil || ex.Request.Key != "acme|http|route=limited" || ex.Results[0].Remaining != int64(max(2-call, 0)) {
			t.Fatalf("call %d: request %+v results %+v", call, ex.Request, ex.Results)
		}
		resp, err := az.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if admitted := resp.GetOkResponse() != nil; admitted != ex.Allowed {
			t.Fatalf("call %d: Explain said allowed=%v, Check admitted=%v", call, ex.Allowed, admitted)
		}
	}
	ex, err := az.Explain(ctx, HTTPRequest{Method: "POST", Path: "/orders/1", Headers: map[string]string{"x-tenant-id": "acme"}})
	if err != nil || ex.Route.Name != "orders" || ex.RecordScope != "acme" || ex.Request != nil {
		t.Fatalf("orders: %+v, %v", ex, err)
	}
	if ex, _ := az.Explain(ctx, HTTPRequest{Method: "GET", Path: "/limited/health"}); !ex.Exempt || ex.Request != nil {
		t.Fatalf("exempt path: %+v", ex)
	}
	if ex, _ := az.Explain(ctx, HTTPRequest{Method: "GET", Path: "/nowhere"}); ex.Route != nil {
		t.Fatalf("no route: %+v", ex)
	}
	// Without an identity source present, the limits fall back to the
	// client address, as Check's do.
	ex, err = az.Explain(ctx, HTTPRequest{Method: "GET", Path: "/limited/x", SourceAddress: "[2001:db8::7]:443"})
	if err != nil || ex.Identity != "" || ex.Request == nil || ex.Request.Key != ratelimit.Key("~a~2001:db8::7", "http", []ratelimit.Entry{{Key: "route", Value: "limited"}}) {
		t.Fatalf("anonymous: %+v, %v", ex, err)
	}
}

// TestExplainInFlight: on a max_in_flight route Explain counts the
// caller's slots without taking one and foretells Check's answer: admit
// while a slot is free, 429 when all are held, admit again after a
// release; another caller's slots are its own.
func TestExplainInFlight(t *testing.T) {
	t.Parallel()
	clk := testclock.New(envoytest.T0)
	p := envoytest.WritePolicy(t, inFlightPolicy)
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	slots := inflightmem.New(inflightmem.Config{Now: clk.Now})
	az, err := NewAuthz(envoytest.NewTestStore(t, clk.Now), memstore.New(memstore.Config{Now: clk.Now}),
		envoy.PolicyFunc(func() *policy.Policy { return p }), m, events, WithInFlight(slots))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	explain := func(tenant string, wantHeld int) Explanation {
		t.Helper()
		var ex Explanation
		for range 2 { // twice: the first must have taken nothing
			if ex, err = az.Explain(ctx, HTTPRequest{Method: "GET", Path: "/reports/q", Headers: map[string]string{"x-tenant-id": tenant}}); err != nil {
				t.Fatal(err)
			}
		}
		st := ex.InFlight
		if st == nil || st.Limit != 2 || st.TTL != 9*time.Second || st.Key != inFlightKey(tenant, ex.Route) || st.Held.Slots != wantHeld {
			t.Fatalf("%s: in-flight %+v, want %d of 2 slots held, ttl 9s", tenant, st, wantHeld)
		}
		if ex.Allowed != (wantHeld < 2) {
			t.Fatalf("%s: allowed %v with %d of 2 held", tenant, ex.Allowed, wantHeld)
		}
		return ex
	}
	var taken []*slotHold
	for held := range 3 {
		explain("acme", min(held, 2))
		resp, err := az.Check(ctx, checkReq("GET", "/reports/q", nil, "x-tenant-id", "acme"))
		if err != nil {
			t.Fatal(err)
		}
		if admitted := resp.GetOkResponse() != nil; admitted != (held < 2) {
			t.Fatalf("Check %d admitted=%v", held, admitted)
		}
		if h, ok := slotFrom(&corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: resp.GetDynamicMetadata()}}); ok && h != nil {
			taken = append(taken, h)
		}
	}
	if ex := explain("acme", 2); ex.InFlight.Held.NextExpiry != 9*time.Second {
		t.Errorf("next expiry %v, want 9s (no time passed)", ex.InFlight.Held.NextExpiry)
	}
	explain("globex", 0)
	if _, err := slots.Release(ctx, taken[0].key, taken[0].slot); err != nil {
		t.Fatal(err)
	}
	explain("acme", 1)
	if ex, err := az.Explain(ctx, HTTPRequest{Method: "GET", Path: "/elsewhere"}); err != nil || ex.InFlight != nil {
		t.Errorf("no max_in_flight route: %+v, %v", ex.InFlight, err)
	}
}
