package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A scope: global limit validated without EXTAUTHZ_GLOBAL_REDIS_URL is
// named in a warning: it would be decided in the region alone.
func TestValidateWarnsGlobalWithoutGlobalStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(`domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 6000, algorithm: fixed_window, scope: global, floor: 0.05}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EXTAUTHZ_GLOBAL_REDIS_URL", "")
	var stdout, stderr bytes.Buffer
	if code := validateMain(path, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), `warning: domain "edge" rule edge.tenant: scope global without EXTAUTHZ_GLOBAL_REDIS_URL`) {
		t.Errorf("stderr %q, want a warning naming the global rule", stderr.String())
	}
}
