package policy

import (
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func TestScopeGlobalLoadsOnDescriptorsAndRoutes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "edge.yaml", `domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 6000, algorithm: fixed_window, scope: global, floor: 0.05}
  - key: local
    rate_limit: {unit: second, requests_per_unit: 5, scope: region}
`)
	writeFile(t, dir, "http.yaml", `http:
  routes:
    - {name: api, path_prefix: /, rate_limits: [{requests_per_unit: 100, unit: second, algorithm: fixed_window, scope: GLOBAL}]}
`)
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := p.Domain("edge").Match([]ratelimit.Entry{{Key: "tenant"}})
	if !ok || m.Rule.Limits[0].Scope != ratelimit.Global || m.Rule.Limits[0].Floor != 0.05 {
		t.Fatalf("tenant: %+v", m.Rule)
	}
	if m, _ := p.Domain("edge").Match([]ratelimit.Entry{{Key: "local"}}); m.Rule.Limits[0].Scope != ratelimit.Regional {
		t.Errorf("local: scope %q, want region", m.Rule.Limits[0].Scope)
	}
	if got := p.HTTP.Routes[0].Limits[0]; got.Scope != ratelimit.Global || got.Floor != 0 {
		t.Errorf("route limit: %+v, want scope global, floor 0", got)
	}
}

func TestScopeProblems(t *testing.T) {
	t.Parallel()
	const rl = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: "
	for _, tc := range []struct {
		name, yaml, field, msg string
	}{
		{"unknown scope", rl + "{unit: second, requests_per_unit: 1, algorithm: fixed_window, scope: planet}",
			"descriptors[0].rate_limit.scope", `unknown scope "planet"`},
		{"not fixed_window", rl + "{unit: second, requests_per_unit: 1, scope: global}",
			"descriptors[0].rate_limit.scope", "needs algorithm: fixed_window"},
		{"with allotment", rl + "{unit: second, requests_per_unit: 1, algorithm: fixed_window, consistency: allotment, scope: global}",
			"descriptors[0].rate_limit.scope", "cannot be combined with consistency: allotment"},
		{"floor without global", rl + "{unit: second, requests_per_unit: 1, floor: 0.1}",
			"descriptors[0].rate_limit.floor", "scope: global only"},
		{"floor above one", rl + "{unit: second, requests_per_unit: 1, algorithm: fixed_window, scope: global, floor: 1.5}",
			"descriptors[0].rate_limit.floor", "fraction in [0, 1]"},
		{"floor not a number", rl + "{unit: second, requests_per_unit: 1, algorithm: fixed_window, scope: global, floor: lots}",
			"descriptors[0].rate_limit.floor", "fraction in [0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg, probs := loadErr(t, "d.yaml", tc.yaml)
			if len(probs) != 1 || !strings.Contains(msg, "d.yaml:") || !strings.Contains(msg, tc.field+": ") || !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q (%d problems)\nwant one, field %q, %q", msg, len(probs), tc.field, tc.msg)
			}
		})
	}
}
