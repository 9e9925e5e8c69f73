package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/credentials"

	"github.com/extauthz/extauthz/internal/testpki"
	"github.com/extauthz/extauthz/internal/xdstest"
)

// Envoy Gateway's names: the listener (the RateLimitConfig's domain, and
// the ratelimit filter's) and the node id its controller serves.
const (
	egDomain = "default/eg/http"
	egNode   = "envoy-ratelimit"
	// egUserHeader is the header of the rule's Distinct client selector:
	// a budget per value, so each phase below takes a user of its own.
	egUserHeader = "x-user-id"
)

// TestLimitsOverXDSThroughEnvoy runs the front proxy (its ratelimit filter
// only, with Envoy Gateway's route actions and domain) against two
// replicas that take their limits from a go-control-plane xDS server
// (EXTAUTHZ_POLICY_SOURCE=xds, mutual TLS to it) and speak mutual TLS to
// Envoy (envoy/fragments/extauthz-mtls.yaml), and asserts through Envoy:
//   - the xDS server is down when the replicas start: they stay not ready
//     until it comes, then serve its snapshot (v1);
//   - a new snapshot (v2) changes the limit without a restart;
//   - a bad snapshot (v3) is NACKed by both replicas and v2's limit holds;
//   - the server restarted mid-run: while it is down the last good policy
//     serves, and the new server's snapshot (v4) is followed.
func TestLimitsOverXDSThroughEnvoy(t *testing.T) {
	t.Parallel()
	pki := newXDSPKI(t)
	xdsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	var x *xdstest.Server
	s := newStack(t, stackOpts{
		stripFilters: true,
		keepFilters:  []string{"envoy.filters.http.ratelimit"},
		env:          pki.replicaEnv(xdsAddr),
		edit: func(src []byte) []byte {
			return withGatewayRateLimits(t, withClusterTLS(t, src, "extauthz", pki.envoyFiles))
		},
		beforeReady: func(r *replica) {
			if x != nil {
				return
			}
			waitNotReadyForXDS(t, r)
			x = xdstest.Start(t, xdsAddr, pki.serverCreds)
			x.Set(t, egNode, "v1", xdstest.GatewayDistinctLimit(egDomain, 3, rlsconfv3.RateLimitUnit_HOUR))
		},
	})
	replicas := len(s.replicas)
	waitUntil(t, "both replicas to ACK v1", func() bool { return x.Acks("v1") == replicas })
	expectLimit(t, s, "v1", 3)

	x.Set(t, egNode, "v2", xdstest.GatewayDistinctLimit(egDomain, 5, rlsconfv3.RateLimitUnit_HOUR))
	waitUntil(t, "both replicas to ACK v2", func() bool { return x.Acks("v2") == replicas })
	expectLimit(t, s, "v2", 5)

	// A unit the peer does not know: refused by the loader, like a file.
	x.Set(t, egNode, "v3", xdstest.GatewayDistinctLimit(egDomain, 1, rlsconfv3.RateLimitUnit_UNKNOWN))
	waitUntil(t, "both replicas to NACK v3", func() bool { return x.Nacks("unknown unit") >= replicas })
	if n := x.Acks("v3"); n != 0 {
		t.Errorf("v3 ACKed %d times; a bad snapshot must be NACKed", n)
	}
	expectLimit(t, s, "v2 after the NACK of v3", 5)
	for _, r := range s.replicas {
		if got := replicaMetricWith(t, r, "extauthz_policy_xds_updates_total", `result="rejected"`); got != 1 {
			t.Errorf("%s counted %v rejected xDS updates, want 1 (v3, refused once however often it is resent)", r.name, got)
		}
	}

	x.Stop()
	expectLimit(t, s, "v2 with the xDS server down", 5)
	x2 := xdstest.Start(t, xdsAddr, pki.serverCreds)
	x2.Set(t, egNode, "v4", xdstest.GatewayDistinctLimit(egDomain, 2, rlsconfv3.RateLimitUnit_HOUR))
	waitUntil(t, "both replicas to take v4 from the restarted server", func() bool { return x2.Acks("v4") == replicas })
	expectLimit(t, s, "v4 from the restarted server", 2)
	for _, n := range x2.Nodes() {
		if n.GetId() != egNode {
			t.Errorf("a replica announced node %q, want %q", n.GetId(), egNode)
		}
	}
}

// xdsPKI is one CA for the three mutual TLS parties: Envoy, the replicas
// (serving gRPC, and as clients of the xDS server) and the xDS server.
type xdsPKI struct {
	serverCreds credentials.TransportCredentials
	// envoyFiles maps extauthz-mtls.yaml's paths to Envoy's files.
	envoyFiles map[string]string
	// replica's files: its certificate serves gRPC and is presented to the
	// xDS server.
	replicaCert, replicaKey, ca string
}

func newXDSPKI(t *testing.T) xdsPKI {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "e2e xDS CA")
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	replicaCert, replicaKey := ca.Issue(t, testpki.Options{CommonName: egNode, DNSNames: []string{"extauthz", egNode}, IPs: loopback,
		Client: true, Server: true}).WriteFiles(t, dir, "extauthz")
	envoyCert, envoyKey := ca.Issue(t, testpki.Options{CommonName: "envoy", URIs: []string{envoyClientSAN}, Client: true}).WriteFiles(t, dir, "envoy")
	controller := ca.Issue(t, testpki.Options{CommonName: "envoy-gateway", DNSNames: []string{"envoy-gateway"}, Server: true})
	caFile := ca.WriteFile(t, dir, "ca.crt")
	return xdsPKI{
		serverCreds: credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{controller.TLS(t)},
			ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}),
		envoyFiles:  map[string]string{"/etc/envoy/tls/tls.crt": envoyCert, "/etc/envoy/tls/tls.key": envoyKey, "/etc/envoy/tls/ca.crt": caFile},
		replicaCert: replicaCert, replicaKey: replicaKey, ca: caFile,
	}
}

// replicaEnv: mutual TLS on gRPC for Envoy, the limits over mutual TLS
// xDS from xdsAddr (the controller's certificate names envoy-gateway), a
// short reconnect backoff so that a restarted server is found quickly.
func (p xdsPKI) replicaEnv(xdsAddr string) []string {
	return []string{
		"EXTAUTHZ_GRPC_TLS_CERT=" + p.replicaCert, "EXTAUTHZ_GRPC_TLS_KEY=" + p.replicaKey,
		"EXTAUTHZ_GRPC_TLS_CLIENT_CA=" + p.ca, "EXTAUTHZ_GRPC_TLS_CLIENT_SANS=" + envoyClientSAN,
		"EXTAUTHZ_POLICY_SOURCE=xds", "EXTAUTHZ_XDS_SERVER_URL=" + xdsAddr, "EXTAUTHZ_XDS_NODE_ID=" + egNode,
		"EXTAUTHZ_XDS_SERVER_USE_TLS=true", "EXTAUTHZ_XDS_SERVER_TLS_CA=" + p.ca, "EXTAUTHZ_XDS_SERVER_TLS_SAN=envoy-gateway",
		"EXTAUTHZ_XDS_CLIENT_TLS_CERT=" + p.replicaCert, "EXTAUTHZ_XDS_CLIENT_TLS_KEY=" + p.replicaKey,
		"EXTAUTHZ_XDS_BACKOFF_MIN=100ms", "EXTAUTHZ_XDS_BACKOFF_MAX=1s",
	}
}

// waitNotReadyForXDS waits until r's /readyz answers, and requires that
// answer to be 503 naming xDS: with no snapshot yet (and no forced start)
// a replica keeps out of rotation.
func waitNotReadyForXDS(t *testing.T, r *replica) {
	t.Helper()
	var code int
	var body string
	waitUntil(t, r.name+"'s /readyz to answer", func() bool {
		resp, err := probeClient.Get("http://" + r.httpAddr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return true
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "xDS") {
		t.Fatalf("%s with the xDS server down: /readyz %d %q, want 503 naming xDS", r.name, code, body)
	}
}

// expectLimit sends limit+1 requests of a new user through Envoy: the
// first limit admitted with RateLimit-Policy q=limit, the next one 429.
func expectLimit(t *testing.T, s *stack, phase string, limit int) {
	t.Helper()
	user := uniq("user")
	var got []int
	for i := 0; i <= limit; i++ {
		r := s.do(t, req{path: "/things", header: map[string]string{egUserHeader: user}})
		got = append(got, r.status)
		if r.status == http.StatusOK {
			wantField(t, r, "RateLimit-Policy", fmt.Sprintf("q=%d;", limit))
		}
	}
	want := slices.Repeat([]int{http.StatusOK}, limit)
	if want = append(want, http.StatusTooManyRequests); !slices.Equal(got, want) {
		t.Errorf("%s: statuses %v, want %v", phase, got, want)
	}
}

// waitUntil polls cond every 50 ms, for up to 60 s on a loaded machine.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60s waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withGatewayRateLimits gives an envoy/ file Envoy Gateway's shape of
// rate limiting: the ratelimit filter's domain is the listener's
// (egDomain), and the catch-all route sends the descriptor of a rule with
// a Distinct header selector (xdstest.GatewayDistinctLimit).
func withGatewayRateLimits(t *testing.T, src []byte) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	actions := []any{
		map[string]any{"generic_key": map[string]any{"descriptor_key": xdstest.GatewayRouteKey, "descriptor_value": xdstest.GatewayRouteKey}},
		map[string]any{"generic_key": map[string]any{"descriptor_key": xdstest.GatewayPolicyRuleKey, "descriptor_value": xdstest.GatewayPolicyRuleKey}},
		map[string]any{"request_headers": map[string]any{"header_name": egUserHeader, "descriptor_key": xdstest.GatewayMatchKey}},
	}
	var domains, routes int
	walkMaps(doc, func(m map[string]any) {
		if m["@type"] == "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit" {
			m["domain"] = egDomain
			domains++
		}
		if match, _ := m["match"].(map[string]any); len(match) == 1 && match["prefix"] == "/" {
			if route, _ := m["route"].(map[string]any); route != nil {
				route["rate_limits"] = []any{map[string]any{"actions": actions}}
				routes++
			}
		}
	})
	if domains != 1 || routes != 1 {
		t.Fatalf("found %d ratelimit filters and %d catch-all routes, want one each", domains, routes)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// walkMaps calls fn on every map in v, depth first.
func walkMaps(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(v)
		for _, c := range v {
			walkMaps(c, fn)
		}
	case []any:
		for _, c := range v {
			walkMaps(c, fn)
		}
	}
}
