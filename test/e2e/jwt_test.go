package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jwtScenarios: envoy/front-proxy.yaml's jwt_authn filter names the caller
// (issue 19). The tokens are signed by testIDP; Envoy verifies them with the
// shipped issuer, audience and rules, the key set replaced by testIDP's.
var jwtScenarios = []scenario{
	{"sub_is_the_tenant_rls_and_ext_authz", testSubIsTheTenant},
	{"rejected_tokens_charge_nothing", testRejectedTokensChargeNothing},
	{"forged_tenant_header_changes_nothing", testForgedTenantHeader},
	{"health_needs_no_token", testHealthNeedsNoToken},
	{"tiers_ext_authz", testTiersExtAuthz},
	{"tiers_rls", testTiersRLS},
}

// authGet is a GET carrying only a token (no x-tenant-id of the client's).
func authGet(path, authorization string) req {
	return req{path: path, header: map[string]string{"authorization": authorization}}
}

// admits sends n requests expecting 200, then one expecting 429.
func admits(t *testing.T, s *stack, what string, r req, n int) reply {
	t.Helper()
	for i := 1; i <= n; i++ {
		if got := s.do(t, r); got.status != http.StatusOK {
			t.Fatalf("%s: request %d: got %s, want 200", what, i, got)
		}
	}
	last := s.do(t, r)
	if last.status != http.StatusTooManyRequests {
		t.Fatalf("%s: request %d: got %s, want 429", what, n+1, last)
	}
	return last
}

// A token's sub is the tenant for both servers: through the RLS (catch-all
// route, 10 a minute per tenant) and through ext_authz (route "limited", 5
// a minute), two subs have two budgets, and the upstream sees x-tenant-id
// set by Envoy from the sub.
func testSubIsTheTenant(t *testing.T, s *stack) {
	a, b := uniq("jwta"), uniq("jwtb")
	admits(t, s, "sub A, RLS", authGet("/things", bearer(a, nil)), 10)
	admits(t, s, "sub B, RLS", authGet("/things", bearer(b, nil)), 10)
	if na, nb := s.up.Executions(a, ""), s.up.Executions(b, ""); na != 10 || nb != 10 {
		t.Errorf("upstream saw x-tenant-id %s %d times and %s %d times, want 10 each", a, na, b, nb)
	}
	c, d := uniq("jwtc"), uniq("jwtd")
	admits(t, s, "sub C, ext_authz", authGet("/limited/x", bearer(c, nil)), 5)
	last := admits(t, s, "sub D, ext_authz", authGet("/limited/x", bearer(d, nil)), 5)
	wantField(t, last, "RateLimit-Policy", "q=5;w=60")
}

// Expired, not yet valid, wrongly signed, foreign-issuer, malformed and
// missing tokens are Envoy's 401 (a token for another audience its 403,
// measured in 1.40) before any filter behind jwt_authn runs: afterwards the
// tenant's whole budget is still there, in both servers, and the upstream
// never saw the tenant.
func testRejectedTokensChargeNothing(t *testing.T, s *stack) {
	tenant := uniq("jwtx")
	hour := time.Hour
	rejected := map[string]struct {
		r      req
		status int
	}{
		"expired": {authGet("/limited/x", bearer(tenant, map[string]any{
			"iat": time.Now().Add(-2 * hour).Unix(), "exp": time.Now().Add(-hour).Unix()})), 401},
		"not_yet_valid":  {authGet("/limited/x", bearer(tenant, map[string]any{"nbf": time.Now().Add(hour).Unix()})), 401},
		"wrongly_signed": {authGet("/limited/x", sign(testIDP.stranger, claims(tenant, nil))), 401},
		"other_issuer":   {authGet("/limited/x", bearer(tenant, map[string]any{"iss": "https://evil.example.com/"})), 401},
		"not_a_jwt":      {authGet("/limited/x", "Bearer "+strings.Repeat("x", 40)), 401},
		"missing":        {req{path: "/limited/x", header: map[string]string{"x-tenant-id": tenant}, noToken: true}, 401},
		"other_audience": {authGet("/limited/x", bearer(tenant, map[string]any{"aud": "other.example.com"})), 403},
	}
	before := s.envoyStat(t, "http.ingress.jwt_authn.denied")
	for name, c := range rejected {
		got := s.do(t, c.r)
		if got.status != c.status || !strings.HasPrefix(got.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s token: got %s, want %d with WWW-Authenticate: Bearer", name, got, c.status)
		}
		if got.header.Get("RateLimit-Policy") != "" {
			t.Errorf("%s token: the 401 carries RateLimit-Policy %q: a limiter saw it", name, got.header.Get("RateLimit-Policy"))
		}
	}
	if n := s.envoyStat(t, "http.ingress.jwt_authn.denied") - before; n < len(rejected) {
		t.Errorf("jwt_authn denied %d requests, want at least %d", n, len(rejected))
	}
	if n := s.up.Executions(tenant, ""); n != 0 {
		t.Fatalf("upstream saw the tenant %d times, want 0", n)
	}
	// ext_authz's 5 a minute is whole: 5 pass, the 6th is its 429 (the RLS
	// charged those 6). The RLS's 10 a minute then has exactly 4 left.
	valid := bearer(tenant, nil)
	admits(t, s, "ext_authz budget after the 401s", authGet("/limited/x", valid), 5)
	admits(t, s, "RLS budget after the 401s", authGet("/things", valid), 4)
	if n := s.up.Executions(tenant, ""); n != 9 {
		t.Errorf("upstream executed %d requests of the tenant, want 9", n)
	}
}

// A client's own x-tenant-id next to a valid token changes nothing: the
// upstream sees the token's sub, the sub's budget is charged, and the
// tenant named in the forged header keeps its own whole budget. A token
// without a sub does not let the header through either.
func testForgedTenantHeader(t *testing.T, s *stack) {
	caller, victim := uniq("jwtme"), uniq("jwtvictim")
	forged := req{path: "/limited/x", header: map[string]string{"authorization": bearer(caller, nil), "x-tenant-id": victim}}
	admits(t, s, "forged header, ext_authz", forged, 5)
	if nc, nv := s.up.Executions(caller, ""), s.up.Executions(victim, ""); nc != 5 || nv != 0 {
		t.Errorf("upstream saw the caller %d times and the forged tenant %d times, want 5 and 0", nc, nv)
	}
	// The caller's RLS budget holds the 6 requests above (the 429 too).
	forged.path = "/things"
	admits(t, s, "forged header, RLS", forged, 4)
	admits(t, s, "the forged tenant's own token", authGet("/limited/x", bearer(victim, nil)), 5)

	noSub := req{path: "/things", header: map[string]string{"authorization": bearer("", nil), "x-tenant-id": victim}}
	if r := s.do(t, noSub); r.status != http.StatusOK {
		t.Fatalf("token without sub: got %s, want 200", r)
	}
	if n := s.up.Executions(victim, ""); n != 5 {
		t.Errorf("upstream saw the forged tenant %d times, want only its own 5", n)
	}
}

// Probes need no token; every other path does.
func testHealthNeedsNoToken(t *testing.T, s *stack) {
	if r := s.do(t, req{path: "/healthz"}); r.status != http.StatusOK {
		t.Fatalf("/healthz without a token: got %s, want 200", r)
	}
	if r := s.do(t, req{path: "/healthz/../things"}); r.status != http.StatusUnauthorized {
		t.Fatalf("/healthz/../things without a token: got %s, want 401", r)
	}
}

// ext_authz's tier_limits (testdata/policy/http.yaml, route "tiered"): the
// plan is the token's `plan` claim, read from jwt_authn's metadata. pro
// gets 4 a minute, free 2; no plan and an unlisted plan get the default
// (free); each caller its own budget.
func testTiersExtAuthz(t *testing.T, s *stack) {
	cases := []struct {
		name, plan string
		budget     int
		policy     string
	}{
		{"pro", "pro", 4, `"tiered-pro";q=4;w=60`},
		{"free", "free", 2, `"tiered-free";q=2;w=60`},
		{"no plan", "", 2, `"tiered-free";q=2;w=60`},
		{"unlisted plan", "platinum", 2, `"tiered-free";q=2;w=60`},
	}
	for _, c := range cases {
		extra := map[string]any{"plan": c.plan}
		if c.plan == "" {
			extra = nil
		}
		last := admits(t, s, "plan "+c.name, authGet("/tiered/x", bearer(uniq("tier"), extra)), c.budget)
		wantField(t, last, "RateLimit-Policy", c.policy)
	}
	// A forged x-plan header is no plan: the claim decides.
	forged := req{path: "/tiered/x", header: map[string]string{"authorization": bearer(uniq("tier"), nil), "x-plan": "pro"}}
	admits(t, s, "forged x-plan header", forged, 2)
}

// The RLS's plan descriptors (testdata/policy/edge.yaml, front-proxy.yaml's
// /reports route): pro gets 4 a minute per tenant, free 2; a token without
// a plan is sent as free (the metadata action's default_value).
func testTiersRLS(t *testing.T, s *stack) {
	cases := []struct {
		name, plan string
		budget     int
	}{
		{"pro", "pro", 4},
		{"free", "free", 2},
		{"no plan", "", 2},
	}
	for _, c := range cases {
		extra := map[string]any{"plan": c.plan}
		if c.plan == "" {
			extra = nil
		}
		last := admits(t, s, "plan "+c.name, authGet("/reports/q1", bearer(uniq("rlstier"), extra)), c.budget)
		wantField(t, last, "RateLimit-Policy", "q="+strconv.Itoa(c.budget)+";w=60")
	}
}
