package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/redistest"
)

// allotmentPolicy limits each user to 100 per minute with consistency:
// allotment, one algorithm per user prefix.
const allotmentPolicy = `domain: shared
descriptors:
  - {key: user, value: "g*", rate_limit: {unit: minute, requests_per_unit: 100, consistency: allotment}}
  - {key: user, value: "f*", rate_limit: {unit: hour, requests_per_unit: 100, algorithm: fixed_window, consistency: allotment}}
  - {key: user, value: "s*", rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window, consistency: allotment}}
`

// TestTwoProcessesShareOneAllotmentLimit: two extauthz processes on one
// Redis, 200 concurrent ShouldRateLimit calls each on one user whose limit
// uses allotment: never more than 100 OK, and at most the documented bound
// fewer (two replicas x 1.5 slices of at most 100/16 tokens); the processes
// decided from leased slices, none in the failure mode.
func TestTwoProcessesShareOneAllotmentLimit(t *testing.T) {
	srv := redistest.Standalone(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(allotmentPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"EXTAUTHZ_CONFIG=" + path, "EXTAUTHZ_REDIS_URL=" + srv.URL}, patient...)
	procs := []*proc{start(t, env...), start(t, env...)}
	const bound = 2 * 3 * (100 / 16) / 2
	for _, user := range []string{"g1", "f1", "s1"} {
		ok := callConcurrently(t, procs, user, 200)
		t.Logf("%s: %d of 400 OK", user, ok)
		if ok > 100 || ok < 100-bound {
			t.Errorf("%s: %d of 400 calls OK, want %d..100", user, ok, 100-bound)
		}
	}
	noFallbacks(t, procs)
	local := 0.0
	for _, p := range procs {
		_, body := p.get(t, "/metrics")
		for _, line := range strings.Split(body, "\n") {
			if rest, found := strings.CutPrefix(line, `extauthz_ratelimit_allotment_decisions_total{source="local"} `); found {
				v, _ := strconv.ParseFloat(rest, 64)
				local += v
			}
		}
	}
	t.Logf("decisions from leased slices: %v", local)
	if local == 0 {
		t.Error("no decision was made from a leased slice")
	}
}
