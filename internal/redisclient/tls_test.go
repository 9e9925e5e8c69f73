package redisclient

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testpki"
)

// TestTLS talks to a TLS-only redis-server: verified with the CA file,
// refused without it, accepted with verification off.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := redistest.StandaloneTLS(t)
	cases := []struct {
		name   string
		opts   Options
		wantOK bool
	}{
		{"CA file", Options{URL: srv.URL, TLSCAFile: srv.CAFile()}, true},
		{"system roots", Options{URL: srv.URL}, false},
		{"insecure skip verify", Options{URL: srv.URL, TLSInsecureSkipVerify: true}, true},
	}
	for _, tc := range cases {
		c, err := New(tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = c.Ping(context.Background()).Err()
		if tc.wantOK && err != nil {
			t.Errorf("%s: %v; want a PONG", tc.name, err)
		}
		if !tc.wantOK && err == nil {
			t.Errorf("%s: succeeded against a certificate it cannot verify", tc.name)
		}
		_ = c.Close()
	}
}

// TestClientCertificate talks to a redis-server that requires a client
// certificate (tls-auth-clients yes): refused without one or with one from
// another CA, accepted with the one it trusts; the files are read at each
// dial, so the same client presents a rotated pair on its next connection.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	srv := redistest.StandaloneMutualTLS(t)
	goodCert, goodKey := srv.ClientCertFiles()
	dir := t.TempDir()
	otherCert, otherKey := testpki.NewCA(t, "another CA").Issue(t, testpki.Options{CommonName: "stranger", Client: true}).WriteFiles(t, dir, "client")
	ping := func(o Options) error {
		c, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.Ping(context.Background()).Err()
	}
	if err := ping(Options{URL: srv.URL, TLSCAFile: srv.CAFile()}); err == nil {
		t.Error("no client certificate: got a PONG from a server that requires one")
	}
	if err := ping(Options{URL: srv.URL, TLSCAFile: srv.CAFile(), TLSClientCertFile: goodCert, TLSClientKeyFile: goodKey}); err != nil {
		t.Errorf("the trusted client certificate: %v; want a PONG", err)
	}

	c, err := New(Options{URL: srv.URL, TLSCAFile: srv.CAFile(), TLSClientCertFile: otherCert, TLSClientKeyFile: otherKey})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Error("a client certificate from another CA: got a PONG")
	}
	// Rotated in place, as a Secret update does: the next dial presents it.
	for src, dst := range map[string]string{goodCert: otherCert, goodKey: otherKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Errorf("after the files were replaced by the trusted pair: %v; want a PONG on the next connection", err)
	}
}

// TestClientCertificateOptions: a half pair, a pair that does not load, or
// a client certificate with a plain redis:// URL is a config error.
func TestClientCertificateOptions(t *testing.T) {
	t.Parallel()
	cert, key := testpki.NewCA(t, "CA").Issue(t, testpki.Options{CommonName: "c", Client: true}).WriteFiles(t, t.TempDir(), "c")
	cases := map[string]Options{
		"cert without key": {URL: "rediss://127.0.0.1:1", TLSClientCertFile: cert},
		"key without cert": {URL: "rediss://127.0.0.1:1", TLSClientKeyFile: key},
		"missing files":    {URL: "rediss://127.0.0.1:1", TLSClientCertFile: "/nonexistent.crt", TLSClientKeyFile: "/nonexistent.key"},
		"swapped":          {URL: "rediss://127.0.0.1:1", TLSClientCertFile: key, TLSClientKeyFile: cert},
		"plain URL":        {URL: "redis://127.0.0.1:1", TLSClientCertFile: cert, TLSClientKeyFile: key},
	}
	for name, o := range cases {
		if _, err := New(o); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}
