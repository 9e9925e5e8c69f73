package rls

import (
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestRLSChargeOverLimit: Envoy's pattern for costs known at the end of a
// stream on a charge_over_limit rule. The request-time descriptor
// (hits_addend 0) checks that something is left and charges nothing; the
// apply_on_stream_done one (hits_addend = the cost) is charged even when
// it takes the budget over, and the next check is refused until the window
// frees. A descriptor without hits_addend is charged over the limit too.
func TestRLSChargeOverLimit(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: ai
descriptors:
  - key: tokens
    rate_limit: {name: tokens, unit: minute, requests_per_unit: 1000, algorithm: fixed_window, charge_over_limit: true}
`)
	withHits := func(h uint64) *rlsv3.RateLimitRequest {
		d := envoytest.Desc("tokens", "t1")
		d.HitsAddend = wrapperspb.UInt64(h)
		return envoytest.Request("ai", d)
	}
	plain := envoytest.Request("ai", envoytest.Desc("tokens", "t1"))
	steps := []struct {
		name      string
		req       *rlsv3.RateLimitRequest
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{"check on an empty budget", withHits(0), codeOK, 1000},
		{"cost 300", withHits(300), codeOK, 700},
		{"cost 300", withHits(300), codeOK, 400},
		{"cost 300", withHits(300), codeOK, 100},
		{"check with 100 left admits", withHits(0), codeOK, 100},
		{"cost 300 over the 100 left is charged", withHits(300), codeOver, 0},
		{"check once 1200 of 1000 are spent is refused", withHits(0), codeOver, 0},
		{"a request without hits_addend is charged over the limit", plain, codeOver, 0},
	}
	for _, s := range steps {
		resp := e.call(t, s.req)
		if code, rem := resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining(); code != s.code || rem != s.remaining {
			t.Fatalf("%s: got %v remaining %d, want %v remaining %d", s.name, code, rem, s.code, s.remaining)
		}
	}
	wantStore := []struct {
		hits   int64
		charge ratelimit.ChargeMode
	}{{1, ratelimit.ChargeNever}, {300, ratelimit.ChargeAlways}, {300, ratelimit.ChargeAlways}, {300, ratelimit.ChargeAlways},
		{1, ratelimit.ChargeNever}, {300, ratelimit.ChargeAlways}, {1, ratelimit.ChargeNever}, {1, ratelimit.ChargeAlways}}
	for i, c := range e.store.Calls() {
		if c[0].Hits != wantStore[i].hits || c[0].Charge != wantStore[i].charge {
			t.Errorf("call %d: store hits %d charge %v, want %d %v", i, c[0].Hits, c[0].Charge, wantStore[i].hits, wantStore[i].charge)
		}
	}
	e.clock.Advance(time.Minute) // the next fixed window starts empty
	if resp := e.call(t, withHits(0)); resp.GetOverallCode() != codeOK || resp.GetStatuses()[0].GetLimitRemaining() != 1000 {
		t.Errorf("check in the next window: %v remaining %d, want OK 1000", resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining())
	}
}

// TestRLSChargeOverLimitOnlyItsRule: charge_over_limit changes how its own
// rule is charged, not its neighbours in the same call: a plain rule still
// refuses and charges nothing over its limit, and takes a hits_addend 0 as
// a check of nothing.
func TestRLSChargeOverLimitOnlyItsRule(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: ai
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, charge_over_limit: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`)
	desc := func(key string, h uint64) *commonrlv3.RateLimitDescriptor {
		d := envoytest.Desc(key, "x")
		d.HitsAddend = wrapperspb.UInt64(h)
		return d
	}
	resp := e.call(t, envoytest.Request("ai", desc("tokens", 12), desc("plain", 12)))
	if a, b := resp.GetStatuses()[0], resp.GetStatuses()[1]; a.GetCode() != codeOver || b.GetCode() != codeOver {
		t.Fatalf("12 of 10: statuses %v %v, want both OVER_LIMIT", a.GetCode(), b.GetCode())
	}
	resp = e.call(t, envoytest.Request("ai", desc("tokens", 0), desc("plain", 0)))
	if a, b := resp.GetStatuses()[0], resp.GetStatuses()[1]; a.GetCode() != codeOver || b.GetCode() != codeOK || b.GetLimitRemaining() != 10 {
		t.Errorf("checks: tokens %v, plain %v remaining %d; want OVER_LIMIT (12 charged) and OK 10 (nothing charged)",
			a.GetCode(), b.GetCode(), b.GetLimitRemaining())
	}
	c := e.store.Calls()[0]
	if c[0].Charge != ratelimit.ChargeAlways || c[1].Charge != ratelimit.ChargeIfAdmitted {
		t.Errorf("charge modes %v %v, want always and if_admitted", c[0].Charge, c[1].Charge)
	}
}

// TestRLSChargeOverLimitWithOverride: a limit override sent by Envoy on a
// charge_over_limit rule is charged the rule's way (the rule says how its
// descriptor is charged; the override only changes how much it may take).
func TestRLSChargeOverLimitWithOverride(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: ai
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, charge_over_limit: true}
`)
	desc := func(h uint64) *rlsv3.RateLimitRequest {
		d := envoytest.Desc("tokens", "t1")
		d.HitsAddend = wrapperspb.UInt64(h)
		d.Limit = &commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
		return envoytest.Request("ai", d)
	}
	if resp := e.call(t, desc(12)); resp.GetOverallCode() != codeOver {
		t.Fatalf("12 of an override of 10: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	if resp := e.call(t, desc(0)); resp.GetOverallCode() != codeOver {
		t.Errorf("check after 12 of 10 were charged: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	calls := e.store.Calls()
	if c0, c1 := calls[0][0], calls[1][0]; c0.Charge != ratelimit.ChargeAlways || c1.Charge != ratelimit.ChargeNever || c1.Hits != 1 {
		t.Errorf("store requests %v/%d and %v/%d, want always/12 and never/1", c0.Charge, c0.Hits, c1.Charge, c1.Hits)
	}
}
