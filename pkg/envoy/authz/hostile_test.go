package authz

import (
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// hostilePolicy: /orders allows one request a minute per caller and is
// host-restricted; /healthz is exempt; everything else has no route.
const hostilePolicy = `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  exempt:
    path_prefixes: [/healthz]
  routes:
    - name: orders
      hosts: [orders.shop, "*.example.com"]
      path_prefix: /orders
      rate_limits: [{requests_per_unit: 1, unit: minute, name: orders}]
    - name: health
      path_prefix: /healthz
      rate_limits: [{requests_per_unit: 1, unit: minute, name: health}]
`

// TestAuthzPathAndHostTricks sends each request target twice for a fresh
// tenant: a target that reaches the orders route (or a non-exempt health
// route) is limited (the second call denied); an exempt or unrouted one is
// admitted twice. The decision counters must agree.
func TestAuthzPathAndHostTricks(t *testing.T) {
	e := startIdem(t, hostilePolicy)
	tests := []struct {
		host, path string
		limited    bool
	}{
		{"orders.shop", "/orders", true},
		{"orders.shop", "//orders", true},
		{"orders.shop", "/orders/../payments", false}, // lands on /payments: no route
		{"orders.shop", "/payments/../orders", true},
		{"orders.shop", "/%2Forders", true},
		{"orders.shop", "/%2forders/1", true},
		{"orders.shop", "/%6Frders", true}, // %6F is 'o'
		{"orders.shop", `/\orders`, true},
		{"orders.shop", "/./orders", true},
		{"orders.shop", "/ORDERS", true},
		{"orders.shop", "/Orders/1?x=1", true},
		{"orders.shop", "/orders#frag", true},
		{"orders.shop", "/healthz", false},                            // exempt
		{"orders.shop", "/healthz?x", false},                          // exempt: the query does not change where it lands
		{"orders.shop", "/healthz/../orders", true},                   // not exempt, and it is /orders
		{"orders.shop", "//healthz", true},                            // not canonical: not exempt (health route limits it)
		{"orders.shop", "/healthz/./", true},                          // not canonical: not exempt
		{"orders.shop", "/%68ealthz", true},                           // escaped: not exempt
		{"ORDERS.SHOP", "/orders", true},                              // hosts compare case-insensitively
		{"orders.shop.", "/orders", true},                             // one trailing dot ignored
		{"orders.shop:8080", "/orders", true},                         // port ignored when the pattern has none
		{"a.b.example.com", "/orders", true},                          // wildcard, several labels
		{"orders.shop.evil.com", "/orders", false},                    // suffix tricks: no route
		{"evilorders.shop", "/orders", false},                         // not a subdomain
		{"example.com", "/orders", false},                             // the wildcard needs a label
		{"orders.shop@evil.com", "/orders", false},                    // userinfo is not a host
		{"", "/orders", false},                                        // no host: only routes without hosts
		{"orders.shop", "orders", false},                              // not origin-form
		{"orders.shop", "*", false},                                   // asterisk-form
		{"orders.shop", "/orders" + strings.Repeat("/x", 5000), true}, // 10 KB path
	}
	for i, tc := range tests {
		tenant := "t" + strconv.Itoa(i)
		var admitted int
		for range 2 {
			req := checkReq("GET", tc.path, nil, "x-tenant-id", tenant)
			req.Attributes.Request.Http.Host = tc.host
			if e.check(t, req).GetOkResponse() != nil {
				admitted++
			}
		}
		if want := map[bool]int{true: 1, false: 2}[tc.limited]; admitted != want {
			t.Errorf("%s %q: admitted %d of 2, want %d", tc.host, tc.path, admitted, want)
		}
	}
	limited := 0
	for _, tc := range tests {
		if tc.limited {
			limited++
		}
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", map[string]string{"api": envoy.APIExtAuthz, "outcome": envoy.OutcomeOverLimit}); got != float64(limited) {
		t.Errorf("over_limit decisions = %v, want %d", got, limited)
	}
}

// TestAuthzHeaderTricks: header-name case, repeated headers, NUL bytes and
// oversized values in the tenant header each name their own caller, limited
// like any other (one request a minute on /orders).
func TestAuthzHeaderTricks(t *testing.T) {
	e := startIdem(t, hostilePolicy)
	viaMap := func(kv ...string) *authv3.CheckRequest {
		r := checkReq("GET", "/orders", nil, kv...)
		r.Attributes.Request.Http.Host = "orders.shop"
		return r
	}
	viaHeaderMap := func(kv ...string) *authv3.CheckRequest {
		r := viaMap()
		hm := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		r.Attributes.Request.Http.HeaderMap = hm
		return r
	}
	cases := map[string]*authv3.CheckRequest{
		"upper-case name":       viaMap("X-Tenant-Id", "case"),
		"repeated (header_map)": viaHeaderMap("x-tenant-id", "a", "x-tenant-id", "b"),
		"joined (map)":          viaMap("x-tenant-id", "a,c"),
		"NUL":                   viaMap("x-tenant-id", "a\x00b"),
		"raw non-UTF-8":         viaHeaderMap("x-tenant-id", "\xff\xfe"),
		"10 KB":                 viaMap("x-tenant-id", strings.Repeat("t", 10<<10)),
		"separators":            viaMap("x-tenant-id", "{a}|b:c%d=#"),
		"tag forgery":           viaMap("x-tenant-id", "~a~127.0.0.1"),
	}
	for round := 1; round <= 2; round++ {
		for name, req := range cases {
			if admitted := e.check(t, req).GetOkResponse() != nil; admitted != (round == 1) {
				t.Errorf("%s, round %d: admitted=%v", name, round, admitted)
			}
		}
	}
	// Repeated lines and the joined form are one caller, as Envoy joins them.
	if e.check(t, viaMap("x-tenant-id", "a,b")).GetOkResponse() != nil {
		t.Error(`"a,b" in the map: admitted, want the budget of the repeated header`)
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", map[string]string{"api": envoy.APIExtAuthz, "outcome": envoy.OutcomeOverLimit}); got != float64(len(cases)+1) {
		t.Errorf("over_limit decisions = %v, want %d", got, len(cases)+1)
	}
}

// TestExtProcHostileKeysAndTenants: malformed Idempotency-Keys are 400
// and counted as malformed; hostile tenants (raw header_map bytes) each get
// their own execution and their own replay.
func TestExtProcHostileKeysAndTenants(t *testing.T) {
	e := startIdem(t, idemPolicy)
	badKeys := map[string][]string{
		"10 KB key":   {"idempotency-key", `"` + strings.Repeat("k", 10<<10) + `"`},
		"NUL in key":  {"idempotency-key", "\"a\x00b\""},
		"non-ASCII":   {"idempotency-key", "\"\xff\""},
		"repeated":    {"idempotency-key", `"a"`, "idempotency-key", `"b"`},
		"Upper-case":  {"Idempotency-Key", `"a"`, "IDEMPOTENCY-KEY", `"b"`},
		"empty":       {"idempotency-key", `""`},
		"unquoted ws": {"idempotency-key", "a b"},
	}
	for name, kv := range badKeys {
		_, ir := e.postA(t, "/orders/1", "acme", "", []byte("{}"), kv...)
		if ir == nil || ir.GetStatus().GetCode() != 400 {
			t.Errorf("%s: answered %v, want 400", name, ir)
		}
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_idempotency_events_total", map[string]string{"api": envoy.APIExtProc, "event": "malformed"}); got != float64(len(badKeys)) {
		t.Errorf("malformed events = %v, want %d", got, len(badKeys))
	}
	tenants := []string{"\xff", "\uFDD0FF", strings.Repeat("t", 10<<10), "a\x00b", "a|b", "a%7Cb", "{x}", "~p~spiffe://x", "acme,other"}
	for i, tenant := range tenants {
		s, ir := e.postA(t, "/orders/1", tenant, `"same"`, []byte("{}"))
		if ir != nil {
			t.Fatalf("tenant %q: answered %d, want its own execution", tenant, ir.GetStatus().GetCode())
		}
		s.upstream(201, []byte{byte('a' + i)}, viaUpstream, 0)
	}
	for i, tenant := range tenants {
		_, ir := e.postA(t, "/orders/1", tenant, `"same"`, []byte("{}"))
		wantReplayIR(t, ir, 201, []byte{byte('a' + i)})
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_idempotency_events_total", map[string]string{"api": envoy.APIExtProc, "event": "replayed"}); got != float64(len(tenants)) {
		t.Errorf("replayed events = %v, want %d", got, len(tenants))
	}
}
