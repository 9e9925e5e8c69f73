package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

const httpConfig = `
http:
  tenant: {header: X-Tenant-ID, principal: true, context_extension: tenant, default: public}
  exempt:
    path_prefixes: [/healthz, /readyz]
    headers: {X-Internal-Caller: "true"}
    principals: [spiffe://cluster.local/ns/ops/sa/prober]
  routes:
    - name: orders
      path_prefix: /orders
      methods: [post, GET]
      rate_limits: [{requests_per_unit: 10, unit: minute, algorithm: gcra, name: orders}]
      idempotency:
        key_required: true
        lease_ttl: 10s
        store_statuses: ["2xx", "409"]
        replay_headers: [Content-Type, location]
        fingerprint_headers: [Content-Type]
        failure_mode: closed
    - name: items
      path_regex: ^/items/[0-9]+$
      idempotency: {}
    - name: rest
      path_prefix: /
`

func TestHTTPSection(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "http.yaml", httpConfig).HTTP
	if h == nil {
		t.Fatal("no http section")
	}
	wantTenant := TenantSource{Header: "x-tenant-id", Principal: true, ContextExtension: "tenant", Default: "public"}
	if h.Tenant != wantTenant {
		t.Errorf("tenant %+v, want %+v", h.Tenant, wantTenant)
	}
	if h.Exempt.Headers["x-internal-caller"] != "true" {
		t.Errorf("exempt headers %v, want the name lower-cased", h.Exempt.Headers)
	}
	orders := h.Routes[0]
	if !slices.Equal(orders.Methods, []string{"POST", "GET"}) {
		t.Errorf("methods %v, want upper-cased", orders.Methods)
	}
	wantLimit := ratelimit.Limit{Name: "orders", Algorithm: ratelimit.GCRA, Requests: 10, Period: time.Minute}
	if len(orders.Limits) != 1 || orders.Limits[0] != wantLimit {
		t.Errorf("limits %+v, want [%+v]", orders.Limits, wantLimit)
	}
	id := orders.Idempotency
	if !id.KeyRequired || id.LeaseTTL != 10*time.Second || id.RecordTTL != DefaultRecordTTL || !id.FailClosed ||
		id.MaxBodyBytes != DefaultMaxBodyBytes || !slices.Equal(id.FingerprintHeaders, []string{"content-type"}) ||
		!slices.Equal(id.ReplayHeaders, []string{"content-type", "location"}) {
		t.Errorf("idempotency %+v", id)
	}
}

func TestIdempotencyDefaults(t *testing.T) {
	t.Parallel()
	id := mustLoad(t, "http.yaml", httpConfig).HTTP.Routes[1].Idempotency
	want := Idempotency{
		Methods: []string{"POST", "PATCH"}, LeaseTTL: 30 * time.Second, RecordTTL: 24 * time.Hour,
		StoreStatuses: []string{"2xx"}, MaxBodyBytes: 1 << 20, ReplayHeaders: DefaultReplayHeaders(),
	}
	if !slices.Equal(id.Methods, want.Methods) || id.LeaseTTL != want.LeaseTTL || id.RecordTTL != want.RecordTTL ||
		!slices.Equal(id.StoreStatuses, want.StoreStatuses) || id.MaxBodyBytes != want.MaxBodyBytes ||
		!slices.Equal(id.ReplayHeaders, want.ReplayHeaders) || id.KeyRequired || id.FailClosed {
		t.Errorf("defaults %+v, want %+v", *id, want)
	}
	for _, h := range DefaultReplayHeaders() {
		if idempotency.NeverReplayed(h) {
			t.Errorf("default replay header %q is on the never-replayed list", h)
		}
	}
}

func TestRouteMatching(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "http.yaml", httpConfig).HTTP
	tests := []struct {
		method, path, want string // want "" = no route
	}{
		{"POST", "/orders", "orders"},
		{"get", "/orders/7?expand=items", "orders"},
		{"DELETE", "/orders/7", "rest"},
		{"PUT", "/items/42", "items"},
		{"PUT", "/items/42?x=1", "items"},
		{"PUT", "/items/abc", "rest"},
		{"GET", "/", "rest"},
		{"GET", "relative", ""},
	}
	for _, tt := range tests {
		got := ""
		if r := h.Route("any.example.com", tt.method, tt.path); r != nil {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("Route(%s %s) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
	if !h.Routes[0].Matches("", "POST", "/orders/1") || h.Routes[0].Matches("", "PATCH", "/orders/1") {
		t.Error("Route.Matches disagrees with the methods list")
	}
	var none *HTTP
	if none.Route("", "GET", "/") != nil || none.IsExempt("/healthz", nil, "") {
		t.Error("nil HTTP matched")
	}
}

func TestExempt(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "http.yaml", httpConfig).HTTP
	tests := []struct {
		name      string
		path      string
		headers   map[string]string
		principal string
		want      bool
	}{
		{"health check", "/healthz", nil, "", true},
		{"health check with query", "/readyz?full=1", nil, "", true},
		{"internal caller", "/orders", map[string]string{"x-internal-caller": "true"}, "", true},
		{"header with another value", "/orders", map[string]string{"x-internal-caller": "false"}, "", false},
		{"exempt principal", "/orders", nil, "spiffe://cluster.local/ns/ops/sa/prober", true},
		{"ordinary request", "/orders", map[string]string{"x-tenant-id": "acme"}, "spiffe://cluster.local/ns/app/sa/web", false},
	}
	for _, tt := range tests {
		if got := h.IsExempt(tt.path, tt.headers, tt.principal); got != tt.want {
			t.Errorf("%s: IsExempt = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIdempotencyMethods(t *testing.T) {
	t.Parallel()
	id := mustLoad(t, "http.yaml", httpConfig).HTTP.Routes[0].Idempotency
	for code, want := range map[int]bool{200: true, 201: true, 299: true, 409: true, 404: false, 500: false, 199: false, 300: false, -1: false, 1000: false} {
		if got := id.StoresStatus(code); got != want {
			t.Errorf("StoresStatus(%d) = %v, want %v", code, got, want)
		}
	}
	if !id.AppliesTo("POST") || !id.AppliesTo("patch") || id.AppliesTo("GET") {
		t.Error("AppliesTo: want POST and PATCH only")
	}
	if !id.ReplayHeader("Content-Type") || !id.ReplayHeader("LOCATION") || id.ReplayHeader("etag") {
		t.Error("ReplayHeader: want content-type and location only, case-insensitively")
	}
	var none *Idempotency
	if none.AppliesTo("POST") || none.StoresStatus(200) || none.ReplayHeader("content-type") {
		t.Error("nil Idempotency applied")
	}
}

func TestHTTPValidationErrors(t *testing.T) {
	t.Parallel()
	route := func(extra string) string {
		return "http:\n  routes:\n    - name: r\n      path_prefix: /r\n" + extra
	}
	idem := func(extra string) string { return route("      idempotency:\n        " + extra + "\n") }
	tests := []struct {
		name, yaml, field, msg string
	}{
		{"unknown http field", "http: {rotes: []}", "http.rotes", "unknown field"},
		{"unknown tenant field", "http: {tenant: {heder: x}}", "http.tenant.heder", "unknown field"},
		{"bad tenant header", "http: {tenant: {header: 'x tenant'}}", "http.tenant.header", "not a valid header name"},
		{"exempt prefix without slash", "http: {exempt: {path_prefixes: [healthz]}}", "http.exempt.path_prefixes[0]", "must start with /"},
		{"bad exempt header", "http: {exempt: {headers: {'a b': c}}}", "http.exempt.headers.a b", "not a valid header name"},
		{"route without name", "http: {routes: [{path_prefix: /}]}", "http.routes[0].name", "is required"},
		{"route without path", "http: {routes: [{name: r}]}", "http.routes[0]", "exactly one of path_prefix and path_regex"},
		{"route with both paths", "http: {routes: [{name: r, path_prefix: /, path_regex: /}]}", "http.routes[0]", "exactly one of path_prefix and path_regex"},
		{"empty path prefix", "http: {routes: [{name: r, path_prefix: ''}]}", "http.routes[0].path_prefix", "must not be empty"},
		{"bad regex", "http: {routes: [{name: r, path_regex: '^/(a'}]}", "http.routes[0].path_regex", "bad regular expression"},
		{"duplicate route", "http: {routes: [{name: r, path_prefix: /a}, {name: r, path_prefix: /b}]}", "http.routes[1].name", `route "r" is already defined at http.routes[0]`},
		{"bad method", route("      methods: ['GET POST']\n"), "http.routes[0].methods[0]", "not an HTTP method"},
		{"route limit unlimited", route("      rate_limits: [{unlimited: true}]\n"), "http.routes[0].rate_limits[0].unlimited", "only allowed in rate_limit"},
		{"route limit replaces", route("      rate_limits: [{unit: second, requests_per_unit: 1, replaces: [{name: x}]}]\n"), "http.routes[0].rate_limits[0].replaces", "only allowed in descriptors"},
		{"route limit charge_over_limit", route("      rate_limits: [{unit: second, requests_per_unit: 1, charge_over_limit: true}]\n"), "http.routes[0].rate_limits[0].charge_over_limit", "only allowed in descriptors"},
		{"route limit bad unit", route("      rate_limits: [{unit: sec, requests_per_unit: 1}]\n"), "http.routes[0].rate_limits[0].unit", "unknown unit"},
		{"unknown idempotency field", idem("key_requried: true"), "http.routes[0].idempotency.key_requried", "unknown field"}, //nolint:misspell // the typo is the test
		{"bad lease_ttl", idem("lease_ttl: soon"), "http.routes[0].idempotency.lease_ttl", "positive duration"},
		{"negative record_ttl", idem("record_ttl: -1h"), "http.routes[0].idempotency.record_ttl", "positive duration"},
		{"bad store status", idem("store_statuses: [2xy]"), "http.routes[0].idempotency.store_statuses[0]", "status code (100-599) or a class"},
		{"store status out of range", idem("store_statuses: [600]"), "http.routes[0].idempotency.store_statuses[0]", "status code (100-599) or a class"},
		{"empty store statuses", idem("store_statuses: []"), "http.routes[0].idempotency.store_statuses", "at least one"},
		{"zero max_body_bytes", idem("max_body_bytes: 0"), "http.routes[0].idempotency.max_body_bytes", "at least 1"},
		{"bad failure_mode", idem("failure_mode: maybe"), "http.routes[0].idempotency.failure_mode", "want open or closed"},
		{"no idempotency methods", idem("methods: []"), "http.routes[0].idempotency.methods", "at least one method"},
		{"bad fingerprint header", idem("fingerprint_headers: ['content type']"), "http.routes[0].idempotency.fingerprint_headers[0]", "not a valid header name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, _ := loadErr(t, "http.yaml", tt.yaml)
			if !strings.Contains(msg, "http.yaml:") || !strings.Contains(msg, tt.field+": ") || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q\nwant file http.yaml, field %q and %q", msg, tt.field, tt.msg)
			}
		})
	}
}

// TestReplayHeadersRejected checks every class of header that must never be
// replayed from a stored response.
func TestReplayHeadersRejected(t *testing.T) {
	t.Parallel()
	for _, h := range []string{
		"Set-Cookie", "Authorization", "Proxy-Authorization", "Proxy-Authenticate",
		"Connection", "Keep-Alive", "Transfer-Encoding", "TE", "Trailer", "Upgrade",
		"Date", "Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining",
		// Names the stores never replay, which an older, separate list here
		// let through: a policy accepted them and replays dropped them.
		"Cookie", "X-Request-Id", "Content-Length", "Server", "Traceparent",
		"X-Envoy-Upstream-Service-Time", "WWW-Authenticate", "Idempotency-Key", "Via",
	} {
		t.Run(h, func(t *testing.T) {
			t.Parallel()
			yaml := "http:\n  routes:\n    - name: r\n      path_prefix: /\n      idempotency:\n        replay_headers: [content-type, " + h + "]\n"
			msg, probs := loadErr(t, "http.yaml", yaml)
			field := "http.routes[0].idempotency.replay_headers[1]"
			if len(probs) != 1 || !strings.Contains(msg, "http.yaml:6: "+field+": "+strings.ToLower(h)+" must never be replayed") {
				t.Errorf("error %q, want one problem at %s", msg, field)
			}
		})
	}
}

// TestAcceptedReplayHeadersAreReplayed: every replay_headers name the loader
// accepts is one the stores keep, and every one it rejects they drop. There is
// one list (idempotency.NeverReplayed); a second one here would disagree.
func TestAcceptedReplayHeadersAreReplayed(t *testing.T) {
	t.Parallel()
	for _, h := range []string{
		"location", "etag", "x-custom", "cache-control", "vary", "set-cookie", "cookie", "x-request-id",
		"content-length", "server", "traceparent", "tracestate", "x-envoy-upstream-service-time",
		"www-authenticate", "ratelimit-reset", "x-b3-traceid", "age", "alt-svc", "date",
	} {
		yaml := "http:\n  routes:\n    - name: r\n      path_prefix: /\n      idempotency:\n        replay_headers: [" + h + "]\n"
		_, err := Load(writeFile(t, t.TempDir(), "http.yaml", yaml))
		kept := idempotency.ReplayHeaders([]idempotency.Header{{Name: h, Value: "v"}}, func(string) bool { return true })
		if accepted, replayed := err == nil, len(kept) == 1; accepted != replayed {
			t.Errorf("replay_headers [%s]: policy accepted=%v (%v) but stores replay=%v", h, accepted, err, replayed)
		}
	}
}
