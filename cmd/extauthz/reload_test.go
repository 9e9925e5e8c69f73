package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func policyWithLimit(rpu string) string {
	return "domain: api\ndescriptors:\n  - key: route\n    rate_limit: {unit: minute, requests_per_unit: " + rpu + "}\n"
}

// eventually polls cond (bounded, no fixed sleeps in the assertion) until it
// holds or 15 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBinaryReloadsPolicyAndKeepsTheLastGoodOne(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write := func(s string) {
		t.Helper()
		// Write then rename, as editors and ConfigMaps do: the watcher never
		// sees a half-written file.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(policyWithLimit("10"))
	p := start(t, "EXTAUTHZ_CONFIG="+dir)
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	rpu := func() uint32 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/x"}},
		}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := rpu(); got != 10 {
		t.Fatalf("initial limit %d, want 10", got)
	}

	write("domain: api\ndescriptors: [{key: route, rate_limit: {unit: parsec, requests_per_unit: 1}}]\n")
	eventually(t, "a reload error to be counted", func() bool {
		_, m := p.get(t, "/metrics")
		return strings.Contains(m, "extauthz_policy_reload_errors_total 1")
	})
	if got := rpu(); got != 10 {
		t.Errorf("after a bad reload the limit is %d, want the last good 10", got)
	}
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d after a bad reload, want 200 (the last good policy serves)", code)
	}

	write(policyWithLimit("20"))
	eventually(t, "the new policy to serve", func() bool { return rpu() == 20 })
	_, m := p.get(t, "/metrics")
	if !strings.Contains(m, "extauthz_policy_reloads_total 1") {
		t.Errorf("/metrics lacks extauthz_policy_reloads_total 1")
	}
}
