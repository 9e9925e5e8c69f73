package container

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testpki"
	"github.com/extauthz/extauthz/internal/xdstest"
)

// egNode is the node id Envoy Gateway gives its rate limit service.
const egNode = "envoy-ratelimit"

// TestImageAsEnvoyGatewaysRatelimit runs the image as Envoy Gateway's rate
// limit Deployment does (internal/infrastructure/kubernetes/ratelimit/
// resource.go): command /bin/ratelimit, its environment, its default user
// 65534, a read-only root and the envoy-rate-limit Secret read-only at
// /certs; the xDS server (its controller) and Redis on the host's
// loopback. It is ready on /healthcheck, takes a snapshot over mutual TLS
// xDS and decides by it over mutual TLS.
func TestImageAsEnvoyGatewaysRatelimit(t *testing.T) {
	t.Parallel()
	needImage(t)
	certs := t.TempDir()
	ca := testpki.NewCA(t, "envoy-gateway test CA")
	ca.WriteFile(t, certs, "ca.crt")
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	ca.Issue(t, testpki.Options{CommonName: egNode, DNSNames: []string{egNode}, IPs: loopback}).WriteFiles(t, certs, "tls")
	controller := ca.Issue(t, testpki.Options{CommonName: "envoy-gateway", IPs: loopback, Server: true}).TLS(t)
	envoy := ca.Issue(t, testpki.Options{CommonName: "envoy", Client: true}).TLS(t)
	// A Secret volume's files are 0644 (defaultMode 420) in a 0755 directory.
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.Chmod(filepath.Join(certs, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(certs, 0o755); err != nil {
		t.Fatal(err)
	}

	xdsAddr := serveEGSnapshot(t, credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{controller}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}))
	redis := redistest.Standalone(t)
	c := &ctr{id: "extauthz-test-eg-" + strconv.Itoa(os.Getpid())}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := docker(context.Background(), "logs", "--tail", "60", c.id)
			t.Logf("container log:\n%s", out)
		}
		_, _ = docker(context.Background(), "rm", "-f", c.id)
	})
	// On the host's network the ports are free ones picked before the
	// container binds them: another test may take one meanwhile, so a start
	// that lost that race is tried again on new ports.
	var grpcPort, httpPort int
	for attempt := 1; ; attempt++ {
		var promPort int
		grpcPort, httpPort, promPort = freePort(t), freePort(t), freePort(t)
		env := []string{
			"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
			"LOG_LEVEL=info", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xdsAddr,
			"CONFIG_GRPC_XDS_NODE_ID=" + egNode, "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY=/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr,
			"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(promPort), "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
			// Envoy Gateway's ports are 8081 and 8080; on the host's network a
			// test takes free ones.
			"GRPC_PORT=" + strconv.Itoa(grpcPort), "PORT=" + strconv.Itoa(httpPort),
		}
		run := []string{"run", "-d", "--name", c.id, "--network", "host", "--entrypoint", "/bin/ratelimit",
			"--user", "65534:65534", "-v", certs + ":/certs:ro"}
		run = append(run, lockedDown...)
		for _, kv := range env {
			run = append(run, "-e", kv)
		}
		mustDocker(t, append(run, image.name)...)
		err := waitContainerOK(c.id, "http://127.0.0.1:"+strconv.Itoa(httpPort)+"/healthcheck", 60*time.Second)
		if err == nil {
			break
		}
		logs, _ := docker(context.Background(), "logs", c.id)
		if attempt == 3 || !strings.Contains(logs, "address already in use") {
			t.Fatal(err)
		}
		t.Logf("attempt %d lost a port to another test; again on new ports", attempt)
		_, _ = docker(context.Background(), "rm", "-f", c.id)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool(), Certificates: []tls.Certificate{envoy}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	// Ready at once (FORCE_START_WITHOUT_INITIAL_CONFIG=true); the limit
	// comes with the snapshot: poll until it is served, then spend it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := egDecide(t, client)
		if resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 1 {
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("first call under the snapshot's 1/minute: %v, want OK", resp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision by the snapshot's limit after 30s: %v", resp)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if resp := egDecide(t, client); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second call under 1/minute: %v, want OVER_LIMIT", resp)
	}
}

// egDecide asks for the descriptor Envoy Gateway's translator emits for
// the first rule of an HTTPRoute.
func egDecide(t *testing.T, client rlsv3.RateLimitServiceClient) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: xdstest.GatewayRouteKey, Value: xdstest.GatewayRouteKey},
			{Key: xdstest.GatewayMatchKey, Value: xdstest.GatewayMatchKey},
		}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit over mutual TLS: %v", err)
	}
	return resp
}

// serveEGSnapshot serves, with go-control-plane (the library Envoy
// Gateway's controller uses), one snapshot shaped like its golden files
// for egNode, on a loopback port; it returns host:port.
func serveEGSnapshot(t *testing.T, creds credentials.TransportCredentials) string {
	t.Helper()
	x := xdstest.Start(t, "127.0.0.1:0", creds)
	x.Set(t, egNode, "1", xdstest.GatewayLimit("default/eg/http", 1, rlsconfv3.RateLimitUnit_MINUTE))
	return x.Addr
}
