package rls

import (
	"testing"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// statusCodes returns the overall code and every descriptor's code of a response.
func statusCodes(resp *rlsv3.RateLimitResponse) (rlsv3.RateLimitResponse_Code, []rlsv3.RateLimitResponse_Code) {
	var per []rlsv3.RateLimitResponse_Code
	for _, st := range resp.GetStatuses() {
		per = append(per, st.GetCode())
	}
	return resp.GetOverallCode(), per
}

func wantCodes(t *testing.T, what string, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, per ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	gotOverall, gotPer := statusCodes(resp)
	if gotOverall != overall || len(gotPer) != len(per) {
		t.Fatalf("%s: overall %v statuses %v, want %v %v", what, gotOverall, gotPer, overall, per)
	}
	for i := range per {
		if gotPer[i] != per[i] {
			t.Errorf("%s: status[%d] %v, want %v", what, i, gotPer[i], per[i])
		}
	}
}

// TestRLSUnnamedRuleHasEmptyCurrentLimitName: a rule the policy names not
// reports current_limit with an empty name (Envoy appends a non-empty name
// to X-RateLimit-Limit), while the RateLimit fields still name it by its ID.
func TestRLSUnnamedRuleHasEmptyCurrentLimitName(t *testing.T) {
	t.Parallel()
	e := startRLS(t, "domain: api\ndescriptors:\n  - key: route\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	resp := e.call(t, envoytest.Request("api", envoytest.Desc("route", "/x")))
	if name := resp.GetStatuses()[0].GetCurrentLimit().GetName(); name != "" {
		t.Errorf("current_limit.name = %q, want empty", name)
	}
	wantHeader(t, resp, "RateLimit-Policy", `"api.route";q=5;w=60`)
}

const quotaPolicy = `
domain: ai
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`

// TestRLSQuotaMode: as in envoyproxy/ratelimit, a quota_mode descriptor over
// its limit reports OVER_LIMIT in its own status but denies the request only
// when every quota descriptor of it is over; a plain descriptor over its
// limit denies as usual.
func TestRLSQuotaMode(t *testing.T) {
	t.Parallel()
	e := startRLS(t, quotaPolicy)
	req := envoytest.Request("ai", envoytest.Desc("q1", "a"), envoytest.Desc("q2", "a"))
	wantCodes(t, "first", e.call(t, req), codeOK, codeOK, codeOK)
	r := e.call(t, req)
	wantCodes(t, "q1 exhausted", r, codeOK, codeOver, codeOK)
	if _, ok := header(r, envoy.HeaderRetryAfter); ok {
		t.Error("admitted with one quota exhausted, but Retry-After was sent")
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", map[string]string{"api": envoy.APIRateLimit, "outcome": envoy.OutcomeOverLimit}); got != 1 {
		t.Errorf("over_limit decisions = %v, want 1", got)
	}
	r = e.call(t, req)
	wantCodes(t, "both exhausted", r, codeOver, codeOver, codeOver)
	wantHeader(t, r, envoy.HeaderRetryAfter, "45")

	// A plain descriptor over its limit denies even when quotas have room.
	e.call(t, envoytest.Request("ai", envoytest.Desc("plain", "b")))
	wantCodes(t, "plain over", e.call(t, envoytest.Request("ai", envoytest.Desc("q1", "fresh"), envoytest.Desc("plain", "b"))), codeOver, codeOK, codeOver)
}

// TestRLSGlobalQuotaMode: with every descriptor in quota mode an unmatched
// descriptor counts as a quota descriptor with room, so a request carrying
// one is never denied, as with envoyproxy/ratelimit's QUOTA_MODE.
func TestRLSGlobalQuotaMode(t *testing.T) {
	t.Parallel()
	e := startRLS(t, quotaPolicy, WithGlobalQuotaMode(true))
	e.call(t, envoytest.Request("ai", envoytest.Desc("plain", "c")))
	wantCodes(t, "plain over, unmatched with room", e.call(t, envoytest.Request("ai", envoytest.Desc("plain", "c"), envoytest.Desc("nomatch", "x"))),
		codeOK, codeOver, codeOK)
	wantCodes(t, "plain alone", e.call(t, envoytest.Request("ai", envoytest.Desc("plain", "c"))), codeOver, codeOver)
}

// TestRLSGlobalShadowMode: the request that would be denied is answered OK
// with no Retry-After; the descriptor's own status still says OVER_LIMIT
// (as envoyproxy/ratelimit's SHADOW_MODE leaves it) and the decision is
// counted as shadow.
func TestRLSGlobalShadowMode(t *testing.T) {
	t.Parallel()
	e := startRLS(t, quotaPolicy, WithGlobalShadowMode(true))
	req := envoytest.Request("ai", envoytest.Desc("plain", "d"))
	e.call(t, req)
	r := e.call(t, req)
	wantCodes(t, "over in global shadow", r, codeOK, codeOver)
	if _, ok := header(r, envoy.HeaderRetryAfter); ok {
		t.Error("Retry-After sent in global shadow mode")
	}
	wantHeader(t, r, "RateLimit", `"ai.plain";r=0;t=45`)
	labels := map[string]string{"api": envoy.APIRateLimit, "outcome": envoy.OutcomeShadow}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != 1 {
		t.Errorf("shadow decisions = %v, want 1", got)
	}
}

const metadataPolicy = `
domain: md
descriptors:
  - key: a
    metadata: {team: {name: alpha, tier: 1}, first: a}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    metadata: {team: {name: beta, region: eu}, first: b, only_b: true}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: c
    metadata: {from_c: true}
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestRLSResponseMetadata: with response metadata on, the response carries
// the domain, the descriptors and the merged metadata of the descriptors
// within their limits (first value wins, mappings merge); a descriptor over
// its limit adds none. Off (the default) there is none.
func TestRLSResponseMetadata(t *testing.T) {
	t.Parallel()
	off := startRLS(t, metadataPolicy)
	if md := off.call(t, envoytest.Request("md", envoytest.Desc("a", "1"))).GetDynamicMetadata(); md != nil {
		t.Errorf("metadata without the option: %v", md)
	}
	e := startRLS(t, metadataPolicy, WithResponseMetadata(true))
	e.call(t, envoytest.Request("md", envoytest.Desc("c", "1")))
	req := envoytest.Request("md", envoytest.Desc("a", "1"), envoytest.Desc("b", "1"), envoytest.Desc("c", "1"))
	req.HitsAddend = 1
	md := e.call(t, req).GetDynamicMetadata().AsMap()
	want, err := structpb.NewStruct(map[string]any{
		"domain": "md",
		"descriptors": []any{
			map[string]any{"entries": []any{"a=1"}},
			map[string]any{"entries": []any{"b=1"}},
			map[string]any{"entries": []any{"c=1"}},
		},
		"hitsAddend": 1.0,
		"metadata": map[string]any{
			"team":   map[string]any{"name": "alpha", "tier": 1.0, "region": "eu"},
			"first":  "a",
			"only_b": true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, w := mustJSON(t, md), mustJSON(t, want.AsMap()); got != w {
		t.Errorf("dynamic metadata\n got %s\nwant %s", got, w)
	}

	// An override is rendered in a stable form (envoyproxy/ratelimit uses the
	// proto's String(), whose spacing protobuf-go varies on purpose).
	o := envoytest.Desc("a", "2")
	o.Limit = &commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
	o.HitsAddend = wrapperspb.UInt64(2)
	got := e.call(t, envoytest.Request("md", o)).GetDynamicMetadata().AsMap()["descriptors"].([]any)[0].(map[string]any)
	if got["limit"] != "requests_per_unit:3 unit:MINUTE" || got["hitsAddend"] != 2.0 {
		t.Errorf("override descriptor metadata %v", got)
	}
}

func mustJSON(t *testing.T, v map[string]any) string {
	t.Helper()
	s, err := structpb.NewStruct(v)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
