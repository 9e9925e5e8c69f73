package envoy

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/policy"
)

// startRLSMetrics is startRLS with metrics options.
func startRLSMetrics(t *testing.T, yaml string, mo MetricsOptions, opts ...RLSOption) *env {
	t.Helper()
	e := &env{clock: testclock.New(t0), reg: prometheus.NewRegistry(), policy: writePolicy(t, yaml)}
	e.store = &recordingStore{Store: newTestStore(t, e.clock.Now)}
	var err error
	if e.metrics, err = NewMetricsWith(e.reg, mo); err != nil {
		t.Fatal(err)
	}
	p := e.policy
	if e.rls, err = NewRLS(e.store, PolicyFunc(func() *policy.Policy { return p }), e.metrics, opts...); err != nil {
		t.Fatal(err)
	}
	e.client = rlsv3.NewRateLimitServiceClient(serveLoopback(t, e.rls))
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
		e.call(t, request("st", desc("k", "a")))
	}
	// 10 admitted, the 9th and 10th past 8 = floor(10 x 0.8).
	wantStats(t, e.reg, APIRateLimit, "st.k", map[string]float64{StatTotalHits: 10, StatWithinLimit: 10, StatNearLimit: 2})
	req := request("st", desc("k", "a"))
	req.HitsAddend = 3
	e.call(t, req)
	wantStats(t, e.reg, APIRateLimit, "st.k", map[string]float64{StatTotalHits: 13, StatWithinLimit: 10, StatNearLimit: 2, StatOverLimit: 3})

	e.call(t, request("st", desc("s", "a")))
	e.call(t, request("st", desc("s", "a")))
	wantStats(t, e.reg, APIRateLimit, "st.s", map[string]float64{StatTotalHits: 2, StatWithinLimit: 1, StatNearLimit: 1, StatOverLimit: 1, StatShadowMode: 1})
}

// TestRuleMetricsLabels: the rule label is the rule's ID; detailed_metric
// puts the request's values in it, value_to_metric only its own level's.
func TestRuleMetricsLabels(t *testing.T) {
	t.Parallel()
	e := startRLS(t, statsPolicy)
	e.call(t, request("st", desc("d", "one")))
	e.call(t, request("st", desc("v", "p", "x", "q")))
	for _, rule := range []string{"st.d_one", "st.v.x_q"} {
		if got := ruleStat(t, e.reg, APIRateLimit, rule, StatTotalHits); got != 1 {
			t.Errorf("%s total_hits = %v, want 1", rule, got)
		}
	}
}

// TestRuleMetricsOverflow: past MaxRuleSeries distinct rule labels, hits
// are counted under OverflowRule, so detailed_metric cannot grow the series
// without bound.
func TestRuleMetricsOverflow(t *testing.T) {
	t.Parallel()
	e := startRLSMetrics(t, statsPolicy, MetricsOptions{MaxRuleSeries: 2})
	for _, v := range []string{"1", "2", "3", "4", "1"} {
		e.call(t, request("st", desc("d", v)))
	}
	for rule, want := range map[string]float64{"st.d_1": 2, "st.d_2": 1, OverflowRule: 2} {
		if got := ruleStat(t, e.reg, APIRateLimit, rule, StatTotalHits); got != want {
			t.Errorf("%s total_hits = %v, want %v", rule, got, want)
		}
	}
}

// TestRuleMetricsNearLimitRatio: the ratio is configurable; a bad one is
// refused.
func TestRuleMetricsNearLimitRatio(t *testing.T) {
	t.Parallel()
	e := startRLSMetrics(t, statsPolicy, MetricsOptions{NearLimitRatio: 0.5})
	for range 10 {
		e.call(t, request("st", desc("k", "a")))
	}
	if got := ruleStat(t, e.reg, APIRateLimit, "st.k", StatNearLimit); got != 5 {
		t.Errorf("near_limit at ratio 0.5 = %v, want 5", got)
	}
	for _, bad := range []float64{-0.1, 1.5} {
		if _, err := NewMetricsWith(prometheus.NewRegistry(), MetricsOptions{NearLimitRatio: bad}); err == nil {
			t.Errorf("ratio %v accepted", bad)
		}
	}
}
