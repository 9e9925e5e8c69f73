package policy

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestQuotaModeAndMetadataLoad: envoyproxy/ratelimit's quota_mode and
// metadata load onto the rule, metadata with JSON-like values (numbers as
// float64, nested mappings and lists kept).
func TestQuotaModeAndMetadataLoad(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, "q.yaml", `
domain: ai
descriptors:
  - key: model
    value: gpt
    quota_mode: true
    metadata:
      tier: gold
      weight: 3
      ratio: 0.5
      on: true
      none: null
      nested: {a: [1, "x"]}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: plain
    metadata: {ignored: true}
`)
	m, ok := p.Domain("ai").Match(entries("model", "gpt"))
	if !ok {
		t.Fatal("model=gpt did not match")
	}
	if !m.Rule.QuotaMode {
		t.Error("quota_mode not loaded")
	}
	want := map[string]any{
		"tier": "gold", "weight": 3.0, "ratio": 0.5, "on": true, "none": nil,
		"nested": map[string]any{"a": []any{1.0, "x"}},
	}
	if !reflect.DeepEqual(m.Rule.Metadata, want) {
		t.Errorf("metadata = %#v, want %#v", m.Rule.Metadata, want)
	}
}

// TestShareThresholdRequiresWildcard: share_threshold on a value without
// '*' (or on a key-only descriptor) is rejected, as envoyproxy/ratelimit
// rejects it.
func TestShareThresholdRequiresWildcard(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"value: exact", ""} {
		msg, _ := loadErr(t, "s.yaml", "domain: d\ndescriptors:\n  - key: k\n    "+value+
			"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
		if !strings.Contains(msg, "descriptors[0].share_threshold") || !strings.Contains(msg, "wildcard") {
			t.Errorf("%q: error %q does not name share_threshold and wildcards", value, msg)
		}
	}
	mustLoad(t, "ok.yaml", "domain: d\ndescriptors:\n  - {key: k, value: 'a*', share_threshold: true, rate_limit: {unit: second, requests_per_unit: 1}}\n")
}

const mergeA = `
domain: api
descriptors:
  - key: route
    value: /a
    rate_limit: {name: general, unit: second, requests_per_unit: 5}
`

// TestMergeDomains: with MergeDomains two files of one domain form one
// tree, a replaces may name a rule of the other file, and a key/value in
// both files is a duplicate naming both; without it the second definition
// is an error that names the option.
func TestMergeDomains(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", mergeA)
	writeFile(t, dir, "b.yaml", `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: general}]}
`)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_MERGE_DOMAINS") {
		t.Errorf("without merging: error %v, want one naming EXTAUTHZ_MERGE_DOMAINS", err)
	}
	p, err := LoadWith(dir, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatalf("merged load: %v", err)
	}
	dom := p.Domain("api")
	for _, c := range []struct{ key, value, id string }{
		{"route", "/a", "api.route_/a"},
		{"user", "u1", "api.user"},
	} {
		m, ok := dom.Match(entries(c.key, c.value))
		if !ok {
			t.Fatalf("%s=%s: no match in the merged domain", c.key, c.value)
		}
		if m.Rule.ID != c.id {
			t.Errorf("%s=%s: rule ID %q, want %q", c.key, c.value, m.Rule.ID, c.id)
		}
	}

	writeFile(t, dir, "c.yaml", mergeA)
	_, err = LoadWith(dir, LoadOptions{MergeDomains: true})
	var probs Errors
	if !errors.As(err, &probs) || len(probs) != 1 {
		t.Fatalf("duplicate across files: %v, want one problem", err)
	}
	if pr := probs[0]; filepath.Base(pr.File) != "c.yaml" || !strings.Contains(pr.Message, "a.yaml") || pr.Line == 0 {
		t.Errorf("duplicate problem %v: want it in c.yaml with a line, naming a.yaml", pr)
	}
}

// TestMergeDomainsReplacesChecked: a replaces naming no rule in any file of
// the merged domain is still an error, located in its own file.
func TestMergeDomainsReplacesChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", mergeA)
	writeFile(t, dir, "b.yaml", "domain: api\ndescriptors:\n  - key: u\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nope}]}\n")
	_, err := LoadWith(dir, LoadOptions{MergeDomains: true})
	if err == nil || !strings.Contains(err.Error(), "b.yaml:") || !strings.Contains(err.Error(), `no rule named "nope"`) {
		t.Errorf("error %v, want b.yaml: no rule named \"nope\"", err)
	}
}

// TestHeaderStyle: a domain file's header_style, the http section's default
// and a route's own; an unknown style and a style in a file without a domain
// are errors.
func TestHeaderStyle(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, "h.yaml", `
domain: d
header_style: X-RateLimit
descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]
http:
  header_style: ratelimit
  routes:
    - {name: a, path_prefix: /a}
    - {name: b, path_prefix: /b, header_style: none}
`)
	if got := p.Domain("d").HeaderStyle; got != HeaderStyleXRateLimit {
		t.Errorf("domain style %q", got)
	}
	if a, b := p.HTTP.Routes[0].HeaderStyle, p.HTTP.Routes[1].HeaderStyle; a != HeaderStyleRateLimit || b != HeaderStyleNone {
		t.Errorf("route styles %q %q", a, b)
	}
	if r := mustLoad(t, "d.yaml", "http:\n  routes: [{name: a, path_prefix: /a}]\n").HTTP.Routes[0]; r.HeaderStyle != HeaderStyleIETF {
		t.Errorf("default route style %q", r.HeaderStyle)
	}
	if msg, _ := loadErr(t, "u.yaml", "domain: d\nheader_style: draft\n"); !strings.Contains(msg, "header_style: unknown header style") {
		t.Errorf("unknown style: %q", msg)
	}
	if msg, _ := loadErr(t, "n.yaml", "header_style: ietf\nhttp:\n  routes: [{name: a, path_prefix: /a}]\n"); !strings.Contains(msg, "http.header_style") {
		t.Errorf("style without a domain: %q", msg)
	}
}

// TestChargeOverLimitLoads: charge_over_limit in a rate_limit or on every
// limit of a rate_limits list marks the rule; a rule without it is not marked.
func TestChargeOverLimitLoads(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, "c.yaml", `
domain: ai
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: fixed_window, charge_over_limit: true}
  - key: budget
    rate_limits:
      - {unit: minute, requests_per_unit: 1000, charge_over_limit: true}
      - {unit: day, requests_per_unit: 100000, charge_over_limit: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10, charge_over_limit: false}
`)
	for key, want := range map[string]bool{"tokens": true, "budget": true, "plain": false} {
		m, ok := p.Domain("ai").Match(entries(key, "x"))
		if !ok || m.Rule == nil {
			t.Fatalf("%s did not match a rule", key)
		}
		if m.Rule.ChargeOverLimit != want {
			t.Errorf("%s: ChargeOverLimit = %v, want %v", key, m.Rule.ChargeOverLimit, want)
		}
	}
}
