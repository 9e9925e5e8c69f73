package envoy

import (
	"fmt"
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Per-rule statistics, the "stat" label of extauthz_rule_hits_total: the
// per-key stats of envoyproxy/ratelimit, counted in hits (hits_addend
// weighted) as there.
const (
	StatTotalHits   = "total_hits"   // every hit decided under the rule
	StatOverLimit   = "over_limit"   // hits of denied requests (shadowed ones included)
	StatNearLimit   = "near_limit"   // admitted hits past the near-limit ratio of the tightest limit
	StatWithinLimit = "within_limit" // admitted hits
	StatShadowMode  = "shadow_mode"  // hits over the limit that shadow mode admitted
)

// OverflowRule is the "rule" label once MaxRuleSeries distinct rules have
// been seen: the series stay bounded whatever detailed_metric lets in.
const OverflowRule = "_overflow"

// Defaults of MetricsOptions.
const (
	DefaultNearLimitRatio = 0.8
	DefaultMaxRuleSeries  = 1000
)

// MetricsOptions tune NewMetrics; the zero value takes the defaults.
type MetricsOptions struct {
	// NearLimitRatio is the share of a limit past which admitted hits count
	// as near_limit, in (0, 1]; default DefaultNearLimitRatio (as
	// envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
	NearLimitRatio float64
	// MaxRuleSeries bounds the distinct "rule" label values; later rules
	// are counted under OverflowRule. Default DefaultMaxRuleSeries; negative
	// turns the per-rule metric off.
	MaxRuleSeries int
}

func (o MetricsOptions) validate() error {
	if o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(o.NearLimitRatio) {
		return fmt.Errorf("envoy: near-limit ratio %v not in (0, 1]", o.NearLimitRatio)
	}
	return nil
}

// ruleMetrics counts extauthz_rule_hits_total{api,rule,stat}.
type ruleMetrics struct {
	hits  *prometheus.CounterVec
	ratio float64
	max   int
	rules *LabelCap
}

// LabelCap hands out at most max distinct values of a label whose values
// come from configuration, then OverflowRule: a policy (or detailed_metric)
// cannot grow /metrics without bound. Values given out stay given out, so
// a series never moves to _overflow while the process runs.
type LabelCap struct {
	max int

	mu   sync.Mutex
	seen map[string]bool // values given out, at most max
}

// NewLabelCap returns a LabelCap giving out at most most values.
func NewLabelCap(most int) *LabelCap {
	return &LabelCap{max: most, seen: map[string]bool{}}
}

// Label returns v, or OverflowRule once max distinct values are out.
func (c *LabelCap) Label(v string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[v] {
		return v
	}
	if len(c.seen) >= c.max {
		return OverflowRule
	}
	c.seen[v] = true
	return v
}

func newRuleMetrics(reg prometheus.Registerer, o MetricsOptions) (*ruleMetrics, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.NearLimitRatio == 0 {
		o.NearLimitRatio = DefaultNearLimitRatio
	}
	if o.MaxRuleSeries == 0 {
		o.MaxRuleSeries = DefaultMaxRuleSeries
	}
	m := &ruleMetrics{ratio: o.NearLimitRatio, max: o.MaxRuleSeries, rules: NewLabelCap(o.MaxRuleSeries)}
	m.hits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_rule_hits_total",
		Help: "Hits per rate-limit rule (RLS: the rule's metric ID; ext_authz: http.<route>) and stat " +
			"(total_hits, over_limit, near_limit, within_limit, shadow_mode).",
	}, []string{"api", "rule", "stat"})
	if err := reg.Register(m.hits); err != nil {
		return nil, fmt.Errorf("envoy: register rule metrics: %w", err)
	}
	return m, nil
}

// count records one decided descriptor (or ext_authz route) of hits hits.
// shadow says whether a denial was answered OK by shadow mode.
func (m *ruleMetrics) count(api, rule string, hits int64, dec ratelimit.Decision, shadow bool) {
	if m == nil || m.max < 0 || rule == "" || hits <= 0 {
		return
	}
	rule = m.rules.Label(rule)
	h := float64(hits)
	add := func(stat string, v float64) {
		if v > 0 {
			m.hits.WithLabelValues(api, rule, stat).Add(v)
		}
	}
	add(StatTotalHits, h)
	if !dec.Allowed {
		// A denied request charges nothing here, so all its hits are over
		// (envoyproxy/ratelimit charges them, and splits the ones that fit).
		add(StatOverLimit, h)
		if shadow {
			add(StatShadowMode, h)
		}
		return
	}
	add(StatWithinLimit, h)
	add(StatNearLimit, m.nearHits(hits, dec))
}

// nearHits is how many of the admitted hits went past the near-limit
// threshold of the tightest limit: floor(limit x ratio) used hits.
func (m *ruleMetrics) nearHits(hits int64, dec ratelimit.Decision) float64 {
	if len(dec.Results) == 0 {
		return 0
	}
	r := dec.Results[Tightest(dec)]
	if r.Limit <= 0 {
		return 0
	}
	threshold := int64(math.Floor(float64(r.Limit) * m.ratio))
	used := r.Limit - r.Remaining // after this request
	return float64(min(hits, max(used-threshold, 0)))
}

// CountRule counts one decision under a rate-limit rule in
// extauthz_rule_hits_total: hits hits of api under rule, decided dec;
// shadow says whether a denial was answered OK by shadow mode.
func (m *Metrics) CountRule(api, rule string, hits int64, dec ratelimit.Decision, shadow bool) {
	m.rules.count(api, rule, hits, dec, shadow)
}

// Tightest picks the result a descriptor's status reports: when denied, the
// denying limit that frees up last (its wait is the real one); when
// admitted, the limit with the fewest remaining hits.
func Tightest(dec ratelimit.Decision) int {
	best := 0
	for i, r := range dec.Results {
		b := dec.Results[best]
		if dec.Allowed {
			if r.Remaining < b.Remaining {
				best = i
			}
			continue
		}
		if !r.Allowed && (b.Allowed || r.RetryAfter > b.RetryAfter) {
			best = i
		}
	}
	return best
}
