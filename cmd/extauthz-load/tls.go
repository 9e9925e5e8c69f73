package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// tlsFlags are the -tls-* settings of the grpc client: with none set it
// speaks plaintext, as before.
type tlsFlags struct {
	ca, cert, key, serverName string
}

func (t tlsFlags) enabled() bool {
	return t.ca != "" || t.cert != "" || t.key != "" || t.serverName != ""
}

// check refuses combinations that would silently not do what was asked.
func (t tlsFlags) check(client string) error {
	switch {
	case !t.enabled():
		return nil
	case client != clientGRPC:
		return errors.New("-tls-* flags need -client grpc (the h2 client speaks plaintext only)")
	case (t.cert == "") != (t.key == ""):
		return errors.New("-tls-cert and -tls-key go together")
	case t.ca == "":
		return errors.New("-tls-ca is needed to verify the server")
	}
	return nil
}

// transportCredentials are plaintext without -tls-*, otherwise TLS that
// verifies the server against -tls-ca and, given -tls-cert/-tls-key,
// presents a client certificate (mTLS).
func (t tlsFlags) transportCredentials() (credentials.TransportCredentials, error) {
	if !t.enabled() {
		return insecure.NewCredentials(), nil
	}
	caPEM, err := os.ReadFile(t.ca)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("-tls-ca: no PEM certificate in %s", t.ca)
	}
	conf := &tls.Config{RootCAs: roots, ServerName: t.serverName, MinVersion: tls.VersionTLS12}
	if t.cert != "" {
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(conf), nil
}

// flags registers the -tls-* flags on fs.
func (t *tlsFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&t.ca, "tls-ca", "", "PEM CA bundle that verifies the server; turns on TLS (-client grpc only)")
	fs.StringVar(&t.cert, "tls-cert", "", "PEM client certificate presented for mTLS (with -tls-key)")
	fs.StringVar(&t.key, "tls-key", "", "PEM key of -tls-cert")
	fs.StringVar(&t.serverName, "tls-server-name", "", "name the server certificate must carry (default: the host of -addr)")
}
