package authz

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// keysPolicy limits failed logins per account (JSON and form logins) and
// per address, each to 2, so that a third attempt shows whose budget it
// was charged to.
const keysPolicy = `
http:
  routes:
    - name: json-login
      path_prefix: /json-login
      rate_limits:
        - name: per-account
          requests_per_unit: 2
          unit: hour
          charge: {on_status: [401], key: {json_field: username}}
    - name: form-login
      path_prefix: /form-login
      rate_limits:
        - name: per-account
          requests_per_unit: 2
          unit: hour
          charge: {on_status: [401], key: {form_field: username}}
    - name: addr-login
      path_prefix: /addr-login
      rate_limits:
        - name: per-address
          requests_per_unit: 2
          unit: hour
          charge: {on_status: [401], key: {client_address: {xff_trusted_hops: 0}}}
`

// problemUnreadable is the type of a request refused for an account it
// does not name readably (ProblemChargeKeyUnreadable).
const problemUnreadable = "https://github.com/extauthz/extauthz/blob/main/docs/policy.md#keys-of-charged-limits"

const (
	ctJSON = "application/json"
	ctForm = "application/x-www-form-urlencoded"
)

// wiring is how a login reaches extauthz: ext_authz then ext_proc (b), or
// ext_proc alone with the body buffered (a).
type wiring string

const (
	wiringAuthz wiring = "ext_authz+ext_proc"
	wiringProc  wiring = "ext_proc alone"
)

var wirings = []wiring{wiringAuthz, wiringProc}

// outcome is what extauthz answered a request: admitted, or refused with
// a status and problem type.
type outcome struct {
	admitted bool
	status   int
	problem  string
}

func (o outcome) String() string {
	if o.admitted {
		return "admitted"
	}
	return fmt.Sprintf("refused %d %s", o.status, o.problem)
}

// attempt sends one login through w from addr ("" for none: a Unix-socket
// peer, or ext_proc without source.address) and, when admitted, answers
// it with the upstream's status.
func (e *chargeEnv) attempt(t *testing.T, w wiring, addr, path, ctype string, body []byte, status int) outcome {
	t.Helper()
	if w == wiringAuthz {
		req := checkReq("POST", path, body, "content-type", ctype)
		if addr != "" {
			req = checkFrom(addr, "POST", path, body, "content-type", ctype)
		}
		resp := e.check(t, req)
		if resp.GetOkResponse() != nil {
			e.respond(t, chargeAdmitted(t, resp), status, nil)
			return outcome{admitted: true}
		}
		d := resp.GetDeniedResponse()
		return outcome{status: int(d.GetStatus().GetCode()), problem: problemTypeOf(d.GetBody())}
	}
	s := e.open(t)
	h := reqHeaders(filterv3.ProcessingMode_BUFFERED, false, nil, ":method", "POST", ":path", path, "content-type", ctype)
	if addr != "" {
		h.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
			"source.address": structpb.NewStringValue(net.JoinHostPort(addr, "5000"))}}}
	}
	r := s.send(h) // a route without a body key is checked on the headers
	if r.GetImmediateResponse() == nil {
		r = s.send(reqBody(body))
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		s.close()
		return outcome{status: int(ir.GetStatus().GetCode()), problem: problemTypeOf(ir.GetBody())}
	}
	s.upstream(status, nil, viaUpstream, 0)
	return outcome{admitted: true}
}

func problemTypeOf[B string | []byte](body B) string {
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(body), &p)
	return p.Type
}

// spendCarol spends carol's budget on route (2 failed logins, written
// plainly, from two addresses).
func (e *chargeEnv) spendCarol(t *testing.T, w wiring, route string) {
	t.Helper()
	ctype, body := ctJSON, []byte(`{"username":"carol","password":"x"}`)
	if route == "/form-login" {
		ctype, body = ctForm, []byte("username=carol&password=x")
	}
	for _, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		if o := e.attempt(t, w, addr, route, ctype, body, 401); !o.admitted {
			t.Fatalf("carol's failure from %s %v before her budget of 2 was spent", addr, o)
		}
	}
}

// TestChargeAccountVariantsShareOneBudget: once carol's two failures are
// spent, no way of writing her account in a request opens a fresh budget,
// through either wiring: each is refused as over her limit, or refused as
// unreadable (a body whose account cannot be read is never unlimited).
func TestChargeAccountVariantsShareOneBudget(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", maxChargeKeyBody)
	tests := []struct {
		name, route, ctype, body string
		want                     outcome
	}{
		{"Carol", "/json-login", ctJSON, `{"username":"Carol","password":"x"}`, overLimit},
		{"carol with a trailing space", "/json-login", ctJSON, `{"username":"carol ","password":"x"}`, overLimit},
		{"fullwidth carol", "/json-login", ctJSON, `{"username":"ｃａｒｏｌ","password":"x"}`, overLimit},
		{"Username field (bound case-insensitively)", "/json-login", ctJSON, `{"Username":"carol","password":"x"}`, overLimit},
		{"duplicate JSON key, carol first", "/json-login", ctJSON, `{"username":"carol","username":"mallory","password":"x"}`, overLimit},
		{"duplicate JSON key, carol last", "/json-login", ctJSON, `{"username":"mallory","username":"carol","password":"x"}`, overLimit},
		{"form body on the JSON route", "/json-login", ctForm, "username=carol&password=x", overLimit},
		{"JSON body over the 64 KiB bound", "/json-login", ctJSON, `{"username":"carol","pad":"` + pad + `"}`, unreadable},
		{"JSON body without the field", "/json-login", ctJSON, `{"password":"x"}`, unreadable},
		{"JSON body that does not parse", "/json-login", ctJSON, `{"username":"carol",`, unreadable},
		{"duplicate form field, carol first", "/form-login", ctForm, "username=carol&username=mallory&password=x", overLimit},
		{"duplicate form field, carol last", "/form-login", ctForm, "username=mallory&username=carol&password=x", overLimit},
		{"malformed pair before", "/form-login", ctForm, "x=%zz&username=carol&password=x", overLimit},
		{"malformed pair after", "/form-login", ctForm, "username=carol&password=x&x=%zz", overLimit},
		{"semicolon pair", "/form-login", ctForm, "a=1;b=2&username=carol&password=x", overLimit},
		{"CAROL in a form", "/form-login", ctForm, "username=CAROL&password=x", overLimit},
		{"JSON body on the form route", "/form-login", ctJSON, `{"username":"carol","password":"x"}`, overLimit},
		{"multipart body on the JSON route", "/json-login", "multipart/form-data; boundary=B",
			"--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nCarol\r\n--B\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nx\r\n--B--\r\n", overLimit},
		{"multipart body that does not parse", "/form-login", "multipart/form-data; boundary=B", "--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\ncarol", unreadable},
	}
	for _, w := range wirings {
		for _, tt := range tests {
			t.Run(string(w)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				e := startCharge(t, keysPolicy)
				e.spendCarol(t, w, tt.route)
				if got := e.attempt(t, w, "203.0.113.9", tt.route, tt.ctype, []byte(tt.body), 401); got != tt.want {
					t.Errorf("%s: %v, want %v: a fresh budget for carol", tt.name, got, tt.want)
				}
			})
		}
	}
}

var (
	overLimit  = outcome{status: 429, problem: ProblemQuotaExceeded}
	unreadable = outcome{status: 400, problem: problemUnreadable}
)

// TestChargeMalformedFormPairStillLimits: failed logins whose form carries
// a malformed pair (`&x=%zz`) are limited like any other: 2 admitted of 6.
func TestChargeMalformedFormPairStillLimits(t *testing.T) {
	t.Parallel()
	for _, w := range wirings {
		e := startCharge(t, keysPolicy)
		admitted := 0
		for range 6 {
			if e.attempt(t, w, "192.0.2.1", "/form-login", ctForm, []byte("username=carol&password=wrong&x=%zz"), 401).admitted {
				admitted++
			}
		}
		if admitted != 2 {
			t.Errorf("%s: %d of 6 failed logins admitted, want 2 (the limit)", w, admitted)
		}
	}
}

// TestChargeIPv6PrefixSharesBudget: the addresses of one /64 are one
// client; another /64 is another; an IPv4-mapped address is its IPv4.
func TestChargeIPv6PrefixSharesBudget(t *testing.T) {
	t.Parallel()
	for _, w := range wirings {
		e := startCharge(t, keysPolicy)
		for _, addr := range []string{"2001:db8:1:2::1", "2001:db8:1:2:aaaa::2"} {
			if o := e.attempt(t, w, addr, "/addr-login", ctJSON, nil, 401); !o.admitted {
				t.Fatalf("%s: failure from %s %v", w, addr, o)
			}
		}
		if got := e.attempt(t, w, "2001:db8:1:2:ffff:ffff:ffff:ffff", "/addr-login", ctJSON, nil, 401); got != overLimit {
			t.Errorf("%s: a third address of the /64 %v, want %v", w, got, overLimit)
		}
		if got := e.attempt(t, w, "2001:db8:1:3::1", "/addr-login", ctJSON, nil, 401); !got.admitted {
			t.Errorf("%s: another /64 %v, want admitted", w, got)
		}
		for _, addr := range []string{"198.51.100.7", "::ffff:198.51.100.7"} {
			e.attempt(t, w, addr, "/addr-login", ctJSON, nil, 401)
		}
		if got := e.attempt(t, w, "198.51.100.7", "/addr-login", ctJSON, nil, 401); got != overLimit {
			t.Errorf("%s: an IPv4 address after its IPv4-mapped form %v, want %v", w, got, overLimit)
		}
	}
}

// TestChargeUnreadableAddressIsLimited: a request without a client IP
// address (ext_proc without source.address, a Unix-socket peer) is not
// unlimited: such requests share one key.
func TestChargeUnreadableAddressIsLimited(t *testing.T) {
	t.Parallel()
	for _, w := range wirings {
		e := startCharge(t, keysPolicy)
		for i := range 2 {
			if o := e.attempt(t, w, "", "/addr-login", ctJSON, nil, 401); !o.admitted {
				t.Fatalf("%s: failure %d %v", w, i+1, o)
			}
		}
		if got := e.attempt(t, w, "", "/addr-login", ctJSON, nil, 401); got != overLimit {
			t.Errorf("%s: a third failure without an address %v, want %v", w, got, overLimit)
		}
		if got := e.attempt(t, w, "192.0.2.1", "/addr-login", ctJSON, nil, 401); !got.admitted {
			t.Errorf("%s: an address %v, want admitted (its own key)", w, got)
		}
	}
}
