package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
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
