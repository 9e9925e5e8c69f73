package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testpki"
)

// envoyGatewayEnv is the environment Envoy Gateway's rate-limit deployment
// gives /bin/ratelimit (internal/infrastructure/kubernetes/ratelimit/
// resource.go, expectedRateLimitContainerEnv, with a Redis backend and
// Prometheus on), less the xDS variables (CONFIG_TYPE=GRPC_XDS_SOTW,
// CONFIG_GRPC_XDS_*, FORCE_START_WITHOUT_INITIAL_CONFIG) that this build
// refuses, and with files under dir for its /certs and /data mounts.
func envoyGatewayEnv(dir, redisAddr, promAddr string) []string {
	return []string{
		"RUNTIME_ROOT=" + filepath.Join(dir, "data"),
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=false",
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + filepath.Join(dir, "certs", "tls.crt"),
		"GRPC_SERVER_TLS_KEY=" + filepath.Join(dir, "certs", "tls.key"),
		"GRPC_SERVER_TLS_CA_CERT=" + filepath.Join(dir, "certs", "ca.crt"),
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"USE_PROMETHEUS=true",
		"PROMETHEUS_ADDR=" + promAddr,
		"PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
	}
}

// peerLimits is a policy in the peer's own format, where the peer's file
// provider reads it: $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config.
const peerLimits = `domain: edge
descriptors:
  - key: route
    value: orders
    rate_limit: {unit: minute, requests_per_unit: 2}
`

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Started as Envoy Gateway starts the peer, by the name ratelimit and with
// exactly its environment (only the ports free ones, as a test needs),
// extauthz answers /healthcheck, decides over mutual TLS with Redis, and
// serves /metrics on PROMETHEUS_ADDR.
func TestBinaryAsEnvoyGatewaysRatelimit(t *testing.T) {
	dir := t.TempDir()
	for _, sub := range []string{"certs", "data/ratelimit/config"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "data/ratelimit/config/limits.yaml"), []byte(peerLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := testpki.NewCA(t, "envoy-gateway test CA")
	ca.WriteFile(t, filepath.Join(dir, "certs"), "ca.crt")
	ca.Issue(t, testpki.Options{CommonName: "envoy-ratelimit", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true}).
		WriteFiles(t, filepath.Join(dir, "certs"), "tls")
	envoyCert := ca.Issue(t, testpki.Options{CommonName: "envoy", DNSNames: []string{"envoy"}, Client: true}).TLS(t)

	// The name Envoy Gateway runs: /bin/ratelimit.
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	redis := redistest.Standalone(t)
	grpcPort, httpPort, promAddr := freePort(t), freePort(t), "127.0.0.1:"+strconv.Itoa(freePort(t))
	cmd := exec.Command(ratelimit)
	cmd.Env = append(envoyGatewayEnv(dir, redis.Addr, promAddr),
		"GRPC_PORT="+strconv.Itoa(grpcPort), "PORT="+strconv.Itoa(httpPort))
	p := startCmd(t, cmd)

	if _, port, _ := net.SplitHostPort(p.grpcAddr); port != strconv.Itoa(grpcPort) {
		t.Errorf("gRPC on %s, want port %d (GRPC_PORT)", p.grpcAddr, grpcPort)
	}
	p.httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort)
	waitHealthcheck(t, p)
	if logs := p.Logs(); !strings.Contains(logs, "PROMETHEUS_MAPPER_YAML is ignored") || strings.Contains(logs, "USE_STATSD is ignored") {
		t.Errorf("want one warning, for PROMETHEUS_MAPPER_YAML, none for USE_STATSD=false:\n%s", logs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	if _, err := decide(ctx, dialTLS(t, addr, ca.Pool(), nil), "acme"); err == nil {
		t.Error("a client without a certificate got a decision; GRPC_SERVER_TLS_CA_CERT must make it mutual TLS")
	}
	conn := dialTLS(t, addr, ca.Pool(), &envoyCert)
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := decide(ctx, conn, "acme")
		if err != nil {
			t.Fatalf("ShouldRateLimit over mutual TLS: %v\n%s", err, p.Logs())
		}
		codes = append(codes, resp.GetOverallCode())
	}
	if want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}; !slices.Equal(codes, want) {
		t.Errorf("three calls against 2/minute: %v, want %v", codes, want)
	}
	if n, _ := redis.Client().DBSize(ctx).Result(); n == 0 {
		t.Error("no key in REDIS_URL's Redis: the counters are not there")
	}

	resp, err := http.Get("http://" + promAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET PROMETHEUS_ADDR/metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "extauthz_") {
		t.Errorf("GET PROMETHEUS_ADDR/metrics = %d, %d bytes without extauthz_ metrics", resp.StatusCode, len(body))
	}
}

// waitHealthcheck polls /healthcheck as the startup probe does, until 200 "OK".
func waitHealthcheck(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := p.get(t, "/healthcheck")
		if code == http.StatusOK && body == "OK" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck = %d %q after 30s\n%s", code, body, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
