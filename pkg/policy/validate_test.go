package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadErr loads content as one file and returns the error text, failing
// when the load succeeds or the error is not an Errors matching ErrInvalid.
func loadErr(t *testing.T, name, content string) (string, Errors) {
	t.Helper()
	path := writeFile(t, t.TempDir(), name, content)
	p, err := Load(path)
	if err == nil {
		t.Fatalf("Load succeeded (%d domains), want an error", len(p.Domains))
	}
	var probs Errors
	if !errors.As(err, &probs) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %T %v is not an Errors matching ErrInvalid", err, err)
	}
	return err.Error(), probs
}

// TestValidationErrors has one case per validation rule: each asserts that
// the message names the file, the field path and the problem.
func TestValidationErrors(t *testing.T) {
	t.Parallel()
	const rl = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: "
	tests := []struct {
		name, yaml, field, msg string
	}{
		{"missing domain", "descriptors: [{key: a}]", "domain", "is required"},
		{"empty domain", "domain: ''\ndescriptors: [{key: a}]", "domain", "must not be empty"},
		{"empty file", "", "domain", "is required"},
		{"unknown top-level field", "domain: d\ndescriptor: []", "descriptor", "unknown field"},
		{"unknown descriptor field", "domain: d\ndescriptors: [{key: a, vlaue: b}]", "descriptors[0].vlaue", "unknown field"},
		{"unknown rate_limit field", rl + "{unit: second, request_per_unit: 1}", "descriptors[0].rate_limit.request_per_unit", "unknown field"},
		{"unknown replaces field", rl + "{unit: second, requests_per_unit: 1, replaces: [{nam: x}]}", "descriptors[0].rate_limit.replaces[0].nam", "unknown field"},
		{"duplicate field", "domain: d\ndomain: e", "domain", "duplicate field"},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: b, value: x}\n      - {key: b, value: x}",
			"descriptors[0].descriptors[1]", "duplicate descriptor"},
		{"duplicate key-only descriptor", "domain: d\ndescriptors: [{key: a}, {key: a}]", "descriptors[1]", "already at descriptors[0]"},
		{"duplicate wildcard descriptor", "domain: d\ndescriptors: [{key: a, value: x*}, {key: a, value: x*}]", "descriptors[1]", "duplicate descriptor"},
		{"empty key", "domain: d\ndescriptors: [{key: '', value: v}]", "descriptors[0].key", "must not be empty"},
		{"missing key", "domain: d\ndescriptors: [{value: v}]", "descriptors[0].key", "is required"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: c\n        rate_limit: {unit: fortnight, requests_per_unit: 1}",
			"descriptors[0].descriptors[1].rate_limit.unit", `unknown unit "fortnight"`},
		{"zero requests_per_unit in rate_limits", "domain: d\ndescriptors: [{key: k, rate_limits: [{unit: second, requests_per_unit: 0}]}]",
			"descriptors[0].rate_limits[0].requests_per_unit", "at least 1, got 0"},
		{"negative requests_per_unit", rl + "{unit: second, requests_per_unit: -5}", "descriptors[0].rate_limit.requests_per_unit", "at least 1, got -5"},
		{"missing requests_per_unit", rl + "{unit: second}", "descriptors[0].rate_limit.requests_per_unit", "is required"},
		{"non-integer requests_per_unit", rl + "{unit: second, requests_per_unit: ten}", "descriptors[0].rate_limit.requests_per_unit", "expected an integer"},
		{"missing unit and period", rl + "{requests_per_unit: 1}", "descriptors[0].rate_limit.unit", "a unit or a period is required"},
		{"unlimited with unit", rl + "{unlimited: true, unit: second}", "descriptors[0].rate_limit.unit", "must not be set when unlimited"},
		{"unlimited with requests_per_unit", rl + "{unlimited: true, requests_per_unit: 3}", "descriptors[0].rate_limit.requests_per_unit", "must not be set when unlimited"},
		{"unlimited with period", rl + "{unlimited: true, period: 1s}", "descriptors[0].rate_limit.period", "must not be set when unlimited"},
		{"unlimited in rate_limits", "domain: d\ndescriptors: [{key: k, rate_limits: [{unlimited: true}]}]", "descriptors[0].rate_limits[0].unlimited", "only allowed in rate_limit"},
		{"sliding_log too large", rl + "{unit: hour, requests_per_unit: 20000, algorithm: sliding_log}", "descriptors[0].rate_limit", "at most 10000 requests per period"},
		{"bad algorithm", rl + "{unit: second, requests_per_unit: 1, algorithm: leaky_bucket}", "descriptors[0].rate_limit.algorithm", `unknown algorithm "leaky_bucket"`},
		{"negative burst", rl + "{unit: second, requests_per_unit: 1, burst: -1}", "descriptors[0].rate_limit.burst", "must not be negative"},
		{"burst without gcra", rl + "{unit: second, requests_per_unit: 1, burst: 5, algorithm: fixed_window}", "descriptors[0].rate_limit.burst", "gcra algorithm only"},
		{"bad period", rl + "{period: 10 parsecs, requests_per_unit: 1}", "descriptors[0].rate_limit.period", "bad duration"},
		{"zero period", rl + "{period: 0s, requests_per_unit: 1}", "descriptors[0].rate_limit.period", "at least 1ms"},
		{"sub-millisecond period", rl + "{period: 1500us, requests_per_unit: 1}", "descriptors[0].rate_limit.period", "whole number of milliseconds"},
		{"unit and period", rl + "{unit: second, period: 10s, requests_per_unit: 1}", "descriptors[0].rate_limit.period", "mutually exclusive"},
		{"rate_limit and rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: day, requests_per_unit: 9}]",
			"descriptors[0].rate_limits", "mutually exclusive"},
		{"same algorithm and period", "domain: d\ndescriptors: [{key: k, rate_limits: [{unit: minute, requests_per_unit: 1}, {period: 60s, requests_per_unit: 5}]}]",
			"descriptors[0].rate_limits[1]", "same algorithm and period as descriptors[0].rate_limits[0]"},
		{"empty rate_limits", "domain: d\ndescriptors: [{key: k, rate_limits: []}]", "descriptors[0].rate_limits", "at least one limit"},
		{"replaces unknown name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: one}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: two}]}",
			"descriptors[1].rate_limit.replaces[0].name", `no rule named "two" in domain "d"`},
		{"replaces itself", rl + "{unit: second, requests_per_unit: 1, name: me, replaces: [{name: me}]}", "descriptors[0].rate_limit.replaces[0].name", "cannot replace itself"},
		{"replaces empty name", rl + "{unit: second, requests_per_unit: 1, replaces: [{name: ''}]}", "descriptors[0].rate_limit.replaces[0].name", "is required"},
		{"charge_over_limit with unlimited", rl + "{unlimited: true, charge_over_limit: true}", "descriptors[0].rate_limit.charge_over_limit", "must not be set when unlimited"},
		{"non-boolean charge_over_limit", rl + "{unit: second, requests_per_unit: 1, charge_over_limit: often}", "descriptors[0].rate_limit.charge_over_limit", "expected true or false"},
		{"charge_over_limit differing in rate_limits", "domain: d\ndescriptors: [{key: k, rate_limits: [{unit: minute, requests_per_unit: 1, charge_over_limit: true}, {unit: hour, requests_per_unit: 5}]}]",
			"descriptors[0].rate_limits[1].charge_over_limit", "same on every limit"},
		{"non-boolean shadow_mode", "domain: d\ndescriptors: [{key: k, shadow_mode: maybe}]", "descriptors[0].shadow_mode", "expected true or false"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}", "descriptors", "expected a list"},
		{"rate_limit not a mapping", rl + "[1, 2]", "descriptors[0].rate_limit", "expected a mapping"},
		{"key not a string", "domain: d\ndescriptors: [{key: [a]}]", "descriptors[0].key", "expected a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, _ := loadErr(t, "limits.yaml", tt.yaml)
			if !strings.Contains(msg, "limits.yaml:") || !strings.Contains(msg, tt.field+": ") || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q\nwant file limits.yaml, field %q and %q", msg, tt.field, tt.msg)
			}
		})
	}
}

func TestValidationCollectsEveryProblemWithLines(t *testing.T) {
	t.Parallel()
	msg, probs := loadErr(t, "many.yaml", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: -1
  - key: b
    colour: blue
`)
	want := []string{
		"many.yaml:5: descriptors[0].rate_limit.unit: unknown unit",
		"many.yaml:6: descriptors[0].rate_limit.requests_per_unit: must be at least 1",
		"many.yaml:8: descriptors[1].colour: unknown field",
	}
	if len(probs) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(probs), len(want), msg)
	}
	lines := strings.Split(msg, "\n")
	for i, w := range want {
		if !strings.Contains(lines[i], "/"+w) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestValidationYAMLSyntax(t *testing.T) {
	t.Parallel()
	msg, probs := loadErr(t, "broken.yaml", "domain: d\ndescriptors: key: a\n")
	if len(probs) != 1 || probs[0].Line != 2 || !strings.Contains(msg, "broken.yaml:2: bad YAML: mapping values") {
		t.Errorf("got %q (line %d), want broken.yaml:2: bad YAML: mapping values ...", msg, probs[0].Line)
	}
}

func TestValidationOneDocumentPerFile(t *testing.T) {
	t.Parallel()
	msg, _ := loadErr(t, "two.yaml", "domain: a\n---\ndomain: b\n")
	if !strings.Contains(msg, "two.yaml:") || !strings.Contains(msg, "more than one YAML document") {
		t.Errorf("got %q", msg)
	}
	// A leading or trailing "---" is not a second document.
	if p := mustLoad(t, "one.yaml", "---\ndomain: a\n---\n"); p.Domain("a") == nil {
		t.Error("domain a not loaded")
	}
}

func TestValidationAcrossFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, a, b, field, msg string
	}{
		{"same domain in two files", "domain: shared\n", "domain: shared\n", "domain", `domain "shared" is already defined in `},
		{"two http sections", "http: {routes: []}\n", "http: {}\n", "http", "an http section is already defined in "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a := writeFile(t, dir, "a.yaml", tt.a)
			b := writeFile(t, dir, "b.yaml", tt.b)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			want := b + ":1: " + tt.field + ": " + tt.msg + a
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\nwant it to contain %q", err, want)
			}
		})
	}
}
