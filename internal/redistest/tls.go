package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strconv"
	"testing"

	"github.com/extauthz/extauthz/internal/testpki"
)

// tlsFiles are a test CA and a server certificate for 127.0.0.1 signed by
// it; with authClients, a client certificate by the same CA too, which the
// server requires (tls-auth-clients yes).
type tlsFiles struct {
	ca, cert, key         string
	pool                  *x509.CertPool
	authClients           bool
	clientCert, clientKey string
	clientPair            tls.Certificate
	issuer                *testpki.CA
	dir                   string
}

// StandaloneTLS starts a standalone redis-server that speaks TLS only. Its
// URL is rediss://; CAFile returns the PEM file that verifies it.
func StandaloneTLS(tb testing.TB) *Server {
	tb.Helper()
	bin := findBin(tb, "REDIS_SERVER_BIN", "redis-server")
	tf := newTLSFiles(tb, tb.TempDir())
	s := newServerTLS(tb, bin, nil, tf, "")
	tb.Cleanup(s.Stop)
	return s
}

// StandaloneMutualTLS starts a standalone redis-server that speaks TLS only
// and refuses a client without a certificate signed by its CA
// (tls-auth-clients yes). ClientCertFiles names one that it accepts.
func StandaloneMutualTLS(tb testing.TB) *Server {
	tb.Helper()
	bin := findBin(tb, "REDIS_SERVER_BIN", "redis-server")
	tf := newTLSFiles(tb, tb.TempDir())
	tf.requireClients(tb)
	s := newServerTLS(tb, bin, nil, tf, "")
	tb.Cleanup(s.Stop)
	return s
}

// ClientCertFiles are the PEM certificate and key that a
// StandaloneMutualTLS server accepts ("" otherwise).
func (s *Server) ClientCertFiles() (cert, key string) {
	if s.tlsFiles == nil {
		return "", ""
	}
	return s.tlsFiles.clientCert, s.tlsFiles.clientKey
}

// CAFile is the PEM bundle that verifies a StandaloneTLS server ("" otherwise).
func (s *Server) CAFile() string {
	if s.tlsFiles == nil {
		return ""
	}
	return s.tlsFiles.ca
}

// portArgs are the listening arguments: the plain port, or TLS only.
func (tf *tlsFiles) portArgs(port int) []string {
	if tf == nil {
		return []string{"--port", strconv.Itoa(port)}
	}
	return []string{"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", tf.cert, "--tls-key-file", tf.key, "--tls-ca-cert-file", tf.ca,
		"--tls-auth-clients", map[bool]string{true: "yes", false: "no"}[tf.authClients]}
}

// clientConfig verifies the server with the test CA; nil without TLS.
func (tf *tlsFiles) clientConfig() *tls.Config {
	if tf == nil {
		return nil
	}
	c := &tls.Config{RootCAs: tf.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if tf.authClients {
		c.Certificates = []tls.Certificate{tf.clientPair}
	}
	return c
}

// newTLSFiles makes a CA and a server certificate for 127.0.0.1 in dir.
func newTLSFiles(tb testing.TB, dir string) *tlsFiles {
	tb.Helper()
	ca := testpki.NewCA(tb, "redistest CA")
	cert, key := ca.Issue(tb, testpki.Options{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true}).WriteFiles(tb, dir, "server")
	return &tlsFiles{ca: ca.WriteFile(tb, dir, "ca.pem"), cert: cert, key: key, pool: ca.Pool(), issuer: ca, dir: dir}
}

// requireClients makes the server require a client certificate, and one
// the harness and tests present.
func (tf *tlsFiles) requireClients(tb testing.TB) {
	tb.Helper()
	leaf := tf.issuer.Issue(tb, testpki.Options{CommonName: "redistest client", Client: true})
	tf.authClients, tf.clientPair = true, leaf.TLS(tb)
	tf.clientCert, tf.clientKey = leaf.WriteFiles(tb, tf.dir, "client")
}
