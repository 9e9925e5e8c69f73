package redisclient

import (
	"context"
	"testing"

	"github.com/extauthz/extauthz/internal/redistest"
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
