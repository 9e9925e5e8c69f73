package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryValidateRefusesEmptyTier: `extauthz validate` refuses a tier
// that names no limits (empty or an empty list), with file, line and
// field, and accepts the same set once every tier has a limit.
func TestBinaryValidateRefusesEmptyTier(t *testing.T) {
	policy := func(free string) string {
		return "http:\n" +
			"  tiers:\n" +
			"    plans:\n" +
			"      attribute: {jwt_claim: {metadata_key: jwt_payload, claim: plan}}\n" +
			"      default: free\n" +
			"      limits:\n" +
			"        free: " + free + "\n" +
			"        pro: [{requests_per_unit: 100, unit: minute}]\n" +
			"  routes:\n" +
			"    - {name: api, path_prefix: /, tier_limits: plans}\n"
	}
	for free, want := range map[string]string{
		"":   `http.yaml:7: http.tiers.plans.limits.free: tier "free" names no limits`,
		"[]": `http.yaml:7: http.tiers.plans.limits.free: must hold at least one limit`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "http.yaml"), []byte(policy(free)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runBinary(t, nil, "validate", dir)
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("free: %s: exit %d, stderr %q; want 1 and %q", free, code, stderr, want)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "http.yaml"), []byte(policy("[{requests_per_unit: 10, unit: minute}]")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runBinary(t, nil, "validate", dir); code != 0 || !strings.HasPrefix(stdout, "ok: ") {
		t.Errorf("every tier with a limit: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
