package policy

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// envoyproxyConfig is written as envoyproxy/ratelimit documents its format
// (its README's examples: nested descriptors, key-only defaults, a specific
// value before the default, depth matching, wildcards, shadow_mode,
// replaces, detailed_metric, unlimited), with no field of ours.
const envoyproxyConfig = `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100

  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: SECOND
      requests_per_unit: 1

  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second

  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          name: specific_limit
          requests_per_unit: 20
          unit: second
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: minute

  - key: path
    value: /api/v1/*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/v1/exact
    rate_limit:
      unit: hour
      requests_per_unit: 7
  - key: path
    value: "*/admin"
    rate_limit:
      unit: week
      requests_per_unit: 1
  - key: path
    value: /static/*.css
    rate_limit:
      unit: month
      requests_per_unit: 1000
  - key: path
    rate_limit:
      unit: year
      requests_per_unit: 99

  - key: ldap
    rate_limit:
      unlimited: true
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: placeholder
    descriptors:
      - key: leaf
  - key: empty_limit
    rate_limit:
`

func entries(kv ...string) []ratelimit.Entry {
	out := make([]ratelimit.Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, ratelimit.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func mustLoad(t *testing.T, name, content string) *Policy {
	t.Helper()
	p, err := Load(writeFile(t, t.TempDir(), name, content))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMatchEnvoyproxyFormat(t *testing.T) {
	t.Parallel()
	dom := mustLoad(t, "messaging.yaml", envoyproxyConfig).Domain("messaging")
	if dom == nil {
		t.Fatal("domain messaging not loaded")
	}
	const day = 24 * time.Hour
	tests := []struct {
		name     string
		entries  []ratelimit.Entry
		id       string        // "" = no match
		requests int64         // of the single limit
		period   time.Duration // of the single limit
	}{
		{"nested value then key-only", entries("message_type", "marketing", "to_number", "2061111111"), "messaging.message_type_marketing.to_number", 5, day},
		{"top-level key-only default", entries("to_number", "2061111111"), "messaging.to_number", 100, day},
		{"unknown first value", entries("message_type", "transactional", "to_number", "1"), "", 0, 0},
		{"placeholder level has no limit", entries("message_type", "marketing"), "", 0, 0},
		{"default for any address", entries("remote_address", "50.0.0.1"), "messaging.remote_address", 10, time.Second},
		{"specific value before default", entries("remote_address", "50.0.0.5"), "messaging.remote_address_50.0.0.5", 1, time.Second},
		{"more entries than levels", entries("key", "value", "subkey", "subvalue"), "", 0, 0},
		{"same depth", entries("key", "value"), "messaging.key_value", 300, time.Second},
		{"exact beats wildcard", entries("path", "/api/v1/exact"), "messaging.path_/api/v1/exact", 7, time.Hour},
		{"trailing wildcard", entries("path", "/api/v1/users"), "messaging.path_/api/v1/*", 20, time.Minute},
		{"first wildcard in file order", entries("path", "/api/v1/admin"), "messaging.path_/api/v1/*", 20, time.Minute},
		{"leading wildcard", entries("path", "/ops/admin"), "messaging.path_*/admin", 1, 7 * day},
		{"inner wildcard", entries("path", "/static/site.css"), "messaging.path_/static/*.css", 1000, 30 * day},
		{"inner wildcard needs its suffix", entries("path", "/static/site.js"), "messaging.path", 99, 365 * day},
		{"key-only after wildcards", entries("path", "/other"), "messaging.path", 99, 365 * day},
		{"unknown key", entries("nothing", "x"), "", 0, 0},
		{"empty descriptor", nil, "", 0, 0},
		{"leaf without limit", entries("placeholder", "a", "leaf", "b"), "", 0, 0},
		{"null rate_limit is no limit", entries("empty_limit", "x"), "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := dom.Match(tt.entries)
			if ok != (tt.id != "") {
				t.Fatalf("Match ok = %v, want %v (rule %+v)", ok, tt.id != "", m.Rule)
			}
			if !ok {
				return
			}
			if m.Rule.ID != tt.id || m.MetricID != tt.id {
				t.Errorf("ID %q, MetricID %q, want %q", m.Rule.ID, m.MetricID, tt.id)
			}
			want := ratelimit.Limit{Algorithm: ratelimit.GCRA, Requests: tt.requests, Period: tt.period}
			if len(m.Rule.Limits) != 1 || m.Rule.Limits[0] != want {
				t.Errorf("limits %+v, want [%+v]", m.Rule.Limits, want)
			}
			if !slices.Equal(m.KeyEntries, tt.entries) {
				t.Errorf("KeyEntries %v, want the request's %v", m.KeyEntries, tt.entries)
			}
		})
	}
}

func TestMatchRuleFlags(t *testing.T) {
	t.Parallel()
	dom := mustLoad(t, "messaging.yaml", envoyproxyConfig).Domain("messaging")
	m, ok := dom.Match(entries("service", "s", "user", "user-a"))
	if !ok || !m.Rule.ShadowMode {
		t.Errorf("user-a: ok %v shadow %v, want a shadow_mode rule", ok, m.Rule.ShadowMode)
	}
	m, _ = dom.Match(entries("service", "s", "user", "user-b"))
	if m.Rule.Name != "specific_limit" || m.Rule.ShadowMode {
		t.Errorf("user-b: rule %+v, want the named non-shadow rule", m.Rule)
	}
	m, _ = dom.Match(entries("service", "s", "user", "bkthomps"))
	if !slices.Equal(m.Rule.Replaces, []string{"specific_limit"}) {
		t.Errorf("bkthomps replaces %v, want [specific_limit]", m.Rule.Replaces)
	}
	m, ok = dom.Match(entries("ldap", "cn=x"))
	if !ok || !m.Rule.Unlimited || len(m.Rule.Limits) != 0 {
		t.Errorf("ldap: ok %v rule %+v, want an unlimited rule without limits", ok, m.Rule)
	}
	m, _ = dom.Match(entries("key1", "unspecified_value"))
	if m.Rule.ID != "messaging.key1" || m.MetricID != "messaging.key1_unspecified_value" {
		t.Errorf("detailed_metric: ID %q MetricID %q", m.Rule.ID, m.MetricID)
	}
}

func TestMatchExtensions(t *testing.T) {
	t.Parallel()
	dom := mustLoad(t, "api.yaml", `
domain: api
descriptors:
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: route
        value: /orders*
        share_threshold: true
        rate_limits:
          - {requests_per_unit: 20, unit: second, burst: 40, name: burst}
          - {requests_per_unit: 10000, unit: day, algorithm: fixed_window, name: daily}
      - key: route
        value: /items*
        rate_limit: {requests_per_unit: 3, period: 10s, algorithm: Sliding_Window}
`).Domain("api")
	m, ok := dom.Match(entries("tenant", "acme", "route", "/orders/42"))
	if !ok {
		t.Fatal("no match")
	}
	want := []ratelimit.Limit{
		{Name: "burst", Algorithm: ratelimit.GCRA, Requests: 20, Period: time.Second, Burst: 40},
		{Name: "daily", Algorithm: ratelimit.FixedWindow, Requests: 10000, Period: 24 * time.Hour},
	}
	if !slices.Equal(m.Rule.Limits, want) || m.Rule.Name != "burst" || !m.Rule.Named("daily") || m.Rule.Named("other") {
		t.Errorf("rule %+v, want limits %+v named burst and daily", m.Rule, want)
	}
	if got := entries("tenant", "acme", "route", "/orders*"); !slices.Equal(m.KeyEntries, got) {
		t.Errorf("share_threshold KeyEntries %v, want %v", m.KeyEntries, got)
	}
	if m.Rule.ID != "api.tenant.route_/orders*" || m.MetricID != "api.tenant_acme.route_/orders*" {
		t.Errorf("ID %q MetricID %q, want value_to_metric on the tenant level only", m.Rule.ID, m.MetricID)
	}
	m, _ = dom.Match(entries("tenant", "acme", "route", "/items/1"))
	wantItems := ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Requests: 3, Period: 10 * time.Second}
	if len(m.Rule.Limits) != 1 || m.Rule.Limits[0] != wantItems {
		t.Errorf("items limits %+v, want [%+v]", m.Rule.Limits, wantItems)
	}
	if got := entries("tenant", "acme", "route", "/items/1"); !slices.Equal(m.KeyEntries, got) {
		t.Errorf("KeyEntries without share_threshold %v, want %v", m.KeyEntries, got)
	}
	if !dom.HasTopLevelKey("tenant") || dom.HasTopLevelKey("route") {
		t.Error("HasTopLevelKey: want tenant only")
	}
}

func TestMatchNilSafe(t *testing.T) {
	t.Parallel()
	var p *Policy
	if d := p.Domain("x"); d != nil {
		t.Fatal("nil policy returned a domain")
	}
	var d *Domain
	if _, ok := d.Match(entries("a", "b")); ok {
		t.Error("nil domain matched")
	}
}

func TestWildcard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "a", true},
		{"a*", "ab", true},
		{"a*", "ba", false},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "a-x-b-y-c", true},
		{"a*b*c", "acb", false},
		{"a**b", "ab", true},
		{"/v1/*/users/*", "/v1/acme/users/7", true},
		{"/v1/*/users/*", "/v1/acme/groups/7", false},
		{"x*yx*y", "xyxy", true},
		{"x*yx*y", "xyx", false},
	}
	for _, tt := range tests {
		if got := compileWildcard(tt.pattern).match(tt.value); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	dir := b.TempDir()
	path := dir + "/messaging.yaml"
	if err := os.WriteFile(path, []byte(envoyproxyConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	dom := p.Domain("messaging")
	cases := map[string][]ratelimit.Entry{
		"exact_nested": entries("message_type", "marketing", "to_number", "2061111111"),
		"wildcard":     entries("path", "/static/site.css"),
		"default":      entries("path", "/other"),
	}
	for name, e := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := dom.Match(e); !ok {
					b.Fatal("no match")
				}
			}
		})
	}
}

func TestZeroRequestsPerUnitIsABlockAllRule(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, "block.yaml", `domain: d
descriptors:
  - key: client
    value: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
`)
	m, ok := p.Domain("d").Match([]ratelimit.Entry{{Key: "client", Value: "banned"}})
	if !ok || !m.Rule.Blocked || len(m.Rule.Limits) != 1 || m.Rule.Limits[0].Period != time.Hour {
		t.Fatalf("Match = %+v, %v; want a blocked rule with its one-hour limit", m.Rule, ok)
	}
}
