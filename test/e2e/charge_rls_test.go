package e2e

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// meteredRule is the metric ID of testdata/policy/edge.yaml's
// (route=metered) rule, 1000 tokens a minute per tenant, charge_over_limit.
const meteredRule = "edge.route_metered"

// Envoy's pattern for costs known at the end of a stream, through the RLS
// (front-proxy.yaml's /metered route): the request-time descriptor has
// hits_addend 0 and is a check, the apply_on_stream_done one carries the
// reply's x-usage-tokens. A budget of 1000 with replies costing 300 admits
// four requests (the fourth overshoots to 1200, charged in full) and
// refuses the fifth; only the four ran upstream.
func testMeteredRLS(t *testing.T, s *stack) {
	tenant := uniq("tmeter")
	r := req{path: "/metered/chat", header: map[string]string{"x-tenant-id": tenant, upstream.HeaderUsage: "300"}}
	for i := 1; i <= 4; i++ {
		before := s.ruleHits(t, meteredRule)
		if rep := s.do(t, r); rep.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, rep)
		}
		// The charge is Envoy's fire-and-forget call after the reply: wait
		// until it landed, or the next check would race it.
		s.waitRuleHits(t, meteredRule, before+300)
	}
	rep := s.do(t, r)
	if rep.status != http.StatusTooManyRequests {
		t.Fatalf("request 5 (1200 of 1000 spent): got %s, want 429", rep)
	}
	// gcra at 1000 a minute, 1200 charged: one token frees 12s after the
	// overshoot's charge, not at once (which would mean 200 were dropped).
	if ra, err := strconv.Atoi(rep.header.Get("Retry-After")); err != nil || ra < 5 || ra > 13 {
		t.Errorf("Retry-After = %q, want about 12s (the 200 over the budget charged)", rep.header.Get("Retry-After"))
	}
	if n := s.up.Executions(tenant, ""); n != 4 {
		t.Errorf("upstream executed %d requests, want 4", n)
	}
}

// ruleHits sums extauthz_rule_hits_total{stat="total_hits"} of rule over
// the replicas: the hits the RLS counted under it.
func (s *stack) ruleHits(t *testing.T, rule string) float64 {
	t.Helper()
	sum := 0.0
	for _, v := range s.replicaCounter(t, "extauthz_rule_hits_total", `rule="`+rule+`",stat="total_hits"`) {
		sum += v
	}
	return sum
}

// waitRuleHits waits until rule's hits reach want.
func (s *stack) waitRuleHits(t *testing.T, rule string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.ruleHits(t, rule)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s counted %v hits, want %v: the stream-done charge never landed", rule, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
