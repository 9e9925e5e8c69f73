package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/internal/testpki"
)

// envoyClientSAN is the identity of the test's Envoy, the one extauthz
// admits (EXTAUTHZ_GRPC_TLS_CLIENT_SANS).
const envoyClientSAN = "spiffe://cluster.local/ns/edge/sa/front-proxy"

// TestFrontProxyOverMutualTLS runs front-proxy.yaml with the shipped
// envoy/fragments/extauthz-mtls.yaml block on its extauthz cluster, against replicas
// that speak mutual TLS only: RLS, ext_authz and ext_proc decide through
// it as they do in plaintext (a limit is exact across both replicas, a
// reply is replayed), Envoy's health checks pass over it, and a client
// without Envoy's certificate is refused by the same replicas.
func TestFrontProxyOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "e2e mesh CA")
	srvCert, srvKey := ca.Issue(t, testpki.Options{CommonName: "extauthz", DNSNames: []string{"extauthz"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true}).WriteFiles(t, dir, "extauthz")
	envoyCert, envoyKey := ca.Issue(t, testpki.Options{CommonName: "front-proxy", URIs: []string{envoyClientSAN}, Client: true}).WriteFiles(t, dir, "envoy")
	caFile := ca.WriteFile(t, dir, "ca.crt")

	s := newStack(t, stackOpts{
		env: []string{"EXTAUTHZ_GRPC_TLS_CERT=" + srvCert, "EXTAUTHZ_GRPC_TLS_KEY=" + srvKey,
			"EXTAUTHZ_GRPC_TLS_CLIENT_CA=" + caFile, "EXTAUTHZ_GRPC_TLS_CLIENT_SANS=" + envoyClientSAN},
		edit: func(src []byte) []byte {
			return withClusterTLS(t, src, "extauthz", map[string]string{
				"/etc/envoy/tls/tls.crt": envoyCert, "/etc/envoy/tls/tls.key": envoyKey, "/etc/envoy/tls/ca.crt": caFile,
			})
		},
	})
	for _, sc := range []scenario{
		{"eleventh_request_429", testEleventhRequest},
		{"sixth_request_429_ext_authz_http_limit", testSixthRequestExtAuthz},
		{"replicas_share_budget", testReplicasShareBudget},
		{"replay_once", func(t *testing.T, s *stack) { testReplay(t, s, wiringB) }},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, s) })
	}
	t.Run("plaintext_client_refused", func(t *testing.T) {
		for _, r := range s.replicas {
			if err := plaintextHealth(r.grpcAddr); err == nil {
				t.Errorf("replica %s answered a plaintext client", r.grpcAddr)
			}
		}
	})
}

// withClusterTLS adds envoy/fragments/extauthz-mtls.yaml's transport_socket to the
// named cluster of an Envoy YAML, with its file paths replaced as paths
// maps them.
func withClusterTLS(t *testing.T, src []byte, cluster string, paths map[string]string) []byte {
	t.Helper()
	block, err := os.ReadFile(filepath.Join(deps.root, "envoy", "fragments", "extauthz-mtls.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range paths {
		if !bytes.Contains(block, []byte(from)) {
			t.Fatalf("envoy/fragments/extauthz-mtls.yaml no longer names %s", from)
		}
		block = bytes.ReplaceAll(block, []byte(from), []byte(to))
	}
	var tlsBlock map[string]any
	if err := yaml.Unmarshal(block, &tlsBlock); err != nil {
		t.Fatalf("envoy/fragments/extauthz-mtls.yaml: %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	res, _ := doc["static_resources"].(map[string]any)
	clusters, _ := res["clusters"].([]any)
	found := false
	for _, c := range clusters {
		if cm, _ := c.(map[string]any); cm["name"] == cluster {
			cm["transport_socket"] = tlsBlock["transport_socket"]
			found = true
		}
	}
	if !found {
		t.Fatalf("no cluster %q", cluster)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "UpstreamTlsContext") {
		t.Fatal("transport_socket not rendered")
	}
	return out
}

// plaintextHealth asks addr's gRPC health service without TLS.
func plaintextHealth(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}
