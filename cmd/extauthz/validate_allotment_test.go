package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateExplainsAllotment: `extauthz validate` prints one line per
// allotment limit, naming its place, and none for exact limits.
func TestValidateExplainsAllotment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(`domain: edge
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 100, consistency: allotment}
  - key: cold
    rate_limit: {unit: second, requests_per_unit: 100, consistency: exact}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := validateMain(path, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], `allotment: domain "edge" rule edge.hot: 100 per 1s (gcra): `) ||
		!strings.Contains(lines[1], "never admits more than the limit") {
		t.Errorf("stdout %q, want the summary then one allotment line for edge.hot", stdout.String())
	}
}
