package rls

import (
	"fmt"
	"testing"

	"github.com/dunglas/httpsfv"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// param returns an item parameter.
func param(t *testing.T, m httpsfv.Member, name string) any {
	t.Helper()
	it, ok := m.(httpsfv.Item)
	if !ok {
		t.Fatalf("member %v is not an item", m)
	}
	v, _ := it.Params.Get(name)
	return v
}

func headerMap(resp *rlsv3.RateLimitResponse) map[string]string {
	out := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		out[h.GetKey()] = h.GetValue()
	}
	return out
}

const stylePolicy = `
domain: hs
header_style: %s
descriptors:
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 3, algorithm: fixed_window, name: per-minute}
      - {unit: hour, requests_per_unit: 100, algorithm: fixed_window, name: hourly}
`

// TestHeaderStyleIETFParses: the default style's fields are sf-lists of
// named items with q/w and r/t parameters.
func TestHeaderStyleIETFParses(t *testing.T) {
	t.Parallel()
	e := startRLS(t, "domain: hs\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per-minute}\n")
	hs := headerMap(e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a"))))
	pol := envoytest.SFList(t, envoy.HeaderRateLimitPolicy, hs[envoy.HeaderRateLimitPolicy])
	st := envoytest.SFList(t, envoy.HeaderRateLimit, hs[envoy.HeaderRateLimit])
	if len(pol) != 1 || pol[0].(httpsfv.Item).Value != "per-minute" || param(t, pol[0], "q") != int64(3) || param(t, pol[0], "w") != int64(60) {
		t.Errorf("RateLimit-Policy %q", hs[envoy.HeaderRateLimitPolicy])
	}
	if len(st) != 1 || param(t, st[0], "r") != int64(2) {
		t.Errorf("RateLimit %q", hs[envoy.HeaderRateLimit])
	}
}

// TestHeaderStyleDraft03: the ratelimit and x-ratelimit styles send the
// draft-03 trio (and nothing of the IETF pair): limit is an sf-list whose
// first member is the tightest limit's quota followed by one quota policy
// per limit; remaining and reset are sf-integers of that limit.
func TestHeaderStyleDraft03(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ style, prefix string }{{"ratelimit", "ratelimit-"}, {"x-ratelimit", "x-ratelimit-"}} {
		e := startRLS(t, fmt.Sprintf(stylePolicy, c.style))
		e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a")))
		hs := headerMap(e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a"))))
		if _, ok := hs[envoy.HeaderRateLimitPolicy]; ok {
			t.Errorf("%s: RateLimit-Policy sent too", c.style)
		}
		limit := envoytest.SFList(t, c.prefix+"limit", hs[c.prefix+"limit"])
		if len(limit) != 3 || limit[0].(httpsfv.Item).Value != int64(3) {
			t.Fatalf("%s: %slimit %q, want the tightest quota then two policies", c.style, c.prefix, hs[c.prefix+"limit"])
		}
		if param(t, limit[1], "w") != int64(60) || param(t, limit[2], "w") != int64(3600) || param(t, limit[2], "name") != "hourly" {
			t.Errorf("%s: quota policies %q", c.style, hs[c.prefix+"limit"])
		}
		if r := envoytest.SFInt(t, c.prefix+"remaining", hs[c.prefix+"remaining"]); r != 1 {
			t.Errorf("%s: remaining %d, want 1 (per-minute, the tightest)", c.style, r)
		}
		if r := envoytest.SFInt(t, c.prefix+"reset", hs[c.prefix+"reset"]); r != 45 {
			t.Errorf("%s: reset %d, want 45", c.style, r)
		}
		e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a")))
		over := headerMap(e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a"))))
		if envoytest.SFInt(t, c.prefix+"remaining", over[c.prefix+"remaining"]) != 0 || over[envoy.HeaderRetryAfter] != "45" {
			t.Errorf("%s: over the limit: %v", c.style, over)
		}
	}
}

// TestHeaderStyleNone: no rate-limit fields, but Retry-After on a denial.
func TestHeaderStyleNone(t *testing.T) {
	t.Parallel()
	e := startRLS(t, fmt.Sprintf(stylePolicy, "none"))
	if hs := headerMap(e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a")))); len(hs) != 0 {
		t.Errorf("admitted: headers %v, want none", hs)
	}
	e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a")))
	e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a")))
	if hs := headerMap(e.call(t, envoytest.Request("hs", envoytest.Desc("k", "a")))); len(hs) != 1 || hs[envoy.HeaderRetryAfter] != "45" {
		t.Errorf("denied: headers %v, want only Retry-After", hs)
	}
}
