package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// tlsFiles are a test CA and a server certificate for 127.0.0.1 signed by it.
type tlsFiles struct {
	ca, cert, key string
	pool          *x509.CertPool
}

// StandaloneTLS starts a standalone redis-server that speaks TLS only. Its
// URL is rediss://; CAFile returns the PEM file that verifies it.
func StandaloneTLS(tb testing.TB) *Server {
	tb.Helper()
	bin := findBin(tb, "REDIS_SERVER_BIN", "redis-server")
	tf, err := newTLSFiles(tb.TempDir())
	if err != nil {
		tb.Fatalf("redistest: certificates: %v", err)
	}
	s := newServerTLS(tb, bin, nil, tf, "")
	tb.Cleanup(s.Stop)
	return s
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
		"--tls-auth-clients", "no"}
}

// clientConfig verifies the server with the test CA; nil without TLS.
func (tf *tlsFiles) clientConfig() *tls.Config {
	if tf == nil {
		return nil
	}
	return &tls.Config{RootCAs: tf.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

func newTLSFiles(dir string) (*tlsFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	tf := &tlsFiles{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "server.pem"), key: filepath.Join(dir, "server.key"), pool: x509.NewCertPool()}
	tf.pool.AddCert(caCert)
	for path, block := range map[string]*pem.Block{
		tf.ca:   {Type: "CERTIFICATE", Bytes: caDER},
		tf.cert: {Type: "CERTIFICATE", Bytes: srvDER},
		tf.key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return tf, nil
}
