package main

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/extauthz/extauthz/internal/testpki"
)

// serveMTLS serves the fake over TLS that requires a client certificate
// signed by ca, and returns its address.
func serveMTLS(t *testing.T, ca *testpki.CA) string {
	t.Helper()
	server := ca.Issue(t, testpki.Options{CommonName: "rls", DNSNames: []string{"rls.test"}, Server: true})
	conf := &tls.Config{
		Certificates: []tls.Certificate{server.TLS(t)},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	rlsv3.RegisterRateLimitServiceServer(srv, &fakeRLS{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestGRPCClientSpeaksMTLS: with -tls-ca, -tls-cert, -tls-key and
// -tls-server-name the grpc client completes mTLS and its calls are
// answered; without the client certificate the server refuses every call.
func TestGRPCClientSpeaksMTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "load-ca")
	caPath := ca.WriteFile(t, dir, "ca.crt")
	certPath, keyPath := ca.Issue(t, testpki.Options{CommonName: "envoy", Client: true}).WriteFiles(t, dir, "client")
	addr := serveMTLS(t, ca)

	r := runJSON(t, "-addr", addr, "-keys", "2", "-concurrency", "2", "-duration", "200ms",
		"-tls-ca", caPath, "-tls-cert", certPath, "-tls-key", keyPath, "-tls-server-name", "rls.test")
	if r.OK == 0 || r.Over == 0 || r.Errors != 0 {
		t.Fatalf("over mTLS: report %+v, want OK and OVER_LIMIT calls and no errors", r)
	}

	r = runJSON(t, "-addr", addr, "-concurrency", "1", "-duration", "200ms", "-timeout", "100ms",
		"-tls-ca", caPath, "-tls-server-name", "rls.test")
	if r.OK+r.Over != 0 || r.Errors == 0 {
		t.Fatalf("without a client certificate: report %+v, want only errors", r)
	}
}

func TestTLSFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-client", "h2", "-tls-ca", "ca.crt"},
		{"-tls-ca", "ca.crt", "-tls-cert", "c.crt"},
		{"-tls-ca", "ca.crt", "-tls-key", "c.key"},
		{"-tls-cert", "c.crt", "-tls-key", "c.key"},
		{"-tls-server-name", "rls.test"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	cfg, err := parseFlags([]string{"-tls-ca", "/nonexistent/ca.crt"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.tls.transportCredentials(); err == nil || !strings.Contains(err.Error(), "-tls-ca") {
		t.Errorf("missing CA file: err %v, want one naming -tls-ca", err)
	}
}
