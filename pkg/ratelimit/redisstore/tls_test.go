package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestTLS decides through a TLS-only redis-server: verified with the CA
// file, refused without it, accepted with verification off.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := redistest.StandaloneTLS(t)
	l := limitFor(ratelimit.GCRA, 5, time.Minute)
	cases := []struct {
		name   string
		opts   ClientOptions
		wantOK bool
	}{
		{"CA file", ClientOptions{URL: srv.URL, TLSCAFile: srv.CAFile()}, true},
		{"system roots", ClientOptions{URL: srv.URL}, false},
		{"insecure skip verify", ClientOptions{URL: srv.URL, TLSInsecureSkipVerify: true}, true},
	}
	for _, tc := range cases {
		c, err := NewClient(tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := newStore(t, c)
		res, err := s.Allow(context.Background(), randomKey(t), l, 1)
		if tc.wantOK && (err != nil || !res.Allowed) {
			t.Errorf("%s: %+v, %v; want admitted", tc.name, res, err)
		}
		if !tc.wantOK && err == nil {
			t.Errorf("%s: succeeded against a certificate it cannot verify", tc.name)
		}
		_ = c.Close()
	}
}
