package authz

import (
	"testing"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// TestRuleMetricsAuthzRoutes: ext_authz route limits count under
// http.<route>.
func TestRuleMetricsAuthzRoutes(t *testing.T) {
	t.Parallel()
	e := startIdem(t, idemPolicy)
	for i := range 3 {
		e.post(t, "/limited", "acme", "k"+string(rune('0'+i)), []byte("{}"))
	}
	envoytest.WantStats(t, e.reg, envoy.APIExtAuthz, "http.limited", map[string]float64{envoy.StatTotalHits: 3, envoy.StatWithinLimit: 2, envoy.StatNearLimit: 1, envoy.StatOverLimit: 1})
}
