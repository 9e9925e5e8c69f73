package policy

import (
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// consistencyPolicy writes consistency on every limit form: a descriptor's
// rate_limit and rate_limits, an http route's rate_limits and a tier.
const consistencyEdge = `domain: edge
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5, consistency: allotment}
  - key: b
    rate_limits:
      - {unit: second, requests_per_unit: 5, consistency: Exact}
      - {unit: minute, requests_per_unit: 50, algorithm: fixed_window, consistency: allotment}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 5}
`

const consistencyHTTP = `http:
  tiers:
    plans:
      attribute: {header: X-Plan}
      default: free
      limits:
        free: [{requests_per_unit: 10, unit: minute, consistency: allotment, algorithm: sliding_window}]
  routes:
    - {name: api, path_prefix: /api, tier_limits: plans}
    - {name: rest, path_prefix: /, rate_limits: [{requests_per_unit: 5, unit: second, consistency: allotment}]}
`

func TestConsistencyLoadsOnEveryLimitForm(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "edge.yaml", consistencyEdge)
	writeFile(t, dir, "http.yaml", consistencyHTTP)
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	dom := p.Domain("edge")
	for _, tc := range []struct {
		key  string
		want []ratelimit.Consistency
	}{
		{"a", []ratelimit.Consistency{ratelimit.Allotment}},
		{"b", []ratelimit.Consistency{ratelimit.Exact, ratelimit.Allotment}},
		{"c", []ratelimit.Consistency{""}},
	} {
		m, ok := dom.Match([]ratelimit.Entry{{Key: tc.key}})
		if !ok || len(m.Rule.Limits) != len(tc.want) {
			t.Fatalf("key %s: match %v %+v", tc.key, ok, m.Rule)
		}
		for i, w := range tc.want {
			if got := m.Rule.Limits[i].Consistency; got != w {
				t.Errorf("key %s limit %d: consistency %q, want %q", tc.key, i, got, w)
			}
		}
	}
	got := p.Allotments()
	want := []string{`domain "edge" rule edge.a`, `domain "edge" rule edge.b`, `http route "rest"`, `tier set "plans" tier "free"`}
	if len(got) != len(want) {
		t.Fatalf("Allotments %+v, want %d", got, len(want))
	}
	for i, w := range want {
		if got[i].Where != w || got[i].Limit.Consistency != ratelimit.Allotment {
			t.Errorf("Allotments[%d] = %+v, want at %s", i, got[i], w)
		}
	}
}

func TestConsistencyProblems(t *testing.T) {
	t.Parallel()
	const rl = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: "
	for _, tc := range []struct {
		name, file, yaml, field, msg string
	}{
		{"unknown mode", "d.yaml", rl + "{unit: second, requests_per_unit: 1, consistency: eventual}",
			"descriptors[0].rate_limit.consistency", `unknown consistency "eventual"`},
		{"sliding_log", "d.yaml", rl + "{unit: second, requests_per_unit: 1, algorithm: sliding_log, consistency: allotment}",
			"descriptors[0].rate_limit.consistency", "sliding_log cannot use allotment"},
		{"with unlimited", "d.yaml", rl + "{unlimited: true, consistency: allotment}",
			"descriptors[0].rate_limit.consistency", "must not be set when unlimited"},
		{"http route", "h.yaml", "http:\n  routes:\n    - {name: r, path_prefix: /, rate_limits: [{unit: second, requests_per_unit: 1, consistency: strong}]}",
			"http.routes[0].rate_limits[0].consistency", "unknown consistency"},
		{"tier", "t.yaml", "http:\n  tiers:\n    s:\n      attribute: {header: x}\n      default: f\n      limits: {f: [{unit: second, requests_per_unit: 1, algorithm: sliding_log, consistency: allotment}]}\n  routes: [{name: r, path_prefix: /, tier_limits: s}]",
			"http.tiers.s.limits.f[0].consistency", "sliding_log cannot use allotment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg, probs := loadErr(t, tc.file, tc.yaml)
			if len(probs) != 1 || !strings.Contains(msg, tc.file+":") || !strings.Contains(msg, tc.field+": ") || !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q (%d problems)\nwant one, in %s, field %q, %q", msg, len(probs), tc.file, tc.field, tc.msg)
			}
		})
	}
}
