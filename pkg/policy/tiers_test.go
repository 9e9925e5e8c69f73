package policy

import (
	"strings"
	"testing"
)

// tiersPolicy has one tier set, plans, read from x-plan; route api uses it.
const tiersPolicy = `http:
  tiers:
    plans:
      attribute: {header: X-Plan}
      default: free
      limits:
        free: [{requests_per_unit: 10, unit: minute, name: free}]
        pro: [{requests_per_unit: 100, unit: minute, name: pro}]
        enterprise:
          - {requests_per_unit: 1000, unit: minute, name: enterprise}
          - {requests_per_unit: 100, unit: second, name: enterprise-burst}
    by-claim:
      attribute: {jwt_claim: {metadata_key: jwt_payload, claim: plan}}
      default: basic
      limits: {basic: [{requests_per_unit: 1, unit: second}]}
    by-extension:
      attribute: {context_extension: plan}
      default: basic
      limits: {basic: [{requests_per_unit: 1, unit: second}]}
  routes:
    - {name: api, path_prefix: /api, tier_limits: plans}
    - {name: other, path_prefix: /, rate_limits: [{requests_per_unit: 5, unit: second}]}
`

func TestTiersLoad(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "tiers.yaml", tiersPolicy).HTTP
	api := h.Route("", "GET", "/api/x")
	if api.Tiers != h.Tiers["plans"] || !api.HasLimits() || len(api.Limits) != 0 {
		t.Fatalf("route api: tiers %v, limits %v", api.Tiers, api.Limits)
	}
	if a := api.Tiers.Attribute; a.Header != "x-plan" {
		t.Errorf("attribute %+v, want header x-plan (lower-cased)", a)
	}
	if a := h.Tiers["by-claim"].Attribute; a.MetadataKey != "jwt_payload" || a.Claim != "plan" {
		t.Errorf("jwt_claim attribute %+v", a)
	}
	if a := h.Tiers["by-extension"].Attribute; a.Extension != "plan" {
		t.Errorf("context_extension attribute %+v", a)
	}
	for _, tt := range []struct {
		value, tier string
		limits      int
	}{
		{"pro", "pro", 1},
		{"enterprise", "enterprise", 2},
		{"free", "free", 1},
		{"", "free", 1},         // no tier: the default
		{"platinum", "free", 1}, // unknown: the default, never a budget of its own
		{"Pro", "free", 1},      // tier names are exact
	} {
		ls, tier := api.LimitsFor(tt.value)
		if tier != tt.tier || len(ls) != tt.limits || ls[0].Name != tt.tier {
			t.Errorf("LimitsFor(%q) = %v, %q; want tier %q with %d limits", tt.value, ls, tier, tt.tier, tt.limits)
		}
	}
	other := h.Route("", "GET", "/x")
	if ls, tier := other.LimitsFor("pro"); tier != "" || len(ls) != 1 || ls[0].Requests != 5 {
		t.Errorf("route without tiers: LimitsFor = %v, %q; want its own limit", ls, tier)
	}
	if got := h.Tiers["plans"].Tiers(); strings.Join(got, ",") != "enterprise,free,pro" {
		t.Errorf("Tiers() = %v", got)
	}
}

// TestTiersValidation has one case per rule of tier sets and tier_limits,
// each naming the file, line, field and problem.
func TestTiersValidation(t *testing.T) {
	t.Parallel()
	const head = "http:\n  tiers:\n    plans:\n"
	const attr = "      attribute: {header: x-plan}\n"
	const def = "      default: free\n"
	const free = "      limits:\n        free: [{requests_per_unit: 10, unit: minute}]\n"
	const route = "  routes:\n    - {name: api, path_prefix: /api, tier_limits: plans}\n"
	tests := []struct {
		name, yaml, where, msg string
	}{
		{"tier names no limits", head + attr + def + "      limits:\n        free:\n        pro: [{requests_per_unit: 1, unit: second}]\n" + route,
			":7: http.tiers.plans.limits.free: ", `tier "free" names no limits`},
		{"tier with an empty list", head + attr + def + "      limits:\n        free: []\n" + route,
			":7: http.tiers.plans.limits.free: ", "must hold at least one limit"},
		{"no tiers", head + attr + def + "      limits: {}\n" + route,
			":6: http.tiers.plans.limits: ", "must name at least one tier"},
		{"limits missing", head + attr + def + route,
			":3: http.tiers.plans.limits: ", "is required"},
		{"default not a tier", head + attr + "      default: gold\n" + free + route,
			":5: http.tiers.plans.default: ", `"gold" is not a tier of this set (its tiers: free)`},
		{"default missing", head + attr + free + route,
			":3: http.tiers.plans.default: ", "is required: the tier of callers without one"},
		{"attribute missing", head + def + free + route,
			":3: http.tiers.plans.attribute: ", "is required"},
		{"attribute with two sources", head + "      attribute: {header: x-plan, context_extension: plan}\n" + def + free + route,
			":4: http.tiers.plans.attribute: ", "an attribute is one of header, jwt_claim, context_extension"},
		{"attribute of an identity-only kind", head + "      attribute: {principal: true}\n" + def + free + route,
			":4: http.tiers.plans.attribute.principal: ", "unknown field"},
		{"attribute jwt_claim without claim", head + "      attribute: {jwt_claim: {metadata_key: jwt_payload}}\n" + def + free + route,
			":4: http.tiers.plans.attribute.jwt_claim: ", "needs metadata_key"},
		{"bad attribute header", head + "      attribute: {header: 'x plan'}\n" + def + free + route,
			":4: http.tiers.plans.attribute.header: ", `"x plan" is not a valid header name`},
		{"bad tier limit", head + attr + def + "      limits:\n        free: [{requests_per_unit: 10, unit: fortnight}]\n" + route,
			":7: http.tiers.plans.limits.free[0].unit: ", `unknown unit "fortnight"`},
		{"unknown tier set field", head + attr + def + free + "      plans: [free]\n" + route,
			":8: http.tiers.plans.plans: ", "unknown field"},
		{"route refers to an unknown tier set", head + attr + def + free + "  routes:\n    - {name: api, path_prefix: /api, tier_limits: plan}\n",
			":9: http.routes[0].tier_limits: ", `unknown tier set "plan" (http.tiers defines: plans)`},
		{"route refers to a tier set with no tiers section", "http:\n  routes:\n    - {name: api, path_prefix: /api, tier_limits: plans}\n",
			":3: http.routes[0].tier_limits: ", `unknown tier set "plans" (http.tiers defines: none)`},
		{"route with empty tier_limits", head + attr + def + free + "  routes:\n    - {name: api, path_prefix: /api, tier_limits: ''}\n",
			":9: http.routes[0].tier_limits: ", "must name a tier set"},
		{"route with rate_limits and tier_limits", head + attr + def + free +
			"  routes:\n    - name: api\n      path_prefix: /api\n      rate_limits: [{requests_per_unit: 1, unit: second}]\n      tier_limits: plans\n",
			":12: http.routes[0].tier_limits: ", "set rate_limits or tier_limits, not both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, _ := loadErr(t, "tiers.yaml", tt.yaml)
			if !strings.Contains(msg, "tiers.yaml"+tt.where+tt.msg) {
				t.Errorf("error %q\nwant tiers.yaml%s%s", msg, tt.where, tt.msg)
			}
		})
	}
}
