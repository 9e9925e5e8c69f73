package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// envoyproxy/ratelimit's README blocks a value with requests_per_unit: 0; a
// config written that way must keep blocking here, without store calls.
func TestRLSZeroRequestsPerUnitBlocksEveryRequest(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: client
    value: banned
    rate_limit: {name: banned, unit: hour, requests_per_unit: 0}
  - key: client
    value: watched
    shadow_mode: true
    rate_limit: {name: watched, unit: hour, requests_per_unit: 0}
`)
	for range 2 {
		resp := e.call(t, envoytest.Request("api", envoytest.Desc("client", "banned")))
		if resp.GetOverallCode() != codeOver {
			t.Fatalf("overall_code = %v, want OVER_LIMIT", resp.GetOverallCode())
		}
		wantStatus(t, resp.GetStatuses()[0], codeOver, "banned", 0, rlsv3.RateLimitResponse_RateLimit_HOUR, 0, time.Hour)
		wantHeader(t, resp, "Retry-After", "3600")
	}
	shadow := e.call(t, envoytest.Request("api", envoytest.Desc("client", "watched")))
	if shadow.GetOverallCode() != codeOK || shadow.GetStatuses()[0].GetCode() != codeOK {
		t.Errorf("shadow block-all answered %v, want OK", shadow)
	}
	if n := len(e.store.Calls()); n != 0 {
		t.Errorf("%d store calls for block-all rules, want 0", n)
	}
	labels := map[string]string{"api": envoy.APIRateLimit, "domain": "api", "outcome": envoy.OutcomeShadow}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != 1 {
		t.Errorf("decisions_total{outcome=shadow} = %v, want 1", got)
	}
}
