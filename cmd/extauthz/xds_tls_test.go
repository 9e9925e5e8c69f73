package main

import (
	"crypto/tls"
	"os"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials"

	"github.com/extauthz/extauthz/internal/testpki"
	"github.com/extauthz/extauthz/internal/xdstest"
)

func TestBinaryTakesPolicyOverMutualTLSXDS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, "xds-server-ca"), testpki.NewCA(t, "xds-client-ca")
	serverLeaf := serverCA.Issue(t, testpki.Options{CommonName: "xds", DNSNames: []string{"xds.example"}, Server: true})
	clientCert, clientKey := clientCA.Issue(t, testpki.Options{CommonName: "ratelimit", Client: true}).WriteFiles(t, dir, "client")
	creds := credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serverLeaf.TLS(t)},
		ClientCAs:    clientCA.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})
	x := xdstest.Start(t, "127.0.0.1:0", creds)
	x.Set(t, xdsNode, "v1", xdstest.GatewayLimit("first-listener", 4, rlsconfv3.RateLimitUnit_SECOND))
	tlsEnv := []string{"EXTAUTHZ_XDS_SERVER_USE_TLS=true", "EXTAUTHZ_XDS_SERVER_TLS_CA=" + serverCA.WriteFile(t, dir, "server-ca.pem"),
		"EXTAUTHZ_XDS_SERVER_TLS_SAN=xds.example"}

	// Without a client certificate the server refuses the handshake.
	anon := start(t, xdsEnv(x.Addr, tlsEnv...)...)
	eventually(t, "a refused stream to be logged", func() bool { return strings.Contains(anon.Logs(), "xds stream ended; reconnecting") })
	if code, _ := anon.get(t, "/readyz"); code != 503 {
		t.Errorf("/readyz without a client certificate = %d, want 503", code)
	}

	p := start(t, xdsEnv(x.Addr, append(tlsEnv, "EXTAUTHZ_XDS_CLIENT_TLS_CERT="+clientCert, "EXTAUTHZ_XDS_CLIENT_TLS_KEY="+clientKey)...)...)
	eventually(t, "ready over mutual TLS", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	if st := gatewayStatus(t, rlsv3.NewRateLimitServiceClient(p.dial(t)), "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 4 {
		t.Errorf("limit over mTLS %d, want 4", st.GetCurrentLimit().GetRequestsPerUnit())
	}
}

// A rotated client certificate (a Kubernetes Secret update) is presented on
// the next connection, without a restart.
func TestBinaryPresentsARotatedXDSClientCertificate(t *testing.T) {
	dir := t.TempDir()
	serverCA, oldCA, newCA := testpki.NewCA(t, "xds-server-ca"), testpki.NewCA(t, "old-client-ca"), testpki.NewCA(t, "new-client-ca")
	serverLeaf := serverCA.Issue(t, testpki.Options{CommonName: "xds", DNSNames: []string{"xds.example"}, Server: true})
	serverTrusting := func(ca *testpki.CA) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serverLeaf.TLS(t)},
			ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	}
	certPath, keyPath := oldCA.Issue(t, testpki.Options{CommonName: "ratelimit", Client: true}).WriteFiles(t, dir, "client")
	x := xdstest.Start(t, "127.0.0.1:0", serverTrusting(oldCA))
	x.Set(t, xdsNode, "v1", xdstest.GatewayLimit("first-listener", 4, rlsconfv3.RateLimitUnit_SECOND))
	p := start(t, xdsEnv(x.Addr, "EXTAUTHZ_XDS_SERVER_USE_TLS=true", "EXTAUTHZ_XDS_SERVER_TLS_CA="+serverCA.WriteFile(t, dir, "server-ca.pem"),
		"EXTAUTHZ_XDS_SERVER_TLS_SAN=xds.example", "EXTAUTHZ_XDS_CLIENT_TLS_CERT="+certPath, "EXTAUTHZ_XDS_CLIENT_TLS_KEY="+keyPath)...)
	eventually(t, "ready with the first certificate", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })

	// The certificate is replaced on disk, and the server now trusts only
	// the new CA: the reconnect must present the new certificate.
	newCert, newKey := newCA.Issue(t, testpki.Options{CommonName: "ratelimit", Client: true}).WriteFiles(t, t.TempDir(), "client")
	for src, dst := range map[string]string{newCert: certPath, newKey: keyPath} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	x.Stop()
	x2 := xdstest.Start(t, x.Addr, serverTrusting(newCA))
	x2.Set(t, xdsNode, "v2", xdstest.GatewayLimit("first-listener", 8, rlsconfv3.RateLimitUnit_SECOND))
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	eventually(t, "v2 over the rotated certificate", func() bool {
		return gatewayStatus(t, client, "first-listener").GetCurrentLimit().GetRequestsPerUnit() == 8
	})
}
