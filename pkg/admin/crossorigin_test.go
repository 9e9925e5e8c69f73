package admin

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
)

// call is one HTTP request as a browser or a script would send it.
type call struct {
	name, method, target, body string
	host                       string            // "" is the loopback listener's own
	headers                    map[string]string // beside the token
}

// send serves c and returns the status, with the problem's Content-Type
// checked on a refusal.
func (e *env) send(t *testing.T, c call) int {
	t.Helper()
	req := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
	req.Host = "127.0.0.1:9003"
	if c.host != "" {
		req.Host = c.host
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, req)
	if rec.Code >= 400 && rec.Header().Get("Content-Type") != authz.ContentTypeProblem {
		t.Errorf("%s: %d with Content-Type %q, want a problem", c.name, rec.Code, rec.Header().Get("Content-Type"))
	}
	return rec.Code
}

// spend makes one real decision on acme's orders counter (3 a minute).
func (e *env) spend(t *testing.T) {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
		{Key: "tenant", Value: "acme"}, {Key: "route", Value: "orders"}}}}}
	if _, err := e.rls.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// remaining reads acme's orders counter.
func (e *env) remaining(t *testing.T) int64 {
	t.Helper()
	var st RateLimitState
	e.do(t, "GET", stateQuery("tenant=acme,route=orders"), "", 200, &st)
	return st.Descriptors[0].Limits[0].Remaining
}

const (
	resetQuery = "/v1/ratelimit/reset?domain=edge&descriptor=tenant%3Dacme%2Croute%3Dorders"
	formBody   = "domain=edge&descriptor=tenant%3Dacme%2Croute%3Dorders"
	jsonType   = "application/json"
)

// TestWebPagesCannotDriveTheAPI: what a page in a browser can send to a
// token-less loopback listener (a form post, a cross-origin fetch, a
// same-site page on another port, a DNS-rebound name) is refused and
// resets nothing; the same call from a script (JSON, no Origin) works.
func TestWebPagesCannotDriveTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.spend(t)
	const spent = 2
	if got := e.remaining(t); got != spent {
		t.Fatalf("remaining after one decision = %d, want %d", got, spent)
	}
	evil := map[string]string{"Origin": "http://evil.example", "Content-Type": jsonType}
	for _, c := range []struct {
		call
		want int
	}{
		{call{name: "form post", method: "POST", target: "/v1/ratelimit/reset", body: formBody,
			headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415},
		{call{name: "form post, query in the action", method: "POST", target: resetQuery,
			headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415},
		{call{name: "text/plain form", method: "POST", target: resetQuery, body: "{}",
			headers: map[string]string{"Content-Type": "text/plain"}}, 415},
		{call{name: "multipart form", method: "POST", target: resetQuery,
			headers: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}}, 415},
		{call{name: "no Content-Type", method: "POST", target: resetQuery}, 415},
		{call{name: "record delete, no Content-Type", method: "DELETE", target: "/v1/idempotency/record?identity=acme&route=orders&key=k"}, 415},
		{call{name: "explain, text/plain", method: "POST", target: "/v1/explain", body: `{"http": {"method": "GET", "path": "/orders"}}`,
			headers: map[string]string{"Content-Type": "text/plain"}}, 415},
		{call{name: "cross-origin JSON post", method: "POST", target: resetQuery, headers: evil}, 403},
		{call{name: "cross-origin form post", method: "POST", target: resetQuery,
			headers: map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}}, 403},
		{call{name: "opaque origin", method: "POST", target: resetQuery, headers: map[string]string{"Origin": "null", "Content-Type": jsonType}}, 403},
		{call{name: "another port of localhost", method: "POST", target: resetQuery,
			headers: map[string]string{"Origin": "http://127.0.0.1:3000", "Content-Type": jsonType}}, 403},
		{call{name: "Sec-Fetch-Site cross-site", method: "POST", target: resetQuery,
			headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": jsonType}}, 403},
		{call{name: "Sec-Fetch-Site same-site", method: "POST", target: resetQuery,
			headers: map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": jsonType}}, 403},
		{call{name: "cross-origin read", method: "GET", target: stateQuery("tenant=acme,route=orders"),
			headers: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403},
		{call{name: "DNS rebinding", method: "POST", target: resetQuery, host: "evil.example:9003",
			headers: map[string]string{"Origin": "http://evil.example:9003", "Sec-Fetch-Site": "same-origin", "Content-Type": jsonType}}, 403},
		{call{name: "CORS preflight", method: "OPTIONS", target: resetQuery,
			headers: map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}}, 403},
	} {
		if got := e.send(t, c.call); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if got := e.remaining(t); got != spent {
		t.Fatalf("remaining after the refused calls = %d, want %d: one reset the counter", got, spent)
	}
	for _, c := range []call{
		{name: "same-origin page", method: "POST", target: resetQuery,
			headers: map[string]string{"Origin": "http://127.0.0.1:9003", "Sec-Fetch-Site": "same-origin", "Content-Type": jsonType}},
		{name: "typed URL", method: "GET", target: stateQuery("route=free"), headers: map[string]string{"Sec-Fetch-Site": "none"}},
		{name: "localhost", method: "GET", target: stateQuery("route=free"), host: "localhost:9003"},
		{name: "IPv6 loopback", method: "GET", target: stateQuery("route=free"), host: "[::1]:9003"},
		{name: "script", method: "POST", target: resetQuery, headers: map[string]string{"Content-Type": "application/json; charset=utf-8"}},
	} {
		if got := e.send(t, c); got != 200 {
			t.Errorf("%s: %d, want 200", c.name, got)
		}
	}
	if got := e.remaining(t); got != 3 {
		t.Fatalf("remaining after a script's reset = %d, want 3", got)
	}
}

// TestTokenListenerTakesAnyHost: with a token the listener may be on the
// pod network, reached under any name; cross-origin calls are still
// refused.
func TestTokenListenerTakesAnyHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "s3cret-token-0123456789")
	if got := e.send(t, call{name: "pod address", method: "POST", target: resetQuery, host: "10.1.2.3:9003",
		headers: map[string]string{"Content-Type": jsonType}}); got != 200 {
		t.Errorf("reset through the pod address: %d, want 200", got)
	}
	if got := e.send(t, call{name: "cross-origin", method: "POST", target: resetQuery, host: "10.1.2.3:9003",
		headers: map[string]string{"Content-Type": jsonType, "Origin": "http://evil.example"}}); got != 403 {
		t.Errorf("cross-origin reset with the token: %d, want 403", got)
	}
}
