package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

var allotmentScenarios = []scenario{
	{"answers_like_exact", testAllotmentLikeExact},
}

// The route allot-limited has the limit of the route limited (5 per minute
// per tenant) with consistency: allotment. Through Envoy and both replicas
// (ext_authz calls alternate between them), a tenant sees the same statuses
// and the same RateLimit fields on both routes: 5 admitted, then 429 with
// Retry-After. A limit of 5 leases one token at a time (its largest slice is
// 1), so the documented bound is 0 here: the answers must be identical. The
// replicas' allotment metrics prove the allotment layer decided every
// request of that route (from a lease, a slice, or, for a key not seen
// within the horizon, as exact: source cold), not the exact path alone.
func testAllotmentLikeExact(t *testing.T, s *stack) {
	const decided = "extauthz_ratelimit_allotment_decisions_total"
	before := s.replicaCounter(t, decided, "")
	exact, allot := uniq("tex"), uniq("tal")
	for i := 1; i <= 7; i++ {
		want := s.do(t, tenantGet("/limited/x", exact))
		got := s.do(t, tenantGet("/allot/limited/x", allot))
		if got.status != want.status {
			t.Fatalf("request %d: allotment %s, exact %s", i, got, want)
		}
		for _, h := range []string{"RateLimit-Policy", "RateLimit"} {
			if g, w := fields(got.header.Get(h)), fields(want.header.Get(h)); g != w || g == "" {
				t.Errorf("request %d: %s allotment %q, exact %q", i, h, got.header.Get(h), want.header.Get(h))
			}
		}
		if got.status == http.StatusTooManyRequests {
			if ra, err := strconv.Atoi(got.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Errorf("request %d: Retry-After %q, want 1..60 seconds", i, got.header.Get("Retry-After"))
			}
		}
	}
	if n := s.up.Executions(allot, ""); n != 5 {
		t.Errorf("upstream executed %d allotment requests, want 5", n)
	}
	after := s.replicaCounter(t, decided, "")
	n := 0.0
	for i := range after {
		n += after[i] - before[i]
	}
	// At least the 5 admitted: a refusal the over-limit cache above
	// remembers answers the next request before it reaches allotment.
	if n < 5 {
		t.Errorf("replicas' allotment layers decided %v requests, want at least the 5 admitted (was the limit decided exactly?)", n)
	}
}

// fields returns a RateLimit or RateLimit-Policy item without its name (the
// route's, which differs) and its t= (seconds to reset, which may differ by
// one between two routes asked a few milliseconds apart).
func fields(v string) string {
	var keep []string
	for i, p := range strings.Split(v, ";") {
		if i > 0 && !strings.HasPrefix(strings.TrimSpace(p), "t=") {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, ";")
}
