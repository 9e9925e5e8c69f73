package rls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

const (
	codeOK   = rlsv3.RateLimitResponse_OK
	codeOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// call sends req through the gRPC client and fails the test on an error.
func (e *env) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if got, want := len(resp.GetStatuses()), len(req.GetDescriptors()); got != want {
		t.Fatalf("%d statuses for %d descriptors", got, want)
	}
	return resp
}

// header returns the value of a response header to add, or "" (and false).
func header(resp *rlsv3.RateLimitResponse, name string) (string, bool) {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue(), true
		}
	}
	return "", false
}

// wantStatus checks one descriptor status.
func wantStatus(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code,
	name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset time.Duration) {
	t.Helper()
	if st.GetCode() != code {
		t.Errorf("code = %v, want %v", st.GetCode(), code)
	}
	cl := st.GetCurrentLimit()
	if cl.GetName() != name || cl.GetRequestsPerUnit() != rpu || cl.GetUnit() != unit {
		t.Errorf("current_limit = {%q %d %v}, want {%q %d %v}", cl.GetName(), cl.GetRequestsPerUnit(), cl.GetUnit(), name, rpu, unit)
	}
	if st.GetLimitRemaining() != remaining {
		t.Errorf("limit_remaining = %d, want %d", st.GetLimitRemaining(), remaining)
	}
	if got := st.GetDurationUntilReset().AsDuration(); got != reset {
		t.Errorf("duration_until_reset = %s, want %s", got, reset)
	}
}

func wantHeader(t *testing.T, resp *rlsv3.RateLimitResponse, name, want string) {
	t.Helper()
	got, ok := header(resp, name)
	if want == "" {
		if ok {
			t.Errorf("header %s = %q, want none", name, got)
		}
		return
	}
	if got != want {
		t.Errorf("header %s = %q, want %q", name, got, want)
	}
}

const ordersPolicy = `
domain: api
descriptors:
  - key: route
    value: /orders
    rate_limit:
      name: orders
      unit: minute
      requests_per_unit: 10
      algorithm: fixed_window
  - key: route
    value: /gcra
    rate_limit:
      name: smooth
      unit: minute
      requests_per_unit: 10
`

func TestRLSEleventhRequestOfTenPerMinuteIsOverLimit(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	req := envoytest.Request("api", envoytest.Desc("route", "/orders"))
	for i := 1; i <= 10; i++ {
		resp := e.call(t, req)
		if resp.GetOverallCode() != codeOK {
			t.Fatalf("request %d: overall_code = %v, want OK", i, resp.GetOverallCode())
		}
		wantStatus(t, resp.GetStatuses()[0], codeOK, "orders", 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, uint32(10-i), 45*time.Second)
		wantHeader(t, resp, "RateLimit-Policy", `"orders";q=10;w=60`)
		wantHeader(t, resp, "RateLimit", `"orders";r=`+strconv.Itoa(10-i)+`;t=45`)
		wantHeader(t, resp, "Retry-After", "")
	}
	resp := e.call(t, req)
	if resp.GetOverallCode() != codeOver {
		t.Fatalf("11th request: overall_code = %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	wantStatus(t, resp.GetStatuses()[0], codeOver, "orders", 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, 45*time.Second)
	wantHeader(t, resp, "RateLimit-Policy", `"orders";q=10;w=60`)
	wantHeader(t, resp, "RateLimit", `"orders";r=0;t=45`)
	wantHeader(t, resp, "Retry-After", "45")

	// The next window admits again.
	e.clock.Advance(45 * time.Second)
	if resp := e.call(t, req); resp.GetOverallCode() != codeOK {
		t.Fatalf("next window: overall_code = %v, want OK", resp.GetOverallCode())
	}

	labels := map[string]string{"api": envoy.APIRateLimit, "domain": "api"}
	for outcome, want := range map[string]float64{envoy.OutcomeOK: 11, envoy.OutcomeOverLimit: 1} {
		labels["outcome"] = outcome
		if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != want {
			t.Errorf("decisions_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
}

func TestRLSGCRAOverLimitRetriesAfterOneEmissionInterval(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	req := envoytest.Request("api", envoytest.Desc("route", "/gcra"))
	for i := 1; i <= 10; i++ {
		if resp := e.call(t, req); resp.GetOverallCode() != codeOK {
			t.Fatalf("request %d: %v, want OK", i, resp.GetOverallCode())
		}
	}
	resp := e.call(t, req)
	// A burst of 10 empties the bucket; one token comes back every 60s/10:
	// the OVER_LIMIT status's duration_until_reset is that wait, as
	// Retry-After (Envoy's enable_retry_after_header reads the status).
	wantStatus(t, resp.GetStatuses()[0], codeOver, "smooth", 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, 6*time.Second)
	wantHeader(t, resp, "Retry-After", "6")
	wantHeader(t, resp, "RateLimit", `"smooth";r=0;t=6`)
	e.clock.Advance(6 * time.Second)
	wantStatus(t, e.call(t, req).GetStatuses()[0], codeOK, "smooth", 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, 60*time.Second)
}

func TestRLSShadowModeCountsButAnswersOK(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: route
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`)
	req := envoytest.Request("api", envoytest.Desc("route", "/x"))
	first, second := e.call(t, req), e.call(t, req)
	if first.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("first call: remaining %d, want 0 (shadow rules are counted)", first.GetStatuses()[0].GetLimitRemaining())
	}
	if second.GetOverallCode() != codeOK || second.GetStatuses()[0].GetCode() != codeOK {
		t.Fatalf("second call: overall %v status %v, want OK/OK", second.GetOverallCode(), second.GetStatuses()[0].GetCode())
	}
	if second.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Errorf("shadow status lost its current_limit")
	}
	wantHeader(t, second, "Retry-After", "")
	wantHeader(t, second, "RateLimit", "") // a limit that is not enforced is not advertised
	labels := map[string]string{"api": envoy.APIRateLimit, "domain": "api", "outcome": envoy.OutcomeShadow}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != 1 {
		t.Errorf("decisions_total{outcome=shadow} = %v, want 1", got)
	}
}

func TestRLSUnlimitedIsNeverCounted(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: internal
    value: "true"
    rate_limit: {unlimited: true}
`)
	for range 3 {
		resp := e.call(t, envoytest.Request("api", envoytest.Desc("internal", "true")))
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != codeOK || st.GetCode() != codeOK || st.GetLimitRemaining() != math.MaxUint32 || st.GetCurrentLimit() != nil {
			t.Fatalf("unlimited: got %v", resp)
		}
		wantHeader(t, resp, "RateLimit", "")
	}
	if n := len(e.store.Calls()); n != 0 {
		t.Errorf("%d store calls for unlimited descriptors, want 0", n)
	}
	labels := map[string]string{"api": envoy.APIRateLimit, "domain": "api", "outcome": envoy.OutcomeUnlimited}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != 3 {
		t.Errorf("decisions_total{outcome=unlimited} = %v, want 3", got)
	}
}

func TestRLSReplacesDropsTheReplacedRule(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: plan
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      algorithm: fixed_window
      replaces: [{name: per_user}]
`)
	both := envoytest.Request("api", envoytest.Desc("user", "alice"), envoytest.Desc("plan", "vip"))
	for i := range 3 {
		resp := e.call(t, both)
		if resp.GetOverallCode() != codeOK {
			t.Fatalf("call %d: %v, want OK (per_user is replaced)", i, resp.GetOverallCode())
		}
		if st := resp.GetStatuses()[0]; st.GetCurrentLimit() != nil || st.GetCode() != codeOK {
			t.Fatalf("replaced descriptor status = %v, want OK without current_limit", st)
		}
		if got := resp.GetStatuses()[1].GetLimitRemaining(); got != uint32(99-i) {
			t.Errorf("vip remaining = %d, want %d", got, 99-i)
		}
	}
	for _, c := range e.store.Calls() {
		if len(c) != 1 {
			t.Fatalf("store asked %d requests, want only the vip one", len(c))
		}
	}
	// per_user was never charged by the replaced calls: it still has its one.
	alone := envoytest.Request("api", envoytest.Desc("user", "alice"))
	if e.call(t, alone).GetOverallCode() != codeOK || e.call(t, alone).GetOverallCode() != codeOver {
		t.Error("per_user alone: want OK then OVER_LIMIT")
	}
}

func TestRLSHitsAddend(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: route
    rate_limit: {name: r, unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`)
	remaining := func(req *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, uint32) {
		resp := e.call(t, req)
		return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()
	}
	withHits := func(req *rlsv3.RateLimitRequest, h uint32) *rlsv3.RateLimitRequest { req.HitsAddend = h; return req }
	descHits := func(d *commonrlv3.RateLimitDescriptor, h uint64) *commonrlv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(h)
		return d
	}
	steps := []struct {
		name      string
		req       *rlsv3.RateLimitRequest
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{"request hits_addend 0 means 1", withHits(envoytest.Request("api", envoytest.Desc("route", "a")), 0), codeOK, 9},
		{"request hits_addend 4", withHits(envoytest.Request("api", envoytest.Desc("route", "a")), 4), codeOK, 5},
		{"6 more than the 5 left is denied and charges nothing", withHits(envoytest.Request("api", envoytest.Desc("route", "a")), 6), codeOver, 5},
		{"descriptor hits_addend 0 checks only", withHits(envoytest.Request("api", descHits(envoytest.Desc("route", "a"), 0)), 7), codeOK, 5},
		{"descriptor hits_addend overrides the request's", withHits(envoytest.Request("api", descHits(envoytest.Desc("route", "a"), 5)), 9), codeOK, 0},
		{"exhausted", envoytest.Request("api", envoytest.Desc("route", "a")), codeOver, 0},
	}
	for _, s := range steps {
		if code, rem := remaining(s.req); code != s.code || rem != s.remaining {
			t.Fatalf("%s: got %v remaining %d, want %v remaining %d", s.name, code, rem, s.code, s.remaining)
		}
	}
	calls := e.store.Calls()
	wantHits := []int64{1, 4, 6, 0, 5, 1}
	for i, c := range calls {
		if c[0].Hits != wantHits[i] {
			t.Errorf("call %d: store hits %d, want %d", i, c[0].Hits, wantHits[i])
		}
	}
}

func TestRLSLimitOverride(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: route
    value: /orders
    rate_limit: {name: orders, unit: minute, requests_per_unit: 100, algorithm: fixed_window, consistency: allotment}
  - key: route
    value: /shadowed
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 100}
`)
	override := func(rpu uint32, unit typev3.RateLimitUnit, mult uint32, kv ...string) *commonrlv3.RateLimitDescriptor {
		d := envoytest.Desc(kv...)
		d.Limit = &commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		if mult > 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		return d
	}
	// 2 per 10 s; t0 is 5 s before a 10 s window ends.
	req := envoytest.Request("api", override(2, typev3.RateLimitUnit_SECOND, 10, "route", "/orders"))
	for i, want := range []rlsv3.RateLimitResponse_Code{codeOK, codeOK, codeOver} {
		resp := e.call(t, req)
		st := resp.GetStatuses()[0]
		if st.GetCode() != want {
			t.Fatalf("override call %d: %v, want %v", i, st.GetCode(), want)
		}
		cl := st.GetCurrentLimit()
		if cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetUnitMultiplier().GetValue() != 10 {
			t.Fatalf("current_limit = %v, want 2 per SECOND x 10", cl)
		}
		if i == 2 {
			wantHeader(t, resp, "Retry-After", "5") // the rule's fixed_window algorithm
		}
	}
	if l := e.store.Calls()[0][0].Limits[0]; l.Algorithm != ratelimit.FixedWindow || l.Consistency != ratelimit.Allotment {
		t.Errorf("override algorithm %s, consistency %q; want the rule's fixed_window and allotment", l.Algorithm, l.Consistency)
	}
	// A changed override is a different budget.
	changed := envoytest.Request("api", override(3, typev3.RateLimitUnit_SECOND, 10, "route", "/orders"))
	if st := e.call(t, changed).GetStatuses()[0]; st.GetCode() != codeOK || st.GetLimitRemaining() != 2 {
		t.Errorf("changed override: %v, want OK with 2 remaining", st)
	}
	// The configured limit is untouched by the override's counting.
	if st := e.call(t, envoytest.Request("api", envoytest.Desc("route", "/orders"))).GetStatuses()[0]; st.GetLimitRemaining() != 99 {
		t.Errorf("configured limit remaining = %d, want 99", st.GetLimitRemaining())
	}
	// Shadow mode is off under an override, as in envoyproxy/ratelimit.
	sh := envoytest.Request("api", override(1, typev3.RateLimitUnit_MINUTE, 0, "route", "/shadowed"))
	if e.call(t, sh).GetOverallCode() != codeOK || e.call(t, sh).GetOverallCode() != codeOver {
		t.Error("override on a shadow rule: want OK then OVER_LIMIT")
	}
	// An override applies to a descriptor no rule matches (GCRA; current_limit
	// unnamed as in envoyproxy/ratelimit, "override" in the RateLimit fields).
	un := envoytest.Request("api", override(1, typev3.RateLimitUnit_HOUR, 0, "route", "/unknown"))
	if st := e.call(t, un).GetStatuses()[0]; st.GetCurrentLimit().GetName() != "" || st.GetCode() != codeOK {
		t.Errorf("unmatched override: %v", st)
	}
	if e.call(t, un).GetOverallCode() != codeOver {
		t.Error("unmatched override: second call not over limit")
	}
}

func TestRLSNestedAndWildcardMatching(t *testing.T) {
	t.Parallel()
	e := startRLS(t, envoytest.EdgePolicy)
	cases := []struct {
		name string
		d    *commonrlv3.RateLimitDescriptor
		rpu  uint32 // 0: no match
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{"wildcard", envoytest.Desc("source_cluster", "proxy", "destination_cluster", "mongo_a"), 2, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{"exact beats key-only", envoytest.Desc("source_cluster", "proxy", "destination_cluster", "mysql"), 1, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{"key-only default", envoytest.Desc("source_cluster", "proxy", "destination_cluster", "pg"), 3, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{"top level key-only", envoytest.Desc("remote_address", "10.0.0.1"), 5, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{"parent without a limit", envoytest.Desc("source_cluster", "proxy"), 0, 0},
		{"other parent value", envoytest.Desc("source_cluster", "other", "destination_cluster", "pg"), 0, 0},
		{"deeper than configured", envoytest.Desc("remote_address", "10.0.0.1", "path", "/"), 0, 0},
	}
	for _, c := range cases {
		st := e.call(t, envoytest.Request("edge", c.d)).GetStatuses()[0]
		cl := st.GetCurrentLimit()
		if c.rpu == 0 {
			if cl != nil {
				t.Errorf("%s: matched %v, want no match", c.name, cl)
			}
			continue
		}
		if cl.GetRequestsPerUnit() != c.rpu || cl.GetUnit() != c.unit {
			t.Errorf("%s: current_limit %v, want %d per %v", c.name, cl, c.rpu, c.unit)
		}
	}
	// Each value matching the wildcard has its own counter.
	a := envoytest.Request("edge", envoytest.Desc("source_cluster", "proxy", "destination_cluster", "mongo_a"))
	if e.call(t, a).GetOverallCode() != codeOK || e.call(t, a).GetOverallCode() != codeOver {
		t.Error("mongo_a: want its 2nd and 3rd calls OK then OVER_LIMIT")
	}
	b := envoytest.Request("edge", envoytest.Desc("source_cluster", "proxy", "destination_cluster", "mongo_b"))
	if st := e.call(t, b).GetStatuses()[0]; st.GetCode() != codeOK || st.GetLimitRemaining() != 1 {
		t.Errorf("mongo_b: %v, want OK with 1 remaining (own counter)", st)
	}
}

func TestRLSTenantsHaveSeparateBudgets(t *testing.T) {
	t.Parallel()
	const routes = `
domain: api
descriptors:
  - key: route
    rate_limit: {name: per_route, unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`
	e := startRLS(t, routes)
	a := envoytest.Request("api", envoytest.Desc("tenant", "a", "route", "/x"))
	if e.call(t, a).GetOverallCode() != codeOK || e.call(t, a).GetOverallCode() != codeOver {
		t.Fatal("tenant a: want OK then OVER_LIMIT")
	}
	b := envoytest.Request("api", envoytest.Desc("tenant", "b", "route", "/x"))
	if st := e.call(t, b).GetStatuses()[0]; st.GetCode() != codeOK || st.GetCurrentLimit().GetName() != "per_route" {
		t.Fatalf("tenant b: %v, want OK under per_route", st)
	}
	wantKey := ratelimit.Key("b", "api", []ratelimit.Entry{{Key: "route", Value: "/x"}})
	if calls := e.store.Calls(); calls[len(calls)-1][0].Key != wantKey {
		t.Errorf("store key %q, want %q", calls[len(calls)-1][0].Key, wantKey)
	}

	t.Run("custom key", func(t *testing.T) {
		t.Parallel()
		e := startRLS(t, routes, WithTenantKey("org"))
		if st := e.call(t, envoytest.Request("api", envoytest.Desc("org", "o1", "route", "/x"))).GetStatuses()[0]; st.GetCurrentLimit() == nil {
			t.Error("org=o1 was not stripped as the tenant")
		}
		if st := e.call(t, envoytest.Request("api", envoytest.Desc("tenant", "a", "route", "/x"))).GetStatuses()[0]; st.GetCurrentLimit() != nil {
			t.Error("tenant entry stripped although the tenant key is org")
		}
	})
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		e := startRLS(t, routes, WithTenantKey(""))
		if st := e.call(t, a).GetStatuses()[0]; st.GetCurrentLimit() != nil {
			t.Error("tenant entry stripped with tenant extraction disabled")
		}
	})
	t.Run("policy keyed by tenant matches it as written", func(t *testing.T) {
		t.Parallel()
		e := startRLS(t, `
domain: api
descriptors:
  - key: tenant
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
		if cl := e.call(t, envoytest.Request("api", envoytest.Desc("tenant", "gold"))).GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 100 {
			t.Errorf("tenant=gold: %v, want 100/minute", cl)
		}
		if cl := e.call(t, envoytest.Request("api", envoytest.Desc("tenant", "tin"))).GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 1 {
			t.Errorf("tenant=tin: %v, want 1/minute", cl)
		}
		want := ratelimit.Key("", "api", []ratelimit.Entry{{Key: "tenant", Value: "gold"}})
		if got := e.store.Calls()[0][0].Key; got != want {
			t.Errorf("store key %q, want %q", got, want)
		}
	})
}

func TestRLSUnmatchedDescriptorIsOK(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	for _, req := range []*rlsv3.RateLimitRequest{
		envoytest.Request("api", envoytest.Desc("route", "/nothing")),
		envoytest.Request("no-such-domain", envoytest.Desc("route", "/orders")),
	} {
		resp := e.call(t, req)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != codeOK || st.GetCode() != codeOK || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 {
			t.Errorf("%s: got %v, want OK without a limit", req.GetDomain(), resp)
		}
		if len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("%s: headers %v, want none", req.GetDomain(), resp.GetResponseHeadersToAdd())
		}
	}
	if n := len(e.store.Calls()); n != 0 {
		t.Errorf("%d store calls, want 0", n)
	}
	for domain, want := range map[string]float64{"api": 1, envoy.UnknownDomain: 1, "no-such-domain": 0} {
		labels := map[string]string{"api": envoy.APIRateLimit, "domain": domain, "outcome": envoy.OutcomeNoMatch}
		if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != want {
			t.Errorf("decisions_total{domain=%s,outcome=no_match} = %v, want %v", domain, got, want)
		}
	}
}

func TestRLSOneStoreCallPerRequestWithStatusesInOrder(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: a
    rate_limit: {name: la, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {name: lb, unit: second, requests_per_unit: 2}
  - key: u
    rate_limit: {unlimited: true}
  - key: c
    rate_limit: {name: lc, unit: second, requests_per_unit: 3}
`)
	resp := e.call(t, envoytest.Request("api", envoytest.Desc("a", "1"), envoytest.Desc("none", "1"), envoytest.Desc("b", "1"), envoytest.Desc("u", "1"), envoytest.Desc("c", "1")))
	calls := e.store.Calls()
	if len(calls) != 1 || len(calls[0]) != 3 {
		t.Fatalf("store calls %v, want one AllowBatch of 3 requests", calls)
	}
	for i, want := range []string{"la", "", "lb", "", "lc"} {
		if got := resp.GetStatuses()[i].GetCurrentLimit().GetName(); got != want {
			t.Errorf("statuses[%d] limit %q, want %q", i, got, want)
		}
	}
	wantHeader(t, resp, "RateLimit-Policy", `"la";q=1;w=1, "lb";q=2;w=1, "lc";q=3;w=1`)
	wantHeader(t, resp, "RateLimit", `"la";r=0;t=1, "lb";r=1;t=1, "lc";r=2;t=1`)
}

func TestRLSSeveralLimitsOnOneDescriptor(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: route
    rate_limits:
      - {name: burst, unit: minute, requests_per_unit: 2, algorithm: fixed_window}
      - {name: daily, unit: day, requests_per_unit: 100, algorithm: fixed_window}
`)
	req := envoytest.Request("api", envoytest.Desc("route", "/x"))
	resp := e.call(t, req)
	// t0 is 12:00:15 UTC: the minute ends in 45 s, the day in 43185 s.
	wantStatus(t, resp.GetStatuses()[0], codeOK, "burst", 2, rlsv3.RateLimitResponse_RateLimit_MINUTE, 1, 45*time.Second)
	wantHeader(t, resp, "RateLimit-Policy", `"burst";q=2;w=60, "daily";q=100;w=86400`)
	wantHeader(t, resp, "RateLimit", `"burst";r=1;t=45, "daily";r=99;t=43185`)
	e.call(t, req)
	resp = e.call(t, req)
	wantStatus(t, resp.GetStatuses()[0], codeOver, "burst", 2, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0, 45*time.Second)
	wantHeader(t, resp, "Retry-After", "45")
	// A denied request charges no limit: daily still counts 2.
	wantHeader(t, resp, "RateLimit", `"burst";r=0;t=45, "daily";r=98;t=43185`)
}

func TestDefaultSecretKeysIsACopy(t *testing.T) {
	t.Parallel()
	keys := DefaultSecretKeys()
	keys[0] = "changed"
	if got := DefaultSecretKeys(); got[0] != "api_key" {
		t.Fatalf("DefaultSecretKeys() = %q after a caller changed its copy", got)
	}
}
