package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestAdminRefusesWebPagesThroughTheBinary: against a served token-less
// loopback listener (the port-forward setup), what a web page can send (a
// form post, a cross-origin JSON post) is refused and resets nothing; the
// CLI's reset, from the shell, works.
func TestAdminRefusesWebPagesThroughTheBinary(t *testing.T) {
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_ADMIN_ADDR=127.0.0.1:0", "EXTAUTHZ_ADMIN_TOKEN=", "EXTAUTHZ_ADMIN_TOKEN_FILE=")
	addr := p.adminAddr(t)
	env := []string{"EXTAUTHZ_ADMIN_ADDR=" + addr, "EXTAUTHZ_ADMIN_TOKEN=", "EXTAUTHZ_ADMIN_TOKEN_FILE="}
	desc := "tenant=acme,route=orders"
	full, _ := dailyRemaining(t, env, "state", desc)
	runTry(t, 0, "-addr", p.grpcAddr, desc)
	form := url.Values{"domain": {"edge"}, "descriptor": {desc}}
	reset := "http://" + addr + "/v1/ratelimit/reset"
	for _, c := range []struct {
		name, target, body string
		headers            map[string]string
		want               int
	}{
		{"form post", reset, form.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}, 403},
		{"same-origin form post", reset, form.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"cross-origin JSON post", reset + "?" + form.Encode(), "", map[string]string{"Content-Type": "application/json",
			"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
	} {
		req, err := http.NewRequest("POST", c.target, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want %d problem+json", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), c.want)
		}
	}
	if got, _ := dailyRemaining(t, env, "state", desc); got != full-1 {
		t.Fatalf("after the refused posts remaining %d, want %d", got, full-1)
	}
	if got, _ := dailyRemaining(t, env, "reset", desc); got != full {
		t.Fatalf("after the CLI's reset remaining %d, want %d", got, full)
	}
}

// TestAdminLogHoldsNoCallerValues: a credential sent in malformed calls to
// every endpoint of a served admin API never reaches the process's log,
// while each call leaves its audit line.
func TestAdminLogHoldsNoCallerValues(t *testing.T) {
	const secret = "SECRET-91c2e7"
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_ADMIN_ADDR=127.0.0.1:0", "EXTAUTHZ_ADMIN_TOKEN=", "EXTAUTHZ_ADMIN_TOKEN_FILE=")
	base := "http://" + p.adminAddr(t)
	bad := url.Values{"domain": {"edge"}, "descriptor": {"api_key=" + secret + ",broken"}}.Encode()
	calls := []struct{ method, target, body string }{
		{"GET", base + "/v1/ratelimit/state?" + bad, ""},
		{"POST", base + "/v1/ratelimit/reset?" + bad, ""},
		{"POST", base + "/v1/explain", `{"ratelimit": {"domain": "edge", "descriptors": [[{"key": "api_key", "value": "x"}]]}, "` + secret + `": 1}`},
		{"GET", base + "/v1/idempotency/record?identity=acme&key=k&route=" + secret, ""},
		{"DELETE", base + "/v1/idempotency/record?identity=acme&key=k&route=orders&force=" + secret, ""},
	}
	for _, c := range calls {
		req, err := http.NewRequest(c.method, c.target, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%s %s: %d, want a refusal", c.method, c.target, resp.StatusCode)
		}
	}
	// The audit line is written after the answer: wait for the last one.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.Logs(), `"msg":"admin call"`) < len(calls) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	logs := p.Logs()
	if n := strings.Count(logs, `"msg":"admin call"`); n != len(calls) {
		t.Fatalf("%d audit lines, want %d:\n%s", n, len(calls), logs)
	}
	if strings.Contains(logs, secret) {
		t.Errorf("the log holds the caller's secret:\n%s", logs)
	}
}
