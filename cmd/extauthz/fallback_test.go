package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
)

// metricValue reads an unlabelled metric from a process's /metrics; -1
// when it is not there.
func metricValue(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	_, body := p.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// waitMetric waits until every process shows name = want.
func waitMetric(t *testing.T, procs []*proc, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range procs {
		for metricValue(t, p, name) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v after 20s, want %v\nits log:\n%s", name, metricValue(t, p, name), want, p.Logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestFallbackSharesTheLimitAcrossReplicas: two processes on one Redis
// count each other; with Redis stopped, 200 calls each on one user of a
// 100-per-minute limit admit 100 across both (50 each), not 100 each.
func TestFallbackSharesTheLimitAcrossReplicas(t *testing.T) {
	srv := redistest.Standalone(t)
	env := []string{"EXTAUTHZ_CONFIG=" + writePolicy(t), "EXTAUTHZ_REDIS_URL=" + srv.URL}
	procs := []*proc{start(t, env...), start(t, env...)}
	waitMetric(t, procs, "extauthz_redis_replicas_seen", 2)
	srv.Stop()
	ok := callConcurrently(t, procs, "alice", 200)
	if ok != 100 {
		t.Errorf("with Redis down, %d of 400 calls OK across two replicas, want 100 (each replica's share of 50)", ok)
	}
	for _, p := range procs {
		if v := metricValue(t, p, "extauthz_redis_fallback_replicas"); v != 2 {
			t.Errorf("extauthz_redis_fallback_replicas = %v, want 2", v)
		}
	}
}

// TestFallbackReplicasConfigured: EXTAUTHZ_FALLBACK_REPLICAS fixes the
// divisor whatever Redis counted.
func TestFallbackReplicasConfigured(t *testing.T) {
	srv := redistest.Standalone(t)
	p := start(t, "EXTAUTHZ_CONFIG="+writePolicy(t), "EXTAUTHZ_REDIS_URL="+srv.URL, "EXTAUTHZ_FALLBACK_REPLICAS=4")
	procs := []*proc{p}
	waitMetric(t, procs, "extauthz_redis_replicas_seen", 1)
	srv.Stop()
	if ok := callConcurrently(t, procs, "bob", 200); ok != 25 {
		t.Errorf("with Redis down, %d of 200 calls OK, want 25 (a quarter, as configured)", ok)
	}
	if v := metricValue(t, p, "extauthz_redis_fallback_replicas"); v != 4 {
		t.Errorf("extauthz_redis_fallback_replicas = %v, want 4", v)
	}
}
