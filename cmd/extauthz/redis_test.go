package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/redistest"
)

// sharedPolicy limits each user to 100 per minute with the exact rolling
// window (sliding_log): the count cannot be off by a refill or a window edge
// however long the test takes.
const sharedPolicy = `domain: shared
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_log}
`

// patient gives Redis calls room on a loaded test machine: these tests are
// about sharing one budget, and a call that timed out would be decided by
// the per-process fallback instead (noFallbacks checks none was).
var patient = []string{
	"EXTAUTHZ_REDIS_CALL_TIMEOUT=10s", "EXTAUTHZ_REDIS_READ_TIMEOUT=5s", "EXTAUTHZ_REDIS_WRITE_TIMEOUT=5s",
}

// noFallbacks fails the test if a process decided anything without Redis.
func noFallbacks(t *testing.T, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		_, body := p.get(t, "/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "extauthz_redis_fallback_decisions_total{") && !strings.HasSuffix(line, " 0") {
				t.Errorf("a process fell back to its in-process store: %s\nits log:\n%s", line, p.Logs())
			}
		}
	}
}

func writePolicy(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(sharedPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTwoProcessesShareOneRedisLimit: two extauthz processes on one Redis,
// 200 concurrent ShouldRateLimit calls each on one user: exactly 100 OK.
func TestTwoProcessesShareOneRedisLimit(t *testing.T) {
	srv := redistest.Standalone(t)
	env := append([]string{"EXTAUTHZ_CONFIG=" + writePolicy(t), "EXTAUTHZ_REDIS_URL=" + srv.URL}, patient...)
	procs := []*proc{start(t, env...), start(t, env...)}
	ok := callConcurrently(t, procs, "alice", 200)
	noFallbacks(t, procs)
	if ok != 100 {
		t.Fatalf("%d of 400 calls OK, want exactly 100", ok)
	}
	for _, p := range procs {
		if code, body := p.get(t, "/readyz"); code != http.StatusOK {
			t.Errorf("/readyz = %d %q", code, body)
		}
	}
}

// TestTwoProcessesShareOneClusterLimit: the same on a 3-master cluster, with
// users whose keys land on every master.
func TestTwoProcessesShareOneClusterLimit(t *testing.T) {
	cl := redistest.NewCluster(t)
	env := append([]string{"EXTAUTHZ_CONFIG=" + writePolicy(t), "EXTAUTHZ_REDIS_URL=" + cl.URL, "EXTAUTHZ_REDIS_CLUSTER=true"}, patient...)
	procs := []*proc{start(t, env...), start(t, env...)}
	for i := 0; i < 6; i++ {
		user := "user" + strconv.Itoa(i)
		ok := callConcurrently(t, procs, user, 200)
		noFallbacks(t, procs)
		if ok != 100 {
			t.Fatalf("%s: %d of 400 calls OK, want exactly 100", user, ok)
		}
	}
	for _, node := range cl.Nodes {
		n, err := node.Client().DBSize(context.Background()).Result()
		if err != nil || n == 0 {
			t.Errorf("master %s holds %d keys (%v), want some", node.Addr, n, err)
		}
	}
}

// callConcurrently sends n concurrent calls for user through each process
// and returns how many were OK; any error or unknown code fails the test.
func callConcurrently(t *testing.T, procs []*proc, user string, n int) int64 {
	t.Helper()
	var ok atomic.Int64
	var wg sync.WaitGroup
	begin := make(chan struct{})
	req := &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
	}}}
	for _, p := range procs {
		client := rlsv3.NewRateLimitServiceClient(p.dial(t))
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-begin
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				resp, err := client.ShouldRateLimit(ctx, req)
				switch {
				case err != nil:
					t.Error(err)
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					ok.Add(1)
				case resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT:
					t.Errorf("overall code %v", resp.GetOverallCode())
				}
			}()
		}
	}
	close(begin)
	wg.Wait()
	return ok.Load()
}

// TestRedisDownAtStart: the process starts, /readyz says why it is not ready,
// and becomes ready once Redis is up, without a restart.
func TestRedisDownAtStart(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Stop()
	p := start(t, "EXTAUTHZ_CONFIG="+writePolicy(t), "EXTAUTHZ_REDIS_URL="+srv.URL)
	code, body := p.get(t, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis unreachable") {
		t.Fatalf("/readyz with Redis down = %d %q, want 503 naming Redis", code, body)
	}
	srv.Start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body = p.get(t, "/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 5s after Redis started = %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBadRedisConfigNamesTheVariable: an unusable Redis setting stops the
// process at start with the variable's name.
func TestBadRedisConfigNamesTheVariable(t *testing.T) {
	out := startExpectExit(t, "EXTAUTHZ_REDIS_URL=redis://127.0.0.1:1", "EXTAUTHZ_REDIS_TLS_CA_FILE=/nonexistent.pem")
	if !strings.Contains(out, "EXTAUTHZ_REDIS") || !strings.Contains(out, "rediss://") {
		t.Fatalf("logs %q, want an error naming EXTAUTHZ_REDIS_* and rediss://", out)
	}
}

// startExpectExit runs the binary, which must exit non-zero; it returns its
// combined output.
func startExpectExit(t *testing.T, env ...string) string {
	t.Helper()
	bin := binary(t) // built by TestMain, before this deadline
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin)
	c.Env = append(os.Environ(), "EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0")
	c.Env = append(c.Env, env...)
	out, err := c.CombinedOutput()
	if err == nil {
		t.Fatalf("extauthz exited 0 with %v\n%s", env, out)
	}
	return string(out)
}
