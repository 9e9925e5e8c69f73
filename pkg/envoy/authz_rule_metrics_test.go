package envoy

import (
	"testing"
)

// TestRuleMetricsAuthzRoutes: ext_authz route limits count under
// http.<route>.
func TestRuleMetricsAuthzRoutes(t *testing.T) {
	t.Parallel()
	e := startIdem(t, idemPolicy)
	for i := range 3 {
		e.post(t, "/limited", "acme", "k"+string(rune('0'+i)), []byte("{}"))
	}
	wantStats(t, e.reg, APIExtAuthz, "http.limited", map[string]float64{StatTotalHits: 3, StatWithinLimit: 2, StatNearLimit: 1, StatOverLimit: 1})
}
