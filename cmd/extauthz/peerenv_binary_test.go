package main

import (
	"context"
	"crypto/tls"
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
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testpki"
	"github.com/extauthz/extauthz/internal/xdstest"
)

// envoyGatewayEnv is the environment Envoy Gateway's rate-limit deployment
// gives /bin/ratelimit (internal/infrastructure/kubernetes/ratelimit/
// resource.go, expectedRateLimitContainerEnv, in its order, with a Redis
// backend and Prometheus on), with files under dir for its /certs and
// /data mounts and the xDS server (envoy-gateway:18001 there) at xdsAddr.
func envoyGatewayEnv(dir, redisAddr, promAddr, xdsAddr string) []string {
	cert, key, ca := filepath.Join(dir, "certs", "tls.crt"), filepath.Join(dir, "certs", "tls.key"), filepath.Join(dir, "certs", "ca.crt")
	return []string{
		"RUNTIME_ROOT=" + filepath.Join(dir, "data"),
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=" + xdsAddr,
		"CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + cert,
		"GRPC_SERVER_TLS_KEY=" + key,
		"GRPC_SERVER_TLS_CA_CERT=" + ca,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + cert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + key,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + ca,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"USE_PROMETHEUS=true",
		"PROMETHEUS_ADDR=" + promAddr,
		"PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
	}
}

// egDomain is a domain as Envoy Gateway's translator names one: the
// listener's (internal/xds/translator/testdata/out/ratelimit-config).
const egDomain = "default/eg/http"

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// egPKI is the envoy-rate-limit Secret Envoy Gateway mounts at /certs: one
// CA, and one certificate the rate limit service both serves gRPC with and
// presents to the xDS server; the xDS server (Envoy Gateway's controller)
// and Envoy hold certificates from the same CA.
type egPKI struct {
	ca        *testpki.CA
	xdsServer credentials.TransportCredentials
	envoy     tls.Certificate
}

func newEGPKI(t *testing.T, certs string) egPKI {
	t.Helper()
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := testpki.NewCA(t, "envoy-gateway test CA")
	ca.WriteFile(t, certs, "ca.crt")
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	ca.Issue(t, testpki.Options{CommonName: "envoy-ratelimit", DNSNames: []string{"envoy-ratelimit"}, IPs: loopback}).WriteFiles(t, certs, "tls")
	controller := ca.Issue(t, testpki.Options{CommonName: "envoy-gateway", DNSNames: []string{"envoy-gateway"}, IPs: loopback, Server: true})
	return egPKI{
		ca: ca,
		xdsServer: credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{controller.TLS(t)},
			ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}),
		envoy: ca.Issue(t, testpki.Options{CommonName: "envoy", DNSNames: []string{"envoy"}, Client: true}).TLS(t),
	}
}

// Started as Envoy Gateway starts the peer, by the name ratelimit and with
// exactly its environment (only the ports free ones, as a test needs),
// extauthz is ready on /healthcheck before any snapshot (Envoy Gateway sets
// FORCE_START_WITHOUT_INITIAL_CONFIG=true), takes its limits over mutual
// TLS xDS from a go-control-plane server, decides over mutual TLS with the
// counters in Redis, follows a new snapshot, and serves /metrics on
// PROMETHEUS_ADDR.
func TestBinaryAsEnvoyGatewaysRatelimit(t *testing.T) {
	dir := t.TempDir()
	pki := newEGPKI(t, filepath.Join(dir, "certs"))
	x := xdstest.Start(t, "127.0.0.1:0", pki.xdsServer)

	// The name Envoy Gateway runs: /bin/ratelimit.
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	redis := redistest.Standalone(t)
	grpcPort, httpPort, promAddr := freePort(t), freePort(t), "127.0.0.1:"+strconv.Itoa(freePort(t))
	cmd := exec.Command(ratelimit)
	cmd.Env = append(envoyGatewayEnv(dir, redis.Addr, promAddr, x.Addr),
		"GRPC_PORT="+strconv.Itoa(grpcPort), "PORT="+strconv.Itoa(httpPort))
	p := startCmd(t, cmd)

	if _, port, _ := net.SplitHostPort(p.grpcAddr); port != strconv.Itoa(grpcPort) {
		t.Errorf("gRPC on %s, want port %d (GRPC_PORT)", p.grpcAddr, grpcPort)
	}
	p.httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort)
	waitHealthcheck(t, p) // no snapshot yet: FORCE_START_WITHOUT_INITIAL_CONFIG=true
	if logs := p.Logs(); !strings.Contains(logs, "PROMETHEUS_MAPPER_YAML is ignored") || strings.Count(logs, " is ignored: ") != 1 {
		t.Errorf("want one warning, for PROMETHEUS_MAPPER_YAML, none for the rest of Envoy Gateway's environment:\n%s", logs)
	}

	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(dialTLS(t, addr, pki.ca.Pool(), nil)).ShouldRateLimit(ctx,
		&rlsv3.RateLimitRequest{Domain: egDomain}); err == nil {
		t.Error("a client without a certificate got a decision; GRPC_SERVER_TLS_CA_CERT must make it mutual TLS")
	}
	envoy := rlsv3.NewRateLimitServiceClient(dialTLS(t, addr, pki.ca.Pool(), &pki.envoy))
	if st := gatewayStatus(t, envoy, egDomain); st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil {
		t.Errorf("before any snapshot: %v, want OK with no limit (nothing matches yet)", st)
	}

	// Envoy Gateway's controller publishes the limits for the node id it set.
	x.Set(t, "envoy-ratelimit", "1", xdstest.GatewayLimit(egDomain, 2, rlsconfv3.RateLimitUnit_MINUTE))
	eventually(t, "snapshot 1 ACKed", func() bool { return x.Acked("1") })
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		codes = append(codes, gatewayStatus(t, envoy, egDomain).GetCode())
	}
	if want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}; !slices.Equal(codes, want) {
		t.Errorf("three calls against 2/minute from snapshot 1: %v, want %v\n%s", codes, want, p.Logs())
	}
	if n, _ := redis.Client().DBSize(ctx).Result(); n == 0 {
		t.Error("no key in REDIS_URL's Redis: the counters are not there")
	}

	x.Set(t, "envoy-ratelimit", "2", xdstest.GatewayLimit(egDomain, 5, rlsconfv3.RateLimitUnit_MINUTE))
	eventually(t, "snapshot 2 ACKed", func() bool { return x.Acked("2") })
	if st := gatewayStatus(t, envoy, egDomain); st.GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Errorf("after snapshot 2: %v, want the limit 5/minute", st)
	}
	if node := x.FirstNode(); node.GetId() != "envoy-ratelimit" {
		t.Errorf("node announced %v, want CONFIG_GRPC_XDS_NODE_ID's envoy-ratelimit", node)
	}

	resp, err := http.Get("http://" + promAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET PROMETHEUS_ADDR/metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `extauthz_policy_xds_updates_total{result="applied"} 2`) {
		t.Errorf("GET PROMETHEUS_ADDR/metrics = %d, without two applied xDS updates:\n%s", resp.StatusCode, body)
	}
}

// Without FORCE_START_WITHOUT_INITIAL_CONFIG, as the peer, /healthcheck
// fails until the first snapshot: Envoy Gateway's probes keep the pod out
// of the Service meanwhile.
func TestBinaryAsRatelimitWaitsForTheFirstSnapshot(t *testing.T) {
	dir := t.TempDir()
	pki := newEGPKI(t, filepath.Join(dir, "certs"))
	x := xdstest.Start(t, "127.0.0.1:0", pki.xdsServer)
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	httpPort := freePort(t)
	cmd := exec.Command(ratelimit)
	cmd.Env = append(envoyGatewayEnv(dir, "", "127.0.0.1:0", x.Addr),
		"GRPC_PORT=0", "PORT="+strconv.Itoa(httpPort), "FORCE_START_WITHOUT_INITIAL_CONFIG=false")
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "REDIS_") }) // in memory
	p := startCmd(t, cmd)
	p.httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort)
	eventually(t, "the xDS stream to be open", func() bool { return x.FirstNode() != nil })
	if code, body := p.get(t, "/healthcheck"); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck before any snapshot = %d %q, want 500", code, body)
	}
	x.Set(t, "envoy-ratelimit", "1", xdstest.GatewayLimit(egDomain, 2, rlsconfv3.RateLimitUnit_MINUTE))
	waitHealthcheck(t, p)
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
