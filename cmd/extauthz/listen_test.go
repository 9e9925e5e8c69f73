package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/extauthz/extauthz/internal/testpki"
)

// tlsRig is a CA, the server's files and a running server with mTLS.
type tlsRig struct {
	dir       string
	ca        *testpki.CA
	cert, key string
	p         *proc
}

const envoySAN = "spiffe://cluster.local/ns/edge/sa/envoy"

func startMTLS(t *testing.T, env ...string) *tlsRig {
	t.Helper()
	r := &tlsRig{dir: t.TempDir(), ca: testpki.NewCA(t, "extauthz test CA")}
	r.cert, r.key = r.issueServer(t).WriteFiles(t, r.dir, "server")
	caFile := r.ca.WriteFile(t, r.dir, "ca.crt")
	r.p = start(t, append([]string{"EXTAUTHZ_CONFIG=" + examplePolicy(t), "EXTAUTHZ_DRAIN_DELAY=0s",
		"EXTAUTHZ_GRPC_TLS_CERT=" + r.cert, "EXTAUTHZ_GRPC_TLS_KEY=" + r.key,
		"EXTAUTHZ_GRPC_TLS_CLIENT_CA=" + caFile, "EXTAUTHZ_GRPC_TLS_CLIENT_SANS=" + envoySAN + ",other.example"}, env...)...)
	return r
}

func (r *tlsRig) issueServer(t *testing.T) testpki.Leaf {
	return r.ca.Issue(t, testpki.Options{CommonName: "extauthz", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
}

// dialTLS connects with cert (nil: none), trusting pool.
func dialTLS(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func decide(ctx context.Context, conn *grpc.ClientConn, tenant string, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: tenant}, {Key: "route", Value: "orders"},
		}}},
	}, opts...)
}

func TestGRPCMutualTLSDecidesOnlyForValidClients(t *testing.T) {
	r := startMTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leaf := func(ca *testpki.CA, o testpki.Options) *tls.Certificate {
		o.Client = true
		c := ca.Issue(t, o).TLS(t)
		return &c
	}
	other := testpki.NewCA(t, "another CA")
	cases := []struct {
		name string
		cert *tls.Certificate
		ok   bool
	}{
		{"allowed SPIFFE ID", leaf(r.ca, testpki.Options{URIs: []string{envoySAN}}), true},
		{"allowed DNS name", leaf(r.ca, testpki.Options{DNSNames: []string{"other.example"}}), true},
		{"no certificate", nil, false},
		{"another CA", leaf(other, testpki.Options{URIs: []string{envoySAN}}), false},
		{"expired", leaf(r.ca, testpki.Options{URIs: []string{envoySAN}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Minute)}), false},
		{"SAN not allowed", leaf(r.ca, testpki.Options{URIs: []string{"spiffe://cluster.local/ns/edge/sa/intruder"}}), false},
	}
	for _, c := range cases {
		conn := dialTLS(t, r.p.grpcAddr, r.ca.Pool(), c.cert)
		resp, err := decide(ctx, conn, "acme")
		if c.ok && (err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK) {
			t.Errorf("%s: %v, %v; want an OK decision", c.name, resp, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s: decided %v; want the handshake refused", c.name, resp)
		}
		if c.ok {
			if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s: health over mTLS %v, %v", c.name, h, err)
			}
		}
	}
	plain, err := grpc.NewClient(r.p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if resp, err := decide(ctx, plain, "acme"); err == nil {
		t.Errorf("plaintext client decided %v; want refused", resp)
	}
	// Only the two allowed clients were decided for.
	_, metrics := r.p.get(t, "/metrics")
	if !strings.Contains(metrics, `extauthz_decisions_total{api="ratelimit",domain="edge",outcome="ok"} 2`) {
		t.Errorf("decisions counted: want exactly 2 OK\n%s", grepLines(metrics, "extauthz_decisions_total"))
	}
}

// TestGRPCTLSRotationUnderLoad replaces the server's certificate while
// clients call without a pause, some on connections opened before, some on
// connections opened after: no call fails, and new handshakes get the new
// certificate.
func TestGRPCTLSRotationUnderLoad(t *testing.T) {
	r := startMTLS(t, "EXTAUTHZ_GRPC_TLS_RELOAD=1s")
	c := r.ca.Issue(t, testpki.Options{URIs: []string{envoySAN}, Client: true}).TLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				// A fresh connection (a new handshake) every 20 calls.
				conn := dialTLS(t, r.p.grpcAddr, r.ca.Pool(), &c)
				for range 20 {
					select {
					case <-stop:
						return
					default:
					}
					calls.Add(1)
					if _, err := decide(ctx, conn, "acme"); err != nil {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
				_ = conn.Close()
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // load before the rotation
	rotated := r.issueServer(t)
	rotated.WriteFiles(t, r.dir, "server")
	waitLog(t, r.p, "grpc tls: new files taken up", 20*time.Second)
	time.Sleep(500 * time.Millisecond) // load after it
	close(stop)
	wg.Wait()

	if failures.Load() != 0 {
		t.Fatalf("%d of %d calls failed during the rotation; first: %v", failures.Load(), calls.Load(), firstErr.Load())
	}
	conn := dialTLS(t, r.p.grpcAddr, r.ca.Pool(), &c)
	var p peer.Peer
	if _, err := decide(ctx, conn, "acme", grpc.Peer(&p)); err != nil {
		t.Fatal(err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || info.State.PeerCertificates[0].SerialNumber.Cmp(rotated.Cert.SerialNumber) != 0 {
		t.Fatalf("a handshake after the reload did not get the rotated certificate (serial %v)", rotated.Cert.SerialNumber)
	}
	t.Logf("%d calls, none failed, across the rotation", calls.Load())
}

func TestGRPCUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "extauthz.sock")
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_DRAIN_DELAY=0s", "EXTAUTHZ_GRPC_UDS="+sock)
	waitLog(t, p, "grpc unix socket listening", 20*time.Second)
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket %s: %v, %v; want a socket with mode 0660", sock, st, err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := decide(ctx, conn, "acme")
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("over the socket: %v, %v; want OK", resp, err)
	}
	// The TCP port serves the same counters.
	resp, err = decide(ctx, p.dial(t), "acme")
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() >= 39 {
		t.Fatalf("over TCP after one call over the socket: %v, %v; want the shared count", resp, err)
	}
}

func TestListenSettingsRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	cert, _ := ca.Issue(t, testpki.Options{Server: true}).WriteFiles(t, dir, "s")
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ env, want string }{
		{"EXTAUTHZ_GRPC_TLS_CERT=" + cert, "EXTAUTHZ_GRPC_TLS_KEY="},
		{"EXTAUTHZ_GRPC_TLS_KEY=" + filepath.Join(dir, "missing.key"), "EXTAUTHZ_GRPC_TLS_KEY="},
		{"EXTAUTHZ_GRPC_TLS_CLIENT_CA=" + cert, "EXTAUTHZ_GRPC_TLS_CLIENT_CA="},
		{"EXTAUTHZ_GRPC_TLS_RELOAD=10ms", "EXTAUTHZ_GRPC_TLS_RELOAD="},
		{"EXTAUTHZ_GRPC_UDS=" + filepath.Join(notDir, "x.sock"), "EXTAUTHZ_GRPC_UDS="},
	} {
		code, _, stderr := runBinary(t, []string{c.env})
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming %s", c.env, code, stderr, c.want)
		}
	}
	// A key that does not match the certificate passes the variable checks
	// and is refused when loaded, naming both files.
	other := ca.Issue(t, testpki.Options{Server: true})
	_, otherKey := other.WriteFiles(t, dir, "other")
	msg := startExpectExit(t, "EXTAUTHZ_GRPC_TLS_CERT="+cert, "EXTAUTHZ_GRPC_TLS_KEY="+otherKey)
	if !strings.Contains(msg, cert) || !strings.Contains(msg, otherKey) {
		t.Errorf("mismatched pair: %q; want both files named", msg)
	}
}

// waitLog waits until the process has logged msg.
func waitLog(t *testing.T, p *proc, msg string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.Logs(), `"msg":"`+msg+`"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged in %s\n%s", msg, d, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
