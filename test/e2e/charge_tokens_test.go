package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// llmGet is a request to front-proxy.yaml's /llm route whose reply costs
// cost tokens, reported where in says (header, json or sse).
func llmGet(path, tenant string, cost int, in string) req {
	return req{path: path, header: map[string]string{
		"x-tenant-id": tenant, upstream.HeaderUsage: strconv.Itoa(cost), upstream.HeaderUsageIn: in,
	}}
}

// spendTokens sends requests costing 300 until one is refused and returns
// how many were admitted (at most 10).
func spendTokens(t *testing.T, s *stack, r req) int {
	t.Helper()
	for i := 0; i < 10; i++ {
		rep := s.do(t, r)
		switch rep.status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			return i
		default:
			t.Fatalf("request %d: got %s, want 200 or 429", i+1, rep)
		}
	}
	return 10
}

// A budget of 1000 tokens a minute (the free plan of testdata's "tokens"
// tier set), replies costing 300 in their JSON body: four are admitted (the
// fourth while 100 are left, overshooting to 1200), the fifth is refused,
// and the refusal lasts until the overshoot has decayed (gcra: 12s after
// 1200 of 1000, not at once, which would mean the 200 over were dropped).
func testTokensJSON(t *testing.T, s *stack) {
	tenant := uniq("tjson")
	if n := spendTokens(t, s, llmGet("/llm/chat", tenant, 300, "json")); n != 4 {
		t.Fatalf("admitted %d replies of 300 on a budget of 1000, want 4", n)
	}
	rep := s.do(t, llmGet("/llm/chat", tenant, 300, "json"))
	ra, err := strconv.Atoi(rep.header.Get("Retry-After"))
	if rep.status != http.StatusTooManyRequests || err != nil || ra < 5 || ra > 13 {
		t.Errorf("after 1200 of 1000: got %d Retry-After %q, want 429 and about 12s", rep.status, rep.header.Get("Retry-After"))
	}
	if n := s.up.Executions(tenant, ""); n != 4 {
		t.Errorf("upstream executed %d requests, want 4", n)
	}
}

// The same budget charged from a response header (testdata's llm-header
// route, a cost limit of its own).
func testTokensHeader(t *testing.T, s *stack) {
	if n := spendTokens(t, s, llmGet("/llm/header", uniq("thdr"), 300, "header")); n != 4 {
		t.Fatalf("admitted %d replies of 300 on a budget of 1000, want 4", n)
	}
}

// A streamed reply (text/event-stream) is charged from its last JSON event
// (the usage before "data: [DONE]"), and reaches the client whole.
func testTokensStreamed(t *testing.T, s *stack) {
	tenant := uniq("tsse")
	r := llmGet("/llm/chat", tenant, 300, "sse")
	for i := 1; i <= 4; i++ {
		rep := s.do(t, r)
		if rep.status != http.StatusOK || !strings.HasSuffix(string(rep.body), "data: [DONE]\n\n") ||
			!strings.Contains(string(rep.body), `"total_tokens":300`) {
			t.Fatalf("streamed reply %d: got %s, want 200 with every event", i, rep)
		}
	}
	if rep := s.do(t, r); rep.status != http.StatusTooManyRequests {
		t.Fatalf("after four streamed replies of 300: got %s, want 429", rep)
	}
}

// Requests running at once overshoot by at most one reservation plus what
// each costs above its reservation (docs/policy.md#overshoot): with 100 of
// 1000 left, 6 requests held at the upstream were all admitted (each
// reserves one token with its check: this route has no reserve) and each
// charged the rest of its 300 at its end: 2700 spent, an overshoot of 1700
// within the bound of 1 + 6 x 299. All of it is charged: the refusal lasts as long as 2700 of 1000
// takes to decay (gcra: about 102s).
func testTokensConcurrentOvershoot(t *testing.T, s *stack) {
	tenant := uniq("tconc")
	for i := 1; i <= 3; i++ {
		if rep := s.do(t, llmGet("/llm/chat", tenant, 300, "json")); rep.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, rep)
		}
	}
	const inFlight = 6
	hold := uniq("hold")
	var calls []*call
	for i := 0; i < inFlight; i++ {
		r := llmGet("/llm/chat", tenant, 300, "json")
		r.header[upstream.HeaderHold] = hold
		calls = append(calls, s.start(t, r))
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.up.Running(tenant) < inFlight {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the upstream with 100 tokens left, want all", s.up.Running(tenant), inFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.up.Release(hold)
	for i, c := range calls {
		<-c.done
		if c.err != nil || c.rep.status != http.StatusOK {
			t.Fatalf("held request %d: %v %v, want 200", i, c.err, c.rep)
		}
	}
	rep := s.do(t, llmGet("/llm/chat", tenant, 300, "json"))
	ra, err := strconv.Atoi(rep.header.Get("Retry-After"))
	if rep.status != http.StatusTooManyRequests || err != nil || ra < 90 || ra > 103 {
		t.Errorf("after 2700 of 1000: got %d Retry-After %q, want 429 and about 102s", rep.status, rep.header.Get("Retry-After"))
	}
}

// Two replicas share the budgets exactly (one Redis): Envoy spreads the
// checks (ext_authz) and the charges (ext_proc) over both, and still each
// of three tenants gets exactly six replies of 190 on a budget of 1000 (the
// sixth with 50 left, overshooting to 1140: 8s of refusals at the gcra
// rate, far longer than the test), whichever replica checks and whichever
// charges. Eighteen charges leave each replica some unless Envoy's round
// robin sent every one to one side.
func testTokensReplicasShare(t *testing.T, s *stack) {
	checks, charges := s.replicaDecisions(t, "ext_authz"), s.replicaCounter(t, "extauthz_charges_total", `route="llm"`)
	for range 3 {
		tenant := uniq("trep")
		admitted, refused := 0, 0
		for refused < 3 {
			switch rep := s.do(t, llmGet("/llm/chat", tenant, 190, "json")); rep.status {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				refused++
			default:
				t.Fatalf("got %s, want 200 or 429", rep)
			}
			if admitted > 6 {
				break
			}
		}
		if admitted != 6 {
			t.Fatalf("admitted %d replies of 190 on a budget of 1000 over two replicas, want exactly 6", admitted)
		}
	}
	checksAfter, chargesAfter := s.replicaDecisions(t, "ext_authz"), s.replicaCounter(t, "extauthz_charges_total", `route="llm"`)
	for i := range checksAfter {
		if checksAfter[i] <= checks[i] || chargesAfter[i] <= charges[i] {
			t.Errorf("replica %d: ext_authz decisions %v -> %v, charges %v -> %v: want both replicas checking and charging",
				i, checks, checksAfter, charges, chargesAfter)
		}
	}
}

// Wiring (a), ext_proc alone (front-proxy.yaml's /payments route, ext_authz
// off), checks and charges the same: testdata's charged-alone route counts
// 401s (3 a minute) and costs from a header (1000 a minute), each caller
// its own budgets. Three 401s spend the first: the next request is
// refused. Four replies of 300 spend the second (the fifth request with
// another tenant is refused).
func testChargeExtProcAlone(t *testing.T, s *stack) {
	failing := uniq("talone")
	for i := 1; i <= 3; i++ {
		r := tenantGet("/payments/charged", failing)
		r.header[upstream.HeaderStatus] = "401"
		if rep := s.do(t, r); rep.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: got %s, want the upstream's 401", i, rep)
		}
	}
	if rep := s.do(t, tenantGet("/payments/charged", failing)); rep.status != http.StatusTooManyRequests {
		t.Fatalf("after 3 counted 401s: got %s, want 429", rep)
	}
	if n := spendTokens(t, s, llmGet("/payments/charged", uniq("talone"), 300, "header")); n != 4 {
		t.Fatalf("admitted %d replies of 300 on a budget of 1000, want 4", n)
	}
}
