package authz

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// chainPolicy: API key, then tenant, then JWT sub, then principal, then the
// client address behind one trusted proxy.
const chainPolicy = `
http:
  identity:
    sources:
      - api_key_header: X-Api-Key
      - tenant_header: x-tenant-id
      - jwt_claim: {metadata_key: jwt_payload, claim: sub}
      - principal: true
      - client_address: {xff_trusted_hops: 1}
    missing_status: 400
  exempt:
    path_prefixes: [/healthz]
  routes:
    - name: limited
      path_prefix: /limited
      rate_limits: [{requests_per_unit: 2, unit: minute, name: per-caller}]
      idempotency: {}
`

const secretKey = "sk_live_SECRET"

func jwtMetadata(sub any) *corev3.Metadata {
	payload, _ := structpb.NewStruct(map[string]any{"sub": sub})
	outer := &structpb.Struct{Fields: map[string]*structpb.Value{"jwt_payload": structpb.NewStructValue(payload)}}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{policy.JWTAuthnNamespace: outer}}
}

func TestIdentityChainNamesTheCaller(t *testing.T) {
	t.Parallel()
	id := envoytest.WritePolicy(t, chainPolicy).HTTP.Identity
	hs := func(kv ...string) headerList {
		var out headerList
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, idempotency.Header{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		name string
		in   callerInput
		want string // "" none; a prefix when it ends with "*"
	}{
		{"API key first, hashed", callerInput{headers: hs("x-api-key", secretKey, "x-tenant-id", "acme")}, scopeAPIKey + "*"},
		{"tenant", callerInput{headers: hs("x-tenant-id", "acme")}, "acme"},
		{"repeated tenant headers joined as Envoy joins them", callerInput{headers: hs("x-tenant-id", "a", "x-tenant-id", "b")}, "a,b"},
		{"tenant forging a tag is escaped", callerInput{headers: hs("x-tenant-id", "~a~1.2.3.4")}, "~t~~a~1.2.3.4"},
		{"2 KB tenant", callerInput{headers: hs("x-tenant-id", strings.Repeat("t", 2048))}, strings.Repeat("t", 2048)},
		{"empty tenant is absent", callerInput{headers: hs("x-tenant-id", ""), principal: "spiffe://p"}, "~p~spiffe://p"},
		{"JWT sub", callerInput{metadata: jwtMetadata("user-1"), principal: "spiffe://p"}, "~j~user-1"},
		{"JWT numeric sub", callerInput{metadata: jwtMetadata(42.0)}, "~j~42"},
		{"JWT sub of another type is absent", callerInput{metadata: jwtMetadata(true), address: "10.0.0.1:5"}, "~a~10.0.0.1"},
		{"principal", callerInput{principal: "spiffe://cluster.local/ns/a/sa/b"}, "~p~spiffe://cluster.local/ns/a/sa/b"},
		{"XFF behind one trusted hop", callerInput{headers: hs("x-forwarded-for", "6.6.6.6, 203.0.113.7"), address: "10.0.0.1:5"}, "~a~203.0.113.7"},
		{"XFF over two header lines", callerInput{headers: hs("x-forwarded-for", "6.6.6.6", "x-forwarded-for", "203.0.113.8"), address: "10.0.0.1"}, "~a~203.0.113.8"},
		{"XFF garbage falls back to the peer", callerInput{headers: hs("x-forwarded-for", "not-an-ip"), address: "10.0.0.1:5"}, "~a~10.0.0.1"},
		{"no XFF: the peer", callerInput{address: "[2001:db8::1]:443"}, "~a~2001:db8::1"},
		{"nothing", callerInput{}, ""},
	}
	for _, tc := range tests {
		got := callerScope(id, tc.in)
		if want, prefix := strings.CutSuffix(tc.want, "*"); (prefix && !strings.HasPrefix(got, want)) || (!prefix && got != tc.want) {
			t.Errorf("%s: scope %q, want %q", tc.name, got, tc.want)
		}
		if strings.Contains(got, secretKey) {
			t.Errorf("%s: scope %q holds the API key in clear", tc.name, got)
		}
	}
	if limitScope("", callerInput{}) != scopeUnassigned || limitScope("", callerInput{address: "10.0.0.9:1"}) != "~a~10.0.0.9" {
		t.Error("limitScope: want the address, else the unassigned scope")
	}
}

// withAddress sets the peer address of a CheckRequest.
func withAddress(r *authv3.CheckRequest, ip string) *authv3.CheckRequest {
	r.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: ip}}}}
	return r
}

// TestAuthzLimitsEveryCallerSeparately: each caller the chain names, and
// each address of unnamed callers, has its own budget of 2; the API key
// never reaches a counter key in clear; an unnamed keyed request is 400.
func TestAuthzLimitsEveryCallerSeparately(t *testing.T) {
	e := startIdem(t, chainPolicy)
	callers := map[string]*authv3.CheckRequest{
		"api key":          checkReq("GET", "/limited", nil, "x-api-key", secretKey),
		"other api key":    checkReq("GET", "/limited", nil, "x-api-key", secretKey+"2"),
		"tenant":           checkReq("GET", "/limited", nil, "x-tenant-id", "acme"),
		"2 KB tenant":      checkReq("GET", "/limited", nil, "x-tenant-id", strings.Repeat("t", 2048)),
		"non-UTF-8 tenant": checkReq("GET", "/limited", nil, "x-tenant-id", "\uFDD0FF"), // as the codec decodes "\xff"
		"address 1":        withAddress(checkReq("GET", "/limited", nil), "192.0.2.1"),
		"address 2":        withAddress(checkReq("GET", "/limited", nil), "192.0.2.2"),
		"JWT user":         checkReq("GET", "/limited", nil),
	}
	callers["JWT user"].Attributes.MetadataContext = jwtMetadata("user-1")
	for round := 1; round <= 3; round++ {
		for name, req := range callers {
			r := e.check(t, req)
			if admitted := r.GetOkResponse() != nil; admitted != (round <= 2) {
				t.Errorf("round %d, %s: admitted=%v", round, name, admitted)
			}
		}
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", map[string]string{"api": envoy.APIExtAuthz, "outcome": envoy.OutcomeOverLimit}); got != float64(len(callers)) {
		t.Errorf("over_limit decisions = %v, want %d", got, len(callers))
	}
	for _, call := range e.limits.Calls() {
		for _, r := range call {
			if strings.Contains(r.Key, secretKey) {
				t.Errorf("counter key %q holds the API key in clear", r.Key)
			}
		}
	}
	// Exempt paths are not limited, even unnamed.
	for range 3 {
		if r := e.check(t, checkReq("GET", "/healthz", nil)); r.GetOkResponse() == nil {
			t.Error("/healthz limited")
		}
	}
	// An unnamed caller with an Idempotency-Key: 400 as configured.
	wantDenied(t, e.check(t, withAddress(checkReq("POST", "/limited/x", nil, "idempotency-key", `"k"`), "")), 400, ProblemIdentityMissing)
}
