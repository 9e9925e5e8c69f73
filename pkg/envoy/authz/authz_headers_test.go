package authz

import (
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// TestHeaderStyleAuthz429: an ext_authz route's header_style applies to its
// 429 too.
func TestHeaderStyleAuthz429(t *testing.T) {
	t.Parallel()
	e := startIdem(t, `
http:
  tenant: {header: x-tenant-id, default: public}
  header_style: x-ratelimit
  routes:
    - name: limited
      path_prefix: /limited
      rate_limits: [{requests_per_unit: 1, unit: minute, algorithm: fixed_window, name: per-tenant}]
`)
	e.check(t, checkReq("GET", "/limited", nil, "x-tenant-id", "acme"))
	resp := e.check(t, checkReq("GET", "/limited", nil, "x-tenant-id", "acme"))
	wantDenied(t, resp, 429, ProblemQuotaExceeded)
	limit := deniedHeader(resp, "x-ratelimit-limit")
	if len(limit) != 1 || envoytest.SFList(t, "x-ratelimit-limit", limit[0])[0].(httpsfv.Item).Value != int64(1) {
		t.Errorf("x-ratelimit-limit %v", limit)
	}
	if rem := deniedHeader(resp, "x-ratelimit-remaining"); len(rem) != 1 || envoytest.SFInt(t, "x-ratelimit-remaining", rem[0]) != 0 {
		t.Errorf("x-ratelimit-remaining %v", rem)
	}
	if pol := deniedHeader(resp, envoy.HeaderRateLimitPolicy); len(pol) != 0 {
		t.Errorf("RateLimit-Policy sent with the x-ratelimit style: %v", pol)
	}
}
