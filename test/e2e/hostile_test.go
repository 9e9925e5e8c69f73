package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// hostileScenarios: callers with odd identities are limited exactly like
// any other, through the real Envoy (issue 9). Before, a tenant over 1024
// bytes or not valid UTF-8 made the RLS call fail and Envoy admitted
// everything, and callers without a tenant shared one scope. Through
// front-proxy.yaml the tenant is a verified token's sub (a 2 KB one here);
// the scenarios whose identity is a raw client header run behind
// sidecar.yaml, which trusts the headers its edge sets
// (sidecarHostileScenarios, TestSidecar).
var hostileScenarios = []scenario{
	{"tenant_2kb_limited", func(t *testing.T, s *stack) {
		testTenantLimited(t, s, uniq("t2k")+strings.Repeat("k", 2048))
	}},
}

// sidecarHostileScenarios: header bytes no token can carry (not UTF-8),
// callers named only by an API key, and callers with no identity at all.
var sidecarHostileScenarios = []scenario{
	{"tenant_not_utf8_limited", func(t *testing.T, s *stack) {
		testTenantLimited(t, s, uniq("tbin")+"\xff\xfe\x80")
	}},
	{"tenant_not_utf8_own_budget", testNonUTF8OwnBudget},
	{"api_key_limited_by_rls", testAPIKeyLimited},
	{"no_identity_limited_by_address", testNoIdentityLimited},
}

// The catch-all route's (tenant, route=default) budget is 10 a minute: the
// 11th request is 429, and the upstream ran exactly 10.
func testTenantLimited(t *testing.T, s *stack, tenant string) {
	for i := 1; i <= 10; i++ {
		if r := s.do(t, tenantGet("/things", tenant)); r.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, r)
		}
	}
	if r := s.do(t, tenantGet("/things", tenant)); r.status != http.StatusTooManyRequests {
		t.Fatalf("request 11: got %s, want 429", r)
	}
	if n := s.envoyStat(t, "cluster.upstream.ratelimit.failure_mode_allowed"); n != 0 {
		t.Errorf("ratelimit failure_mode_allowed = %d: an RLS call failed and was admitted", n)
	}
}

// "\xff" and its codec spelling U+FDD0 "FF" are different tenants: spending
// one budget leaves the other whole.
func testNonUTF8OwnBudget(t *testing.T, s *stack) {
	base := uniq("tinj")
	for i := 0; i < 11; i++ {
		s.do(t, tenantGet("/things", base+"\xff"))
	}
	for i := 1; i <= 10; i++ {
		if r := s.do(t, tenantGet("/things", base+"\uFDD0FF")); r.status != http.StatusOK {
			t.Fatalf("request %d of the other spelling: got %s, want 200", i, r)
		}
	}
}

// Without a tenant, the RLS side's chain counts the API key (10 a minute in
// testdata/policy/edge.yaml): the 11th is 429.
func testAPIKeyLimited(t *testing.T, s *stack) {
	key := uniq("sk_live_")
	get := req{path: "/things", header: map[string]string{"x-api-key": key}}
	for i := 1; i <= 10; i++ {
		if r := s.do(t, get); r.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, r)
		}
	}
	if r := s.do(t, get); r.status != http.StatusTooManyRequests {
		t.Fatalf("request 11: got %s, want 429", r)
	}
}

// A caller with no identity at all is limited by its address on the
// ext_authz route "limited" (5 a minute, as a tenant is), and an
// Idempotency-Key request from it is not put in a shared scope: the e2e
// policy's chain has no client_address, so it is 401.
func testNoIdentityLimited(t *testing.T, s *stack) {
	for i := 1; i <= 5; i++ {
		if r := s.do(t, req{path: "/limited/anon"}); r.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, r)
		}
	}
	if r := s.do(t, req{path: "/limited/anon"}); r.status != http.StatusTooManyRequests {
		t.Fatalf("request 6: got %s, want 429", r)
	}
	r := s.do(t, req{method: http.MethodPost, path: "/orders/anon", body: []byte("{}"),
		header: map[string]string{"idempotency-key": `"` + uniq("k") + `"`, "content-type": "application/json"}})
	if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "identity-missing") {
		t.Fatalf("keyed POST without identity: got %s, want 401 identity-missing", r)
	}
}
