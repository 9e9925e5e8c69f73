package admin

import (
	"fmt"
	"strings"
	"testing"
)

// secret stands for a credential a caller sends in a call's parameters.
const secret = "SECRET-7f3a9c"

// TestAuditNeverHoldsWhatTheCallerSent: a credential in a malformed
// descriptor, an unknown JSON field, a route name, a force value or an
// odd method reaches no field of the audit record (the log line), on every
// endpoint; the record still names what was wrong. The caller's own
// answer may quote it back.
func TestAuditNeverHoldsWhatTheCallerSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	for _, c := range []struct {
		method, target, body string
		status               int
		want                 string // in the audit's Detail
	}{
		{"GET", stateQuery("api_key=" + secret + ",broken"), "", 400, "descriptor"},
		{"GET", "/v1/ratelimit/state?domain=edge&descriptor=api_key%3D" + secret + "%zz", "", 400, "query"},
		{"POST", "/v1/ratelimit/reset?domain=edge&descriptor=api_key%3D" + secret + "%2Cbroken", "", 400, "descriptor"},
		{"POST", "/v1/explain", `{"ratelimit": {"domain": "edge", "descriptors": [[{"key": "api_key", "value": "x"}]]}, "` + secret + `": 1}`, 400, "body"},
		{"POST", "/v1/explain", `{"http": {"method": "GET", "path": "/orders", "` + secret + `": 1}}`, 400, "body"},
		{"GET", "/v1/idempotency/record?identity=acme&route=" + secret + "&key=k", "", 404, "route"},
		{"DELETE", "/v1/idempotency/record?identity=acme&route=orders&key=k&force=" + secret, "", 400, "force"},
		{secret, stateQuery("route=free"), "", 405, "Method not allowed"},
		{"GET", "/v1/" + secret, "", 404, "No such endpoint"},
		// Well-formed: the API key is hashed in the keys, as in the stores.
		{"GET", stateQuery("api_key=" + secret + ",route=orders"), "", 200, ""},
	} {
		got := e.send(t, call{name: c.method + " " + c.target, method: c.method, target: c.target, body: c.body,
			headers: map[string]string{"Content-Type": jsonType}})
		if got != c.status {
			t.Errorf("%s %s = %d, want %d", c.method, c.target, got, c.status)
			continue
		}
		a := e.audit[len(e.audit)-1]
		if logged := fmt.Sprintf("%+v", a); strings.Contains(logged, secret) || strings.Contains(logged, secret[:10]) {
			t.Errorf("%s %s: the audit record holds the caller's value: %s", c.method, c.target, logged)
		}
		if !strings.Contains(a.Detail, c.want) {
			t.Errorf("%s %s: audit detail %q does not name %q", c.method, c.target, a.Detail, c.want)
		}
	}
}
