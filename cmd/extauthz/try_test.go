package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
)

// tryAnswer is the part of `extauthz try`'s JSON the tests read.
type tryAnswer struct {
	OverallCode string
	Statuses    []struct {
		Code           string
		CurrentLimit   struct{ Name string }
		LimitRemaining int
	}
	Status         struct{ Code int }
	DeniedResponse struct {
		Status struct{ Code string }
	}
}

func runTry(t *testing.T, wantCode int, args ...string) tryAnswer {
	t.Helper()
	code, stdout, stderr := runBinary(t, nil, append([]string{"try"}, args...)...)
	if code != wantCode {
		t.Fatalf("try %v: exit %d, want %d\nstdout %s\nstderr %s", args, code, wantCode, stdout, stderr)
	}
	var a tryAnswer
	if wantCode == 0 {
		if err := json.Unmarshal([]byte(stdout), &a); err != nil {
			t.Fatalf("try %v: output is not JSON: %v\n%s", args, err, stdout)
		}
	}
	return a
}

// TestTrySendsTheREADMEDecision runs `extauthz try` against the served
// example policy: with no descriptor it asks the README's example (orders of
// tenant acme: 20/s with a burst of 40) and prints the answer; the same
// tenant's budget then runs out while another tenant's does not.
func TestTrySendsTheREADMEDecision(t *testing.T) {
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t))
	a := runTry(t, 0, "-addr", p.grpcAddr)
	if a.OverallCode != "OK" || len(a.Statuses) != 1 || a.Statuses[0].CurrentLimit.Name != "orders-rate" ||
		a.Statuses[0].LimitRemaining != 39 {
		t.Fatalf("first try: %+v; want OK with orders-rate remaining 39", a)
	}
	// The bucket refills 20/s while the processes start, so the checks
	// leave room for it: 39 more fit, then 30 more cannot (1.5 s of refill).
	a = runTry(t, 0, "rls", "-addr", p.grpcAddr, "-hits", "39", "tenant=acme,route=orders")
	if a.OverallCode != "OK" || a.Statuses[0].LimitRemaining > 10 {
		t.Fatalf("39 more hits: %+v; want OK with (nearly) nothing left", a)
	}
	a = runTry(t, 0, "-addr", p.grpcAddr, "-hits", "30")
	if a.OverallCode != "OVER_LIMIT" || a.Statuses[0].Code != "OVER_LIMIT" {
		t.Fatalf("30 more: %+v; want OVER_LIMIT", a)
	}
	a = runTry(t, 0, "-addr", p.grpcAddr, "-domain", "edge", "tenant=globex,route=orders")
	if a.OverallCode != "OK" {
		t.Fatalf("another tenant: %+v; want OK", a)
	}
}

// TestTryAuthz asks ext_authz Check: a GET of an order is admitted (status
// 0); a POST to /orders without the Idempotency-Key the route requires is
// denied with 400.
func TestTryAuthz(t *testing.T) {
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t))
	a := runTry(t, 0, "authz", "-addr", p.grpcAddr, "-path", "/orders/1", "-H", "x-tenant-id: initech")
	if a.Status.Code != 0 {
		t.Fatalf("GET: %+v; want status 0 (admitted)", a)
	}
	a = runTry(t, 0, "authz", "-addr", p.grpcAddr, "-method", "post", "-path", "/orders", "-body", "{}",
		"-H", "x-tenant-id: initech", "-H", "content-type: application/json")
	if a.Status.Code == 0 || a.DeniedResponse.Status.Code != "BadRequest" {
		t.Fatalf("POST without Idempotency-Key: %+v; want denied with 400", a)
	}
}

func TestTryErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-addr", closed}, 1, closed},
		{[]string{"tenant"}, 2, "want key=value"},
		{[]string{"authz", "-H", "novalue"}, 2, "want 'name: value'"},
		{[]string{"authz", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-nosuchflag"}, 2, "usage:"},
	} {
		code, _, stderr := runBinary(t, nil, append([]string{"try"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("try %v: exit %d, stderr %q; want %d containing %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestHelpNamesEverySubcommandAndAPI keeps `extauthz help` in step with the
// subcommands run accepts and the three Envoy APIs served.
func TestHelpNamesEverySubcommandAndAPI(t *testing.T) {
	code, stdout, _ := runBinary(t, nil, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for _, want := range []string{"extauthz [serve]", "extauthz validate", "extauthz try", "extauthz admin", "extauthz version",
		"extauthz help", "RLS", "RLQS", "ext_authz", "ext_proc", "/metrics"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, stdout)
		}
	}
	code, _, stderr := runBinary(t, nil, "try", "-h")
	if code != 2 || !strings.Contains(stderr, "extauthz try authz") {
		t.Errorf("try -h: exit %d, stderr %q; want 2 with try's usage", code, stderr)
	}
	code, _, stderr = runBinary(t, nil, "admin", "-h")
	for _, want := range []string{"state", "reset", "explain", "explain http", "record get", "record delete"} {
		if code != 2 || !strings.Contains(stderr, "  "+want+" ") {
			t.Errorf("admin -h: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
}
