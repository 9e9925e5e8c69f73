package certsource

import (
	"crypto/tls"
	"fmt"
	"sync"
)

// ClientCert is a client's TLS certificate read from PEM files at each
// handshake (tls.Config.GetClientCertificate), so a rotated Secret is
// presented from the next connection on, with no reload loop: clients
// (the xDS stream, Redis pools) connect seldom enough for a read each. A
// pair that does not load, caught mid-rotation, leaves the last good one
// in use.
type ClientCert struct {
	cert, key string
	mu        sync.Mutex
	last      *tls.Certificate
}

// NewClientCert reads the pair once, so that a wrong path or a mismatched
// pair is an error at start, naming both files.
func NewClientCert(certFile, keyFile string) (*ClientCert, error) {
	c := &ClientCert{cert: certFile, key: keyFile}
	if _, err := c.Get(nil); err != nil {
		return nil, fmt.Errorf("%w: client certificate %s, key %s: %w", ErrInvalid, certFile, keyFile, err)
	}
	return c, nil
}

// Get returns the pair as the files hold it now, else the last good one.
func (c *ClientCert) Get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.last = &pair
	}
	if c.last == nil {
		return nil, err
	}
	return c.last, nil
}
