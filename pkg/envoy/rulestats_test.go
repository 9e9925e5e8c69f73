package envoy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// ruleStat reads extauthz_rule_hits_total for one api, rule and stat.
func ruleStat(t *testing.T, reg *prometheus.Registry, api, rule, stat string) float64 {
	t.Helper()
	return counterValue(t, reg, "extauthz_rule_hits_total", map[string]string{"api": api, "rule": rule, "stat": stat})
}

func wantStats(t *testing.T, reg *prometheus.Registry, api, rule string, want map[string]float64) {
	t.Helper()
	for _, stat := range []string{StatTotalHits, StatOverLimit, StatNearLimit, StatWithinLimit, StatShadowMode} {
		if got := ruleStat(t, reg, api, rule, stat); got != want[stat] {
			t.Errorf("%s %s %s = %v, want %v", api, rule, stat, got, want[stat])
		}
	}
}
