// Package certsource serves a listener's TLS identity from PEM files and
// takes up new files without a restart: a Kubernetes Secret update or a
// cert-manager renewal replaces the files, the next Reload (Run polls)
// reads them, and every handshake from then on gets the new certificate
// and trusts the new client CA, while connections already open keep
// theirs. A reload that finds a broken or mismatched set keeps serving the
// last good one.
//
// With a client CA the listener is mutual TLS: a client must present a
// certificate that CA signed, valid now, and (when an allow-list is set)
// naming one of the allowed subject alternative names; otherwise the
// handshake fails, before any request is read.
package certsource

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// ErrInvalid means Files cannot make a TLS identity.
var ErrInvalid = errors.New("invalid TLS files")

// Files names the PEM files of a server's TLS identity.
type Files struct {
	// Cert is the certificate chain, leaf first; required.
	Cert string
	// Key is the leaf's private key; required.
	Key string
	// ClientCA, when set, is a bundle of the CAs whose certificates
	// clients must present (mutual TLS).
	ClientCA string
	// ClientSANs, when set, allow only client certificates naming one of
	// them as a DNS name, URI (for example a SPIFFE ID), IP address or
	// email address, compared exactly. It needs ClientCA.
	ClientSANs []string
}

// Source is a TLS identity read from Files. Safe for concurrent use.
type Source struct {
	files Files

	mu      sync.RWMutex
	current *tls.Config // what handshakes get
	leaf    *x509.Certificate
	seen    [3][sha256.Size]byte // the files' contents last read, good or bad
}

// New reads the files now; an error names the file at fault.
func New(f Files) (*Source, error) {
	switch {
	case f.Cert == "" || f.Key == "":
		return nil, fmt.Errorf("%w: a certificate and a key are both required", ErrInvalid)
	case len(f.ClientSANs) > 0 && f.ClientCA == "":
		return nil, fmt.Errorf("%w: a client SAN allow-list needs a client CA", ErrInvalid)
	}
	s := &Source{files: f}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Config is the tls.Config to listen with: each handshake gets the
// identity current at that moment.
func (s *Source) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.mu.RLock()
			defer s.mu.RUnlock()
			return s.current, nil
		},
	}
}

// NotAfter is when the serving certificate expires.
func (s *Source) NotAfter() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.leaf.NotAfter
}

// Reload reads the files again. It reports whether their contents changed
// since the last read; a changed set that does not make a valid identity
// is an error, and the last good one stays in force (the same bad set is
// reported once, not on every Reload).
func (s *Source) Reload() (changed bool, err error) {
	raw, sums, err := s.read()
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil && sums == s.seen {
		return false, nil
	}
	s.seen = sums
	cfg, leaf, err := s.build(raw)
	if err != nil {
		return true, err
	}
	s.current, s.leaf = cfg, leaf
	return true, nil
}

// Run calls Reload every interval until ctx ends, telling report of every
// change or failure.
func (s *Source) Run(ctx context.Context, interval time.Duration, report func(changed bool, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if changed, err := s.Reload(); changed || err != nil {
				report(changed, err)
			}
		}
	}
}

// read returns the files' contents and digests ([2] is empty without a
// client CA).
func (s *Source) read() ([3][]byte, [3][sha256.Size]byte, error) {
	var raw [3][]byte
	var sums [3][sha256.Size]byte
	for i, path := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		if path == "" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return raw, sums, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		raw[i], sums[i] = b, sha256.Sum256(b)
	}
	return raw, sums, nil
}

// build makes the per-handshake config from the files' contents.
func (s *Source) build(raw [3][]byte) (*tls.Config, *x509.Certificate, error) {
	pair, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s and %s: %w", ErrInvalid, s.files.Cert, s.files.Key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{pair}}
	if s.files.ClientCA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw[2]) {
			return nil, nil, fmt.Errorf("%w: %s: no PEM certificate", ErrInvalid, s.files.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	if len(s.files.ClientSANs) > 0 {
		allowed := s.files.ClientSANs
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !namesOneOf(cs.PeerCertificates[0], allowed) {
				return errors.New("client certificate names none of the allowed SANs")
			}
			return nil
		}
	}
	return cfg, pair.Leaf, nil
}

// namesOneOf reports whether c carries one of allowed as a SAN.
func namesOneOf(c *x509.Certificate, allowed []string) bool {
	names := slices.Concat(c.DNSNames, c.EmailAddresses)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return slices.ContainsFunc(names, func(n string) bool { return slices.Contains(allowed, n) })
}
