package e2e

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/xdstest"
	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// egRefundHeader is the request header the refund entry reads (a stand-in
// for the metadata a filter would set: the tokens a reservation did not use).
const egRefundHeader = "x-refund-tokens"

// TestGatewayCostLimitsThroughEnvoy runs Envoy with the ratelimit filter
// config Envoy Gateway 1.9 generates for a BackendTrafficPolicy rule with
// a cost (internal/xds/translator/testdata/out/xds-ir/ratelimit.routes.yaml,
// the req-and-resp-cost route): the route's RateLimitPerRoute carries two
// rate_limits entries of the same descriptor, the first sent with the
// request (cost.request: {number: 0}, a check), the second
// apply_on_stream_done with the reply's cost (here the upstream's
// x-usage-tokens header; Envoy Gateway reads it from metadata the same
// way), plus a third stream-done entry with is_negative_hits (a refund,
// Envoy 1.38+). The replicas take a limit of 10 per hour over xDS from a
// go-control-plane server, as Envoy Gateway's controller gives them, and
// count as envoyproxy/ratelimit, on Redis standalone and on a 3-node
// Redis Cluster:
//   - the token budget trips: a reply of 10,000 tokens past the limit is
//     charged, and the next request gets 429 (with the peer's semantics;
//     before, the charge was dropped and the budget never tripped);
//   - a refund lets a later request through: 8 charged, 5 refunded, 6
//     more fit the 10 (and 2 more do not);
//   - the window is fixed: the 429's Retry-After is the end of the hour,
//     not a token's refill.
func TestGatewayCostLimitsThroughEnvoy(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testGatewayCostLimits(t, backend == "cluster")
		})
	}
}

func testGatewayCostLimits(t *testing.T, cluster bool) {
	xdsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	x := xdstest.Start(t, xdsAddr, nil)
	x.Set(t, egNode, "v1", xdstest.GatewayDistinctLimit(egDomain, 10, rlsconfv3.RateLimitUnit_HOUR))
	env := []string{"EXTAUTHZ_POLICY_SOURCE=xds", "EXTAUTHZ_XDS_SERVER_URL=" + xdsAddr, "EXTAUTHZ_XDS_NODE_ID=" + egNode,
		"EXTAUTHZ_XDS_BACKOFF_MIN=100ms", "EXTAUTHZ_XDS_BACKOFF_MAX=1s"}
	if cluster {
		c := redistest.NewCluster(t)
		env = append(env, "EXTAUTHZ_REDIS_URL="+c.URL, "EXTAUTHZ_REDIS_CLUSTER=true")
	}
	s := newStack(t, stackOpts{
		stripFilters: true,
		keepFilters:  []string{"envoy.filters.http.ratelimit"},
		env:          env,
		edit:         func(src []byte) []byte { return withGatewayCostLimits(t, src) },
	})
	waitUntil(t, "the replicas to ACK v1", func() bool { return x.Acks("v1") == len(s.replicas) })
	// Each phase must stay in one hour's window: a new window starts every
	// budget afresh, as the peer's.
	clearOfWindowEdge(time.Hour, 30*time.Second)

	// The budget trips: a check admits, the reply's 10,000 tokens land past
	// the limit of 10, and the next request is refused.
	tripped := uniq("tripped")
	calls := s.rlsCalls(t)
	if rep := s.do(t, costReq(tripped, 10_000, 0)); rep.status != http.StatusOK {
		t.Fatalf("first request: %s, want 200", rep)
	}
	s.waitRLSCalls(t, calls+2) // the check, then the stream-done charge
	now := time.Now()
	rep := s.do(t, costReq(tripped, 0, 0))
	if rep.status != http.StatusTooManyRequests {
		t.Fatalf("after a reply of 10,000 tokens against 10/hour: %s, want 429 (the charge past the limit must land)", rep)
	}
	toTheHour := now.Truncate(time.Hour).Add(time.Hour).Sub(now).Seconds()
	if ra, err := strconv.Atoi(rep.header.Get("Retry-After")); err != nil || float64(ra) < toTheHour-5 || float64(ra) > toTheHour+2 {
		t.Errorf("Retry-After %q, want about %.0fs: the fixed window's end, as envoyproxy/ratelimit counts", rep.header.Get("Retry-After"), toTheHour)
	}

	// A refund lets a later request through: 8, -5, then 6 fit 10.
	refunded := uniq("refunded")
	calls = s.rlsCalls(t)
	for i, step := range []struct{ cost, refund, calls int }{{8, 0, 2}, {0, 5, 2}, {6, 0, 2}} {
		if rep := s.do(t, costReq(refunded, step.cost, step.refund)); rep.status != http.StatusOK {
			t.Fatalf("step %d (cost %d, refund %d): %s, want 200", i, step.cost, step.refund, rep)
		}
		calls += float64(step.calls)
		s.waitRLSCalls(t, calls)
	}
	if rep := s.do(t, costReq(refunded, 2, 0)); rep.status != http.StatusOK {
		t.Fatalf("with 9 of 10 spent (8, -5, 6): %s, want 200: the refund must have given 5 back", rep)
	}
	s.waitRLSCalls(t, calls+2)
	if rep := s.do(t, costReq(refunded, 0, 0)); rep.status != http.StatusTooManyRequests {
		t.Errorf("with 11 of 10 spent: %s, want 429", rep)
	}
}

// costReq is a request of user through the cost route: the upstream
// reports cost tokens (none when 0) and the request asks refund back.
func costReq(user string, cost, refund int) req {
	h := map[string]string{egUserHeader: user}
	if cost > 0 {
		h[upstream.HeaderUsage] = strconv.Itoa(cost)
	}
	if refund > 0 {
		h[egRefundHeader] = strconv.Itoa(refund)
	}
	return req{path: "/things", header: h}
}

// rlsCalls sums the replicas' RLS decisions: one per descriptor answered.
func (s *stack) rlsCalls(t *testing.T) float64 {
	t.Helper()
	sum := 0.0
	for _, v := range s.replicaCounter(t, "extauthz_decisions_total", `api="ratelimit"`) {
		sum += v
	}
	return sum
}

// waitRLSCalls waits until the replicas answered want descriptors: Envoy's
// stream-done calls are fire-and-forget, after the reply.
func (s *stack) waitRLSCalls(t *testing.T, want float64) {
	t.Helper()
	waitUntil(t, "the stream-done calls to land", func() bool { return s.rlsCalls(t) >= want })
}

// withGatewayCostLimits gives an envoy/ file Envoy Gateway's shape of a
// cost limit: the ratelimit filter's domain is the listener's (egDomain),
// and the catch-all route's RateLimitPerRoute sends the descriptor of a
// rule with a Distinct header selector (xdstest.GatewayDistinctLimit)
// three times: with the request (hits_addend 0), when the stream is done
// (the reply's x-usage-tokens), and as a refund when the stream is done
// (is_negative_hits, the request's x-refund-tokens).
func withGatewayCostLimits(t *testing.T, src []byte) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	actions := []any{
		map[string]any{"generic_key": map[string]any{"descriptor_key": xdstest.GatewayRouteKey, "descriptor_value": xdstest.GatewayRouteKey}},
		map[string]any{"generic_key": map[string]any{"descriptor_key": xdstest.GatewayPolicyRuleKey, "descriptor_value": xdstest.GatewayPolicyRuleKey}},
		map[string]any{"request_headers": map[string]any{"header_name": egUserHeader, "descriptor_key": xdstest.GatewayMatchKey}},
	}
	perRoute := map[string]any{
		"@type":  "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
		"domain": egDomain,
		"rate_limits": []any{
			map[string]any{"actions": actions, "hits_addend": map[string]any{"number": 0}},
			map[string]any{"actions": actions, "apply_on_stream_done": true,
				"hits_addend": map[string]any{"format": "%RESP(" + upstream.HeaderUsageTokens + ")%"}},
			map[string]any{"actions": actions, "apply_on_stream_done": true,
				"hits_addend": map[string]any{"format": "%REQ(" + egRefundHeader + ")%", "is_negative_hits": true}},
		},
	}
	var domains, routes int
	walkMaps(doc, func(m map[string]any) {
		if m["@type"] == "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit" {
			m["domain"] = egDomain
			domains++
		}
		if match, _ := m["match"].(map[string]any); len(match) == 1 && match["prefix"] == "/" {
			if route, _ := m["route"].(map[string]any); route != nil {
				delete(route, "rate_limits")
				tpfc, _ := m["typed_per_filter_config"].(map[string]any)
				if tpfc == nil {
					tpfc = map[string]any{}
					m["typed_per_filter_config"] = tpfc
				}
				tpfc["envoy.filters.http.ratelimit"] = perRoute
				routes++
			}
		}
	})
	if domains != 1 || routes != 1 {
		t.Fatalf("found %d ratelimit filters and %d catch-all routes, want one each", domains, routes)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// clearOfWindowEdge waits, when the next edge of window (aligned to the
// epoch, as fixed windows are) is closer than margin, until it has passed:
// a test whose steps must share a window then has margin to run.
func clearOfWindowEdge(window, margin time.Duration) {
	now := time.Now()
	if left := now.Truncate(window).Add(window).Sub(now); left < margin {
		time.Sleep(left + 100*time.Millisecond)
	}
}
