package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryValidateMergeDomains: `extauthz validate` reads
// EXTAUTHZ_MERGE_DOMAINS as the server does: two files of one domain fail
// without it and load with it.
func TestBinaryValidateMergeDomains(t *testing.T) {
	dir := t.TempDir()
	for name, route := range map[string]string{"a.yaml": "/a", "b.yaml": "/b"} {
		doc := "domain: api\ndescriptors:\n  - key: route\n    value: " + route +
			"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runBinary(t, nil, "validate", dir); code != 1 || !strings.Contains(stderr, "EXTAUTHZ_MERGE_DOMAINS") {
		t.Errorf("without merging: exit %d, stderr %q; want 1 naming EXTAUTHZ_MERGE_DOMAINS", code, stderr)
	}
	code, stdout, stderr := runBinary(t, []string{"EXTAUTHZ_MERGE_DOMAINS=true"}, "validate", dir)
	if code != 0 || !strings.HasPrefix(stdout, "ok: 2 file(s), 1 domain(s) [api]") {
		t.Errorf("merged: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, _ := runBinary(t, []string{"EXTAUTHZ_MERGE_DOMAINS=perhaps"}, "validate", dir); code != 2 {
		t.Errorf("bad EXTAUTHZ_MERGE_DOMAINS: exit %d, want 2", code)
	}
}

// TestConfigValidateRuleMetrics: the per-rule metrics' variables are
// checked and named.
func TestConfigValidateRuleMetrics(t *testing.T) {
	t.Parallel()
	cfg := Config{GRPCAddr: ":1", HTTPAddr: ":2", LogLevel: "info", ShutdownTimeout: 1, FailureMode: "open",
		NearLimitRatio: 1.5, RuleMetricsMaxSeries: -1}
	err := cfg.Validate()
	for _, name := range []string{"EXTAUTHZ_NEAR_LIMIT_RATIO", "EXTAUTHZ_RULE_METRICS_MAX_SERIES"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate() = %v, want a problem with %s", err, name)
		}
	}
	if o := (Config{RuleMetricsMaxSeries: 0}).metricsOptions(); o.MaxRuleSeries >= 0 {
		t.Errorf("RULE_METRICS_MAX_SERIES=0 gives MaxRuleSeries %d, want it off (negative)", o.MaxRuleSeries)
	}
	if o := (Config{RuleMetricsMaxSeries: 0}).idempotencyMetricsOptions(); o.MaxRouteSeries >= 0 {
		t.Errorf("RULE_METRICS_MAX_SERIES=0 gives MaxRouteSeries %d, want it off (negative)", o.MaxRouteSeries)
	}
	if o := (Config{RuleMetricsMaxSeries: 7}).idempotencyMetricsOptions(); o.MaxRouteSeries != 7 {
		t.Errorf("RULE_METRICS_MAX_SERIES=7 gives MaxRouteSeries %d, want 7", o.MaxRouteSeries)
	}
}
