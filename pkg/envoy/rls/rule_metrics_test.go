package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/policy"
)

// startRLSMetrics is startRLS with metrics options.
func startRLSMetrics(t *testing.T, yaml string, mo envoy.MetricsOptions, opts ...Option) *env {
	t.Helper()
	e := &env{clock: testclock.New(envoytest.T0), reg: prometheus.NewRegistry(), policy: envoytest.WritePolicy(t, yaml)}
	e.store = &envoytest.RecordingStore{Store: envoytest.NewTestStore(t, e.clock.Now)}
	var err error
	if e.metrics, err = envoy.NewMetricsWith(e.reg, mo); err != nil {
		t.Fatal(err)
	}
	p := e.policy
	if e.rls, err = NewRLS(e.store, envoy.PolicyFunc(func() *policy.Policy { return p }), e.metrics, opts...); err != nil {
		t.Fatal(err)
	}
	e.client = rlsv3.NewRateLimitServiceClient(envoytest.ServeLoopback(t, e.rls))
	return e
}

const statsPolicy = `
domain: st
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: d
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: v
    descriptors:
      - key: x
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestRuleMetricsCountHitsLikeEnvoyproxy: per rule, hits are split into
// within_limit, near_limit (past 80% of the limit), over_limit and
// shadow_mode, weighted by hits_addend, as envoyproxy/ratelimit's stats.
func TestRuleMetricsCountHitsLikeEnvoyproxy(t *testing.T) {
	t.Parallel()
	e := startRLS(t, statsPolicy)
	for range 10 {
		e.call(t, envoytest.Request("st", envoytest.Desc("k", "a")))
	}
	// 10 admitted, the 9th and 10th past 8 = floor(10 x 0.8).
	envoytest.WantStats(t, e.reg, envoy.APIRateLimit, "st.k", map[string]float64{envoy.StatTotalHits: 10, envoy.StatWithinLimit: 10, envoy.StatNearLimit: 2})
	req := envoytest.Request("st", envoytest.Desc("k", "a"))
	req.HitsAddend = 3
	e.call(t, req)
	envoytest.WantStats(t, e.reg, envoy.APIRateLimit, "st.k", map[string]float64{envoy.StatTotalHits: 13, envoy.StatWithinLimit: 10, envoy.StatNearLimit: 2, envoy.StatOverLimit: 3})

	e.call(t, envoytest.Request("st", envoytest.Desc("s", "a")))
	e.call(t, envoytest.Request("st", envoytest.Desc("s", "a")))
	envoytest.WantStats(t, e.reg, envoy.APIRateLimit, "st.s", map[string]float64{envoy.StatTotalHits: 2, envoy.StatWithinLimit: 1, envoy.StatNearLimit: 1, envoy.StatOverLimit: 1, envoy.StatShadowMode: 1})
}

// TestRuleMetricsLabels: the rule label is the rule's ID; detailed_metric
// puts the request's values in it, value_to_metric only its own level's.
func TestRuleMetricsLabels(t *testing.T) {
	t.Parallel()
	e := startRLS(t, statsPolicy)
	e.call(t, envoytest.Request("st", envoytest.Desc("d", "one")))
	e.call(t, envoytest.Request("st", envoytest.Desc("v", "p", "x", "q")))
	for _, rule := range []string{"st.d_one", "st.v.x_q"} {
		if got := envoytest.RuleStat(t, e.reg, envoy.APIRateLimit, rule, envoy.StatTotalHits); got != 1 {
			t.Errorf("%s total_hits = %v, want 1", rule, got)
		}
	}
}

// TestRuleMetricsOverflow: past MaxRuleSeries distinct rule labels, hits
// are counted under OverflowRule, so detailed_metric cannot grow the series
// without bound.
func TestRuleMetricsOverflow(t *testing.T) {
	t.Parallel()
	e := startRLSMetrics(t, statsPolicy, envoy.MetricsOptions{MaxRuleSeries: 2})
	for _, v := range []string{"1", "2", "3", "4", "1"} {
		e.call(t, envoytest.Request("st", envoytest.Desc("d", v)))
	}
	for rule, want := range map[string]float64{"st.d_1": 2, "st.d_2": 1, envoy.OverflowRule: 2} {
		if got := envoytest.RuleStat(t, e.reg, envoy.APIRateLimit, rule, envoy.StatTotalHits); got != want {
			t.Errorf("%s total_hits = %v, want %v", rule, got, want)
		}
	}
}

// TestRuleMetricsNearLimitRatio: the ratio is configurable; a bad one is
// refused.
func TestRuleMetricsNearLimitRatio(t *testing.T) {
	t.Parallel()
	e := startRLSMetrics(t, statsPolicy, envoy.MetricsOptions{NearLimitRatio: 0.5})
	for range 10 {
		e.call(t, envoytest.Request("st", envoytest.Desc("k", "a")))
	}
	if got := envoytest.RuleStat(t, e.reg, envoy.APIRateLimit, "st.k", envoy.StatNearLimit); got != 5 {
		t.Errorf("near_limit at ratio 0.5 = %v, want 5", got)
	}
	for _, bad := range []float64{-0.1, 1.5} {
		if _, err := envoy.NewMetricsWith(prometheus.NewRegistry(), envoy.MetricsOptions{NearLimitRatio: bad}); err == nil {
			t.Errorf("ratio %v accepted", bad)
		}
	}
}
