package certsource_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/certsource"
	"github.com/extauthz/extauthz/internal/testpki"
)

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

// rig is a TLS echo server on loopback serving a Source's identity.
type rig struct {
	dir              string
	ca               *testpki.CA
	cert, key, cliCA string
	src              *certsource.Source
	addr             string
}

func newRig(t *testing.T, sans ...string) *rig {
	t.Helper()
	r := &rig{dir: t.TempDir(), ca: testpki.NewCA(t, "test CA")}
	r.cert, r.key = r.ca.Issue(t, testpki.Options{CommonName: "server", IPs: loopback, Server: true}).WriteFiles(t, r.dir, "server")
	r.cliCA = r.ca.WriteFile(t, r.dir, "client-ca.crt")
	src, err := certsource.New(certsource.Files{Cert: r.cert, Key: r.key, ClientCA: r.cliCA, ClientSANs: sans})
	if err != nil {
		t.Fatal(err)
	}
	r.src = src
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r.addr = ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return r
}

// client issues a client certificate from ca with o.
func client(t *testing.T, ca *testpki.CA, o testpki.Options) *tls.Certificate {
	t.Helper()
	o.Client = true
	c := ca.Issue(t, o).TLS(t)
	return &c
}

// dial connects with cert (nil: none) trusting r's CA, and exchanges one
// message: a refused handshake shows here at the latest (TLS 1.3 clients
// learn of it on their first read).
func (r *rig) dial(t *testing.T, cert *tls.Certificate) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: r.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := echo(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func echo(c *tls.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return errors.New("bad echo")
	}
	return nil
}

func TestMutualTLSRefusesClientsWithoutAValidCertificate(t *testing.T) {
	r := newRig(t, "spiffe://cluster.local/ns/envoy-gateway-system/sa/envoy", "envoy.internal")
	other := testpki.NewCA(t, "another CA")
	cases := []struct {
		name string
		cert *tls.Certificate
		ok   bool
	}{
		{"allowed URI SAN", client(t, r.ca, testpki.Options{URIs: []string{"spiffe://cluster.local/ns/envoy-gateway-system/sa/envoy"}}), true},
		{"allowed DNS SAN", client(t, r.ca, testpki.Options{DNSNames: []string{"envoy.internal"}}), true},
		{"no certificate", nil, false},
		{"another CA", client(t, other, testpki.Options{DNSNames: []string{"envoy.internal"}}), false},
		{"expired", client(t, r.ca, testpki.Options{DNSNames: []string{"envoy.internal"},
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}), false},
		{"SAN not allowed", client(t, r.ca, testpki.Options{DNSNames: []string{"attacker.internal"}}), false},
	}
	for _, c := range cases {
		conn, err := r.dial(t, c.cert)
		if conn != nil {
			conn.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestReloadRotatesForNewHandshakesAndKeepsLiveConnections(t *testing.T) {
	r := newRig(t)
	cert := client(t, r.ca, testpki.Options{CommonName: "envoy"})
	live, err := r.dial(t, cert)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	before := live.ConnectionState().PeerCertificates[0].SerialNumber

	if changed, err := r.src.Reload(); changed || err != nil {
		t.Fatalf("Reload of unchanged files: changed=%v err=%v, want false, nil", changed, err)
	}
	rotated := r.ca.Issue(t, testpki.Options{CommonName: "server", IPs: loopback, Server: true})
	rotated.WriteFiles(t, r.dir, "server")
	if changed, err := r.src.Reload(); !changed || err != nil {
		t.Fatalf("Reload after rotation: changed=%v err=%v", changed, err)
	}
	fresh, err := r.dial(t, cert)
	if err != nil {
		t.Fatalf("handshake after rotation: %v", err)
	}
	defer fresh.Close()
	if got := fresh.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(rotated.Cert.SerialNumber) != 0 || got.Cmp(before) == 0 {
		t.Errorf("new handshake got serial %v, want the rotated %v", got, rotated.Cert.SerialNumber)
	}
	if err := echo(live); err != nil {
		t.Errorf("connection opened before the rotation: %v", err)
	}
	if !r.src.NotAfter().Equal(rotated.Cert.NotAfter) {
		t.Errorf("NotAfter %v, want the rotated certificate's %v", r.src.NotAfter(), rotated.Cert.NotAfter)
	}
}

func TestBadReloadKeepsTheLastGoodIdentity(t *testing.T) {
	r := newRig(t)
	cert := client(t, r.ca, testpki.Options{CommonName: "envoy"})
	// A new certificate whose key has not arrived yet (the files are
	// replaced one at a time).
	half := r.ca.Issue(t, testpki.Options{CommonName: "server", IPs: loopback, Server: true})
	if err := os.WriteFile(r.cert, half.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.src.Reload(); !errors.Is(err, certsource.ErrInvalid) {
		t.Fatalf("Reload of a mismatched pair: %v, want ErrInvalid", err)
	}
	if changed, err := r.src.Reload(); changed || err != nil {
		t.Errorf("second Reload of the same bad set: changed=%v err=%v, want it reported once", changed, err)
	}
	if c, err := r.dial(t, cert); err != nil {
		t.Fatalf("handshake after a bad reload: %v (the last good identity must serve)", err)
	} else {
		c.Close()
	}
	if err := os.WriteFile(r.key, half.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.src.Reload(); !changed || err != nil {
		t.Fatalf("Reload once the key arrived: changed=%v err=%v", changed, err)
	}
	c, err := r.dial(t, cert)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(half.Cert.SerialNumber) != 0 {
		t.Errorf("serial %v, want the completed pair's %v", got, half.Cert.SerialNumber)
	}
}

func TestClientCARotation(t *testing.T) {
	r := newRig(t)
	next := testpki.NewCA(t, "next CA")
	newClient := client(t, next, testpki.Options{CommonName: "envoy"})
	if c, err := r.dial(t, newClient); err == nil {
		c.Close()
		t.Fatal("a client of a CA not yet trusted was admitted")
	}
	next.WriteFile(t, r.dir, "client-ca.crt")
	if _, err := r.src.Reload(); err != nil {
		t.Fatal(err)
	}
	c, err := r.dial(t, newClient)
	if err != nil {
		t.Fatalf("client of the new CA after reload: %v", err)
	}
	c.Close()
	if c, err := r.dial(t, client(t, r.ca, testpki.Options{CommonName: "envoy"})); err == nil {
		c.Close()
		t.Error("a client of the replaced CA is still admitted")
	}
}

func TestNewRejectsIncompleteFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	cert, key := ca.Issue(t, testpki.Options{Server: true}).WriteFiles(t, dir, "s")
	for name, f := range map[string]certsource.Files{
		"no key":            {Cert: cert},
		"SANs without a CA": {Cert: cert, Key: key, ClientSANs: []string{"x"}},
		"missing file":      {Cert: cert, Key: dir + "/nope.key"},
		"CA not PEM":        {Cert: cert, Key: key, ClientCA: key},
	} {
		if _, err := certsource.New(f); !errors.Is(err, certsource.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
