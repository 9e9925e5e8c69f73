package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

const testVersion = "v0.0.0-test"

// The binary under test, built once by TestMain before any test (and so
// before any test's deadline) starts: on a fresh machine with an empty build
// cache the build alone can take minutes.
var (
	binPath  string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "extauthz-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath, buildErr = buildBinary(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinary builds extauthz into dir as the Makefile does, bounded by a
// limit of its own that is generous for a cold build cache.
func buildBinary(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "extauthz")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-X main.version="+testVersion, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// binary is the path of the binary TestMain built.
func binary(t *testing.T) string {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running extauthz with the addresses it logged.
type proc struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	exited   chan error
	mu       sync.Mutex
	logs     strings.Builder
}

func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// start runs the binary with free loopback ports and env, and waits for
// both listeners to be logged.
func start(t *testing.T, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary(t))
	cmd.Env = append(os.Environ(),
		"EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0",
		"EXTAUTHZ_SHUTDOWN_TIMEOUT=5s", "EXTAUTHZ_LOG_LEVEL=debug")
	cmd.Env = append(cmd.Env, env...)
	return startCmd(t, cmd)
}

// startCmd runs cmd, an extauthz binary, and waits for both listeners to
// be logged.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, exited: make(chan error, 1)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 1)
	go p.readLogs(stderr, addrs)
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	select {
	case a := <-addrs:
		p.grpcAddr, p.httpAddr = a[0], a[1]
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("extauthz exited early: %v\n%s", err, p.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("extauthz did not log its listeners in 30s\n%s", p.Logs())
	}
	return p
}

// readLogs keeps every log line and reports the two listen addresses.
func (p *proc) readLogs(r io.Reader, addrs chan<- [2]string) {
	var grpcAddr, httpAddr string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p.mu.Lock()
		p.logs.WriteString(sc.Text() + "\n")
		p.mu.Unlock()
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Msg {
		case "grpc listening":
			grpcAddr = line.Addr
		case "http listening":
			httpAddr = line.Addr
			addrs <- [2]string{grpcAddr, httpAddr}
		}
	}
	p.exited <- p.cmd.Wait()
}

func (p *proc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (p *proc) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func examplePolicy(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../examples/policy")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	// No drain delay: TestBinaryDrainsOnSIGTERM covers it.
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_DRAIN_DELAY=0s")
	conn := p.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: "acme"}, {Key: "route", Value: "orders"},
		}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit().GetName() == "" {
		t.Fatalf("ShouldRateLimit = %v, want OK under a named limit", resp)
	}

	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, h, err)
		}
	}
	if services := listServices(t, ctx, conn); !strings.Contains(services, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %s, want the RLS", services)
	}
	if code, body := p.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	if code, _ := p.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	_, metrics := p.get(t, "/metrics")
	for _, want := range []string{
		`extauthz_decisions_total{api="ratelimit",domain="edge",outcome="ok"} 1`,
		`extauthz_decision_duration_seconds_count{api="ratelimit"} 1`,
		"extauthz_policy_reload_errors_total 0",
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitCleanExit(t, 10*time.Second, "after SIGTERM")
	t.Logf("stopped %s after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// waitCleanExit fails t unless the process exits with status 0 within d
// (since describes when the wait started, for the message).
func (p *proc) waitCleanExit(t *testing.T, d time.Duration, since string) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("exit %s: %v\n%s", since, err, p.Logs())
		}
	case <-time.After(d):
		t.Fatalf("still running %s %s (shutdown timeout 5s)\n%s", d, since, p.Logs())
	}
}

func listServices(t *testing.T, ctx context.Context, conn *grpc.ClientConn) string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return strings.Join(names, ",")
}

// runBinary runs a subcommand to completion.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestBinaryValidate(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`domain: api
descriptors:
  - key: route
    rate_limit: {unit: fortnight, requests_per_unit: 10}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBinary(t, nil, "validate", bad)
	if code != 1 || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "descriptors[0].rate_limit.unit") {
		t.Errorf("validate bad file: exit %d, stderr %q; want 1 naming the file and the field", code, stderr)
	}
	code, stdout, stderr := runBinary(t, nil, "validate", examplePolicy(t))
	if code != 0 || !strings.HasPrefix(stdout, "ok: 3 file(s)") {
		t.Errorf("validate example: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runBinary(t, nil, "version"); code != 0 || stdout != "extauthz "+testVersion+"\n" {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
	if code, _, _ := runBinary(t, nil, "validate"); code != 2 {
		t.Errorf("validate without a path: exit %d, want 2", code)
	}
}

func TestBinaryRejectsBadConfiguration(t *testing.T) {
	code, _, stderr := runBinary(t, []string{"EXTAUTHZ_LOG_LEVEL=loud", "EXTAUTHZ_FAILURE_MODE=maybe"})
	if code != 2 || !strings.Contains(stderr, "EXTAUTHZ_LOG_LEVEL") || !strings.Contains(stderr, "EXTAUTHZ_FAILURE_MODE") ||
		strings.Count(stderr, "\n") != 2 {
		t.Errorf("bad env: exit %d, stderr %q; want 2 and one line naming each variable", code, stderr)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	code, _, stderr = runBinary(t, []string{"EXTAUTHZ_CONFIG=" + missing, "EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0"})
	if code != 1 || !strings.Contains(stderr, missing) || !strings.Contains(stderr, "EXTAUTHZ_CONFIG") {
		t.Errorf("missing policy: exit %d, stderr %q; want 1 naming the file", code, stderr)
	}
}
