// Package testpki issues throwaway certificates for tests: a CA, and server
// and client certificates signed by it with the names, usages and validity
// a test asks for, written as PEM files where a server reads them.
package testpki

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
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for a trust bundle.
	PEM []byte
}

// NewCA returns a CA valid from an hour ago for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("testpki: CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("testpki: CA: %v", err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes the CA certificate to dir/name and returns its path.
func (ca *CA) WriteFile(tb testing.TB, dir, name string) string {
	tb.Helper()
	return writeFile(tb, filepath.Join(dir, name), ca.PEM)
}

// Options describe a certificate to issue. Zero NotBefore/NotAfter mean
// valid from an hour ago for a day.
type Options struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []string
	NotBefore  time.Time
	NotAfter   time.Time
	// Client and Server set the extended key usages; neither means both.
	Client, Server bool
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a certificate as o describes.
func (ca *CA) Issue(tb testing.TB, o Options) Leaf {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: o.CommonName},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages(o),
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	}
	for _, u := range o.URIs {
		parsed, err := url.Parse(u)
		if err != nil {
			tb.Fatalf("testpki: URI SAN %q: %v", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("testpki: issue %q: %v", o.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("testpki: issue %q: %v", o.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("testpki: key: %v", err)
	}
	return Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// TLS is the leaf as a tls.Certificate.
func (l Leaf) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		tb.Fatalf("testpki: key pair: %v", err)
	}
	return c
}

// WriteFiles writes the certificate and key to dir/name.crt and
// dir/name.key and returns their paths.
func (l Leaf) WriteFiles(tb testing.TB, dir, name string) (certPath, keyPath string) {
	tb.Helper()
	return writeFile(tb, filepath.Join(dir, name+".crt"), l.CertPEM),
		writeFile(tb, filepath.Join(dir, name+".key"), l.KeyPEM)
}

func usages(o Options) []x509.ExtKeyUsage {
	switch {
	case o.Client && !o.Server:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case o.Server && !o.Client:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testpki: key: %v", err)
	}
	return k
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatalf("testpki: serial: %v", err)
	}
	return n
}

// writeFile writes b to path atomically (a rename), as a Secret update
// swaps files, so a reader never sees half a file.
func writeFile(tb testing.TB, path string, b []byte) string {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		tb.Fatalf("testpki: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatalf("testpki: %v", err)
	}
	return path
}
