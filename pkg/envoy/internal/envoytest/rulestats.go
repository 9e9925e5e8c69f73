package envoytest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
)

// RuleStat reads extauthz_rule_hits_total for one api, rule and stat.
func RuleStat(t *testing.T, reg *prometheus.Registry, api, rule, stat string) float64 {
	t.Helper()
	return CounterValue(t, reg, "extauthz_rule_hits_total", map[string]string{"api": api, "rule": rule, "stat": stat})
}

// WantStats fails t unless each stat of api and rule has its wanted value
// (absent stats want 0).
func WantStats(t *testing.T, reg *prometheus.Registry, api, rule string, want map[string]float64) {
	t.Helper()
	for _, stat := range []string{envoy.StatTotalHits, envoy.StatOverLimit, envoy.StatNearLimit, envoy.StatWithinLimit, envoy.StatShadowMode} {
		if got := RuleStat(t, reg, api, rule, stat); got != want[stat] {
			t.Errorf("%s %s %s = %v, want %v", api, rule, stat, got, want[stat])
		}
	}
}
