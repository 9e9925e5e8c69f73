package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminCLIKeepsTheTokenOutOfArgv: the command line is world-readable
// (ps, /proc/PID/cmdline), so a token given there is refused, with exit 2
// and a line naming the variables to use, never echoing it.
func TestAdminCLIKeepsTheTokenOutOfArgv(t *testing.T) {
	t.Parallel()
	const tok = "argv-token-0123456789abcdef"
	for _, args := range [][]string{
		{"state", "-token", tok, "tenant=acme"},
		{"state", "-token=" + tok, "tenant=acme"},
		{"reset", "--token", tok, "tenant=acme"},
		{"record", "get", "-route", "orders", "-key", "k", "--token=" + tok},
		{"explain", "http", "-path", "/orders", "-token", tok},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), append([]string{"admin"}, args...), &stdout, &stderr)
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code != 2 || strings.Contains(stderr.String(), tok) || !strings.Contains(first, "EXTAUTHZ_ADMIN_TOKEN_FILE") {
			t.Errorf("admin %v: exit %d, stderr %q; want 2, a first line naming EXTAUTHZ_ADMIN_TOKEN_FILE, no token", args, code, stderr.String())
		}
	}
}

// TestAdminCLISendsJSON: the calls that change state or carry a body say
// application/json, which the API requires of them (a web form cannot).
func TestAdminCLISendsJSON(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.Header.Get("Content-Type")
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"reset", "tenant=acme"},
		{"explain", "tenant=acme"},
		{"explain", "http"},
		{"record", "delete", "-route", "orders", "-key", "k"},
	} {
		call, _, err := parseAdmin(args, &strings.Builder{})
		if err != nil {
			t.Fatalf("admin %v: %v", args, err)
		}
		if _, _, err := (adminConn{addr: srv.Listener.Addr().String()}).do(context.Background(), call); err != nil {
			t.Fatal(err)
		}
		if sent := <-got; !strings.HasSuffix(sent, " application/json") || strings.HasPrefix(sent, "GET") {
			t.Errorf("admin %v sent %q, want a non-GET call with Content-Type application/json", args, sent)
		}
	}
}
