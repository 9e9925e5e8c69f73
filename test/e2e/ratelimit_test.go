package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rateLimitScenarios = []scenario{
	{"eleventh_request_429", testEleventhRequest},
	{"sixth_request_429_ext_authz_http_limit", testSixthRequestExtAuthz},
	{"tenants_separate", testTenantsSeparate},
	{"health_exempt", testHealthExempt},
	{"replicas_share_budget", testReplicasShareBudget},
	{"boundary_burst_fixed_window_admits_2x", testBoundaryFixedWindow},
	{"boundary_burst_refused_sliding_log", func(t *testing.T, s *stack) { testBoundaryRefused(t, s, "sliding_log") }},
	{"boundary_burst_refused_gcra", func(t *testing.T, s *stack) { testBoundaryRefused(t, s, "gcra") }},
}

func tenantGet(path, tenant string) req {
	return req{path: path, header: map[string]string{"x-tenant-id": tenant}}
}

// The catch-all route's (tenant, route=default) descriptor is limited to 10
// per minute (testdata/policy/edge.yaml): 10 requests pass, the 11th is
// answered 429 by Envoy's ratelimit filter with the IETF fields extauthz
// adds and Retry-After, and never reaches the upstream.
func testEleventhRequest(t *testing.T, s *stack) {
	tenant := uniq("t11")
	for i := 1; i <= 10; i++ {
		r := s.do(t, tenantGet("/things", tenant))
		if r.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, r)
		}
		wantField(t, r, "RateLimit-Policy", "q=10;w=60")
		wantField(t, r, "RateLimit", "r="+strconv.Itoa(10-i)+";")
	}
	r := s.do(t, tenantGet("/things", tenant))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request 11: got %s, want 429", r)
	}
	wantField(t, r, "RateLimit-Policy", "q=10;w=60")
	wantField(t, r, "RateLimit", "r=0;")
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %q, want 1..60 seconds", r.header.Get("Retry-After"))
	}
	if n := s.up.Executions(tenant, ""); n != 10 {
		t.Errorf("upstream executed %d requests, want 10", n)
	}
}

// ext_authz's HTTP limits (route "limited" of testdata/policy/http.yaml, 5
// per minute per tenant, tighter than the route's RLS budget of 10): the
// 6th request is refused by ext_authz with the same fields.
func testSixthRequestExtAuthz(t *testing.T, s *stack) {
	tenant := uniq("t6")
	for i := 1; i <= 5; i++ {
		if r := s.do(t, tenantGet("/limited/x", tenant)); r.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, r)
		}
	}
	r := s.do(t, tenantGet("/limited/x", tenant))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request 6: got %s, want 429", r)
	}
	wantField(t, r, "RateLimit-Policy", "q=5;w=60")
	wantField(t, r, "RateLimit", "r=0;")
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %q, want 1..60 seconds", r.header.Get("Retry-After"))
	}
	if n := s.up.Executions(tenant, ""); n != 5 {
		t.Errorf("upstream executed %d requests, want 5", n)
	}
}

// Two tenants have separate budgets: exhausting A leaves B untouched.
func testTenantsSeparate(t *testing.T, s *stack) {
	a, b := uniq("ta"), uniq("tb")
	for i := 0; i < 10; i++ {
		s.do(t, tenantGet("/things", a))
	}
	if r := s.do(t, tenantGet("/things", a)); r.status != http.StatusTooManyRequests {
		t.Fatalf("tenant A request 11: got %s, want 429", r)
	}
	for i := 1; i <= 10; i++ {
		if r := s.do(t, tenantGet("/things", b)); r.status != http.StatusOK {
			t.Fatalf("tenant B request %d: got %s, want 200", i, r)
		}
	}
}

// The health-check path is never limited: after the tenant's budget is
// spent, /healthz still answers 200, many times.
func testHealthExempt(t *testing.T, s *stack) {
	tenant := uniq("th")
	for i := 0; i < 11; i++ {
		s.do(t, tenantGet("/things", tenant))
	}
	if r := s.do(t, tenantGet("/things", tenant)); r.status != http.StatusTooManyRequests {
		t.Fatalf("budget not spent: %s", r)
	}
	for i := 0; i < 30; i++ {
		if r := s.do(t, tenantGet("/healthz", tenant)); r.status != http.StatusOK {
			t.Fatalf("/healthz %d: got %s, want 200", i, r)
		}
	}
}

// Envoy spreads RLS calls over both replicas (round robin); the budget is
// one, in Redis: 30 requests, exactly 10 admitted, and both replicas
// answered RLS calls.
//
// Envoy's round robin is per worker and shared by the RLS and ext_authz
// calls, so a request that makes both (RLS, then ext_authz) would send
// every RLS call to the same replica on a quiet connection. Requests of a
// tenant already over its limit make only the RLS call; interleaving one
// after each counted request shifts the rotation, so the counted requests'
// RLS calls alternate between the replicas.
func testReplicasShareBudget(t *testing.T, s *stack) {
	over := uniq("tover")
	for i := 0; i < 11; i++ {
		s.do(t, tenantGet("/things", over))
	}
	before := s.replicaDecisions(t, "ratelimit")
	tenant := uniq("tr")
	ok := 0
	for i := 0; i < 30; i++ {
		if r := s.do(t, tenantGet("/things", tenant)); r.status == http.StatusOK {
			ok++
		}
		if r := s.do(t, tenantGet("/things", over)); r.status != http.StatusTooManyRequests {
			t.Fatalf("tenant over its limit: got %s, want 429", r)
		}
	}
	if ok != 10 {
		t.Errorf("admitted %d of 30, want exactly 10 (one shared budget)", ok)
	}
	after := s.replicaDecisions(t, "ratelimit")
	for i := range after {
		if after[i] <= before[i] {
			t.Errorf("replica %d answered no RLS call (decisions %v -> %v)", i, before, after)
		}
	}
}

// replicaDecisions sums extauthz_decisions_total{api=...} per replica.
func (s *stack) replicaDecisions(t *testing.T, api string) []float64 {
	t.Helper()
	return s.replicaCounter(t, "extauthz_decisions_total", `api="`+api+`"`)
}

// replicaCounter sums, per replica, the samples of metric whose labels
// contain label ("" for every sample).
func (s *stack) replicaCounter(t *testing.T, metric, label string) []float64 {
	t.Helper()
	var out []float64
	for _, r := range s.replicas {
		out = append(out, replicaMetricWith(t, r, metric, label))
	}
	return out
}

// replicaMetric sums every sample of metric on r.
func replicaMetric(t *testing.T, r *replica, name string) float64 {
	t.Helper()
	return replicaMetricWith(t, r, name, "")
}

// replicaMetricWith sums the samples of metric on r whose labels contain
// label ("" for every sample).
func replicaMetricWith(t *testing.T, r *replica, name, label string) float64 {
	t.Helper()
	resp, err := probeClient.Get("http://" + r.httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", r.name, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) && strings.Contains(f[0], label) {
			v, _ := strconv.ParseFloat(f[1], 64)
			sum += v
		}
	}
	return sum
}

// wantField fails unless header name contains sub.
func wantField(t *testing.T, r reply, name, sub string) {
	t.Helper()
	if v := r.header.Get(name); !strings.Contains(v, sub) {
		t.Errorf("%s = %q, want it to contain %q (reply %d)", name, v, sub, r.status)
	}
}

// burst is the outcome of requests sent back to back.
type burst struct {
	admitted   int
	start, end time.Time // first send, last reply
}

func sendBurst(t *testing.T, s *stack, path, tenant string, n int) burst {
	t.Helper()
	b := burst{start: time.Now()}
	for i := 0; i < n; i++ {
		r := s.do(t, tenantGet(path, tenant))
		switch r.status {
		case http.StatusOK:
			b.admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("%s: got %s, want 200 or 429", path, r)
		}
	}
	b.end = time.Now()
	return b
}

// edgeBursts sends n requests just before a whole-second edge and n just
// after it (the windows of a 1s fixed_window are aligned on whole seconds
// of Redis's clock, which is this machine's clock). It retries on a new
// tenant when the first burst spills over the edge (a loaded machine).
func edgeBursts(t *testing.T, s *stack, path string, n int) (before, after burst) {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		tenant := uniq("edge")
		now := time.Now()
		edge := now.Truncate(time.Second).Add(time.Second)
		if edge.Sub(now) < 400*time.Millisecond {
			edge = edge.Add(time.Second)
		}
		time.Sleep(time.Until(edge.Add(-300 * time.Millisecond)))
		before = sendBurst(t, s, path, tenant, n)
		if before.end.After(edge.Add(-20 * time.Millisecond)) {
			t.Logf("attempt %d: first burst ended %v after the edge-20ms; retrying", attempt, before.end.Sub(edge))
			continue
		}
		time.Sleep(time.Until(edge.Add(20 * time.Millisecond)))
		after = sendBurst(t, s, path, tenant, n)
		return before, after
	}
	t.Fatal("could not fit a burst before a second's edge in 5 attempts")
	return
}

// fixed_window 5/s: 5 requests just before a window edge and 5 just after
// are all admitted, 10 in well under a second: the boundary burst this
// algorithm allows (the envoyproxy/ratelimit behaviour).
func testBoundaryFixedWindow(t *testing.T, s *stack) {
	before, after := edgeBursts(t, s, "/burst/fixed_window", 5)
	if before.admitted != 5 || after.admitted != 5 {
		t.Errorf("admitted %d before and %d after the edge, want 5 and 5", before.admitted, after.admitted)
	}
	if d := after.end.Sub(before.start); d >= time.Second {
		t.Errorf("the 10 requests took %v, not under a second", d)
	}
}

// sliding_log and gcra 5/s refuse the boundary burst. The same two bursts
// around an edge admit 5 and then (sliding_log) none, or (gcra) only what
// refilled meanwhile, one per 200ms. Also, 2x the limit sent at once admits
// at most the limit (plus the gcra refill).
func testBoundaryRefused(t *testing.T, s *stack, algo string) {
	path := "/burst/" + algo
	before, after := edgeBursts(t, s, path, 5)
	elapsed := after.end.Sub(before.start)
	refill := int(elapsed / (200 * time.Millisecond))
	if algo == "sliding_log" {
		refill = 0 // all 5 admitted entries are younger than 1s
	}
	if before.admitted != 5 || after.admitted > refill {
		t.Errorf("%s: admitted %d before and %d after the edge (over %v), want 5 and at most %d",
			algo, before.admitted, after.admitted, elapsed, refill)
	}
	b := sendBurst(t, s, path, uniq("2x"), 10)
	most := 5
	if algo == "gcra" {
		most += int(b.end.Sub(b.start) / (200 * time.Millisecond))
	}
	if b.admitted < 5 || b.admitted > most {
		t.Errorf("%s: 10 requests in %v admitted %d, want 5..%d", algo, b.end.Sub(b.start), b.admitted, most)
	}
}
