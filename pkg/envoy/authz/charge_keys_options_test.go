package authz

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// keyOptionsPolicy sets each key option away from its default; each
// limit allows 2 failed logins.
const keyOptionsPolicy = `
http:
  routes:
    - name: first
      path_prefix: /first
      rate_limits:
        - {name: acct, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {form_field: username, duplicates: first}}}
    - name: last
      path_prefix: /last
      rate_limits:
        - {name: acct, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {json_field: username, duplicates: last}}}
    - name: exact
      path_prefix: /exact
      rate_limits:
        - {name: acct, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {json_field: username, field_names: exact, normalize: []}}}
    - name: fallback
      path_prefix: /fallback
      rate_limits:
        - {name: acct, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {json_field: username, unreadable: {client_address: {}}}}}
    - name: shared
      path_prefix: /shared
      rate_limits:
        - {name: acct, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {json_field: username, unreadable: shared}}}
    - name: refuse429
      path_prefix: /refuse429
      rate_limits:
        - {name: acct, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {header: x-user, unreadable: {refuse: 429}}}}
    - name: strict-address
      path_prefix: /strict-address
      rate_limits:
        - {name: addr, requests_per_unit: 2, unit: hour, charge: {on_status: [401], key: {client_address: {ipv6_prefix: 128}, unreadable: refuse}}}
`

// fails sends n failed logins from distinct addresses; it reports how many
// were admitted.
func (e *chargeEnv) fails(t *testing.T, w wiring, n int, path, ctype, body string) int {
	t.Helper()
	admitted := 0
	for i := range n {
		if e.attempt(t, w, "192.0.2."+itoa(i+10), path, ctype, []byte(body), 401).admitted {
			admitted++
		}
	}
	return admitted
}

// TestChargeKeyOptions: each option of a key does what docs/policy.md
// says, through both wirings.
func TestChargeKeyOptions(t *testing.T) {
	t.Parallel()
	for _, w := range wirings {
		t.Run(string(w), func(t *testing.T) {
			t.Parallel()
			e := startCharge(t, keyOptionsPolicy)
			// first: the first value is the account; the second is not read.
			e.fails(t, w, 2, "/first", ctForm, "username=carol&username=mallory")
			if got := e.attempt(t, w, "203.0.113.1", "/first", ctForm, []byte("username=carol&username=bob"), 401); got != overLimit {
				t.Errorf("first: carol first again %v, want %v", got, overLimit)
			}
			if got := e.attempt(t, w, "203.0.113.1", "/first", ctForm, []byte("username=mallory"), 401); !got.admitted {
				t.Errorf("first: mallory (only ever second) %v, want admitted", got)
			}
			// last: the last value is the account.
			e.fails(t, w, 2, "/last", ctJSON, `{"username":"mallory","username":"carol"}`)
			if got := e.attempt(t, w, "203.0.113.1", "/last", ctJSON, []byte(`{"username":"carol"}`), 401); got != overLimit {
				t.Errorf("last: carol %v, want %v", got, overLimit)
			}
			// exact, no normalisation: Username is another field, Carol another account.
			e.fails(t, w, 2, "/exact", ctJSON, `{"username":"carol"}`)
			if got := e.attempt(t, w, "203.0.113.1", "/exact", ctJSON, []byte(`{"username":"Carol"}`), 401); !got.admitted {
				t.Errorf("exact: Carol %v, want admitted (not normalised)", got)
			}
			if got := e.attempt(t, w, "203.0.113.1", "/exact", ctJSON, []byte(`{"Username":"carol"}`), 401); got != unreadable {
				t.Errorf("exact: Username %v, want %v (no username field)", got, unreadable)
			}
			// fallback: an unreadable body is charged to its address.
			if n := e.fails(t, w, 1, "/fallback", ctJSON, `{"password":"x"}`); n != 1 {
				t.Fatal("fallback: refused")
			}
			e.attempt(t, w, "192.0.2.10", "/fallback", ctJSON, []byte(`not json`), 401)
			if got := e.attempt(t, w, "192.0.2.10", "/fallback", ctJSON, nil, 401); got != overLimit {
				t.Errorf("fallback: a third unreadable body from one address %v, want %v", got, overLimit)
			}
			if got := e.attempt(t, w, "192.0.2.11", "/fallback", ctJSON, nil, 401); !got.admitted {
				t.Errorf("fallback: another address %v, want admitted", got)
			}
			// shared: every unreadable body spends one key.
			if n := e.fails(t, w, 3, "/shared", ctJSON, `{}`); n != 2 {
				t.Errorf("shared: %d of 3 unreadable bodies admitted, want 2", n)
			}
			// refuse 429; a header key is normalised too.
			if got := e.attempt(t, w, "192.0.2.1", "/refuse429", ctJSON, nil, 401); got != (outcome{status: 429, problem: problemUnreadable}) {
				t.Errorf("refuse 429: %v", got)
			}
			// refuse an unknown address; /128: each IPv6 address its own key.
			if got := e.attempt(t, w, "", "/strict-address", ctJSON, nil, 401); got != unreadable {
				t.Errorf("strict address without one: %v, want %v", got, unreadable)
			}
			e.fails(t, w, 0, "", "", "")
			for _, a := range []string{"2001:db8::1", "2001:db8::1"} {
				e.attempt(t, w, a, "/strict-address", ctJSON, nil, 401)
			}
			if got := e.attempt(t, w, "2001:db8::2", "/strict-address", ctJSON, nil, 401); !got.admitted {
				t.Errorf("/128: a neighbour %v, want admitted", got)
			}
		})
	}
}

// TestChargeHeaderKeyNormalized: a header account is normalised like a
// body's: X-User: " Carol " is carol.
func TestChargeHeaderKeyNormalized(t *testing.T) {
	t.Parallel()
	e := startCharge(t, keyOptionsPolicy)
	for _, user := range []string{"carol", "CAROL"} {
		md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/refuse429", nil, "x-user", user)))
		e.respond(t, md, 401, nil)
	}
	wantDenied(t, e.check(t, checkFrom("192.0.2.1", "POST", "/refuse429", nil, "x-user", " Carol ")), 429, ProblemQuotaExceeded)
}

// TestChargeAccountKeyIsHMAC: an account is keyed by an HMAC under the
// configured secret, never its plain SHA-256 (a dictionary of e-mail
// addresses reverses that): two servers with one secret agree, another
// secret gives another key.
func TestChargeAccountKeyIsHMAC(t *testing.T) {
	t.Parallel()
	keyOf := func(secret string) string {
		clock := testclock.New(envoytest.T0)
		e := startChargeOn(t, chargePolicy, clock, envoytest.NewTestStore(t, clock.Now), lockoutmem.New(lockoutmem.Config{Now: clock.Now}),
			WithChargeKeySecret([]byte(secret), nil))
		md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/login", []byte(`{"username":"alice@example.com"}`))))
		limits := md.GetFilterMetadata()["envoy.filters.http.ext_authz"].GetFields()[MetadataCharge].GetStructValue().GetFields()[mdChargeLimits].GetListValue().GetValues()
		return limits[1].GetStructValue().GetFields()[mdChargeKey].GetStringValue()
	}
	a, b, other := keyOf("0123456789abcdef0123456789abcdef"), keyOf("0123456789abcdef0123456789abcdef"), keyOf("another secret, 32 bytes or more!")
	sum := sha256.Sum256([]byte("alice@example.com"))
	for _, k := range []string{a, other} {
		if strings.Contains(k, hex.EncodeToString(sum[:])) {
			t.Errorf("key %q holds the account's plain SHA-256", k)
		}
	}
	if a != b || a == other || a == "" {
		t.Errorf("one secret gave %q and %q; another %q: want equal, then different", a, b, other)
	}
}

// TestChargeUnreadableKeyCountedAndLoggedOnce: each unreadable key is
// counted by reason; the first of each route, limit and reason is logged.
func TestChargeUnreadableKeyCountedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	clock := testclock.New(envoytest.T0)
	e := startChargeOn(t, keysPolicy, clock, envoytest.NewTestStore(t, clock.Now), lockoutmem.New(lockoutmem.Config{Now: clock.Now}),
		WithChargeKeySecret(nil, slog.New(slog.NewTextHandler(&logs, nil))))
	for _, w := range wirings {
		e.attempt(t, w, "", "/addr-login", ctJSON, nil, 200)
		e.attempt(t, w, "192.0.2.1", "/json-login", ctJSON, []byte(`{"username":"carol"`), 200)
		e.attempt(t, w, "192.0.2.1", "/json-login", ctJSON, []byte(`{"username":"`+strings.Repeat("x", maxChargeKeyBody)+`"}`), 200)
		e.attempt(t, w, "192.0.2.1", "/json-login", ctJSON, []byte(`{"username":"a","Username":"b","USERNAME":"c","UserName":"d","userName":"e"}`), 200)
		e.attempt(t, w, "192.0.2.1", "/form-login", ctForm, []byte(`password=x`), 200)
	}
	for _, c := range []struct{ route, limit, reason string }{
		{"addr-login", "per-address", KeyNoAddress}, {"json-login", "per-account", KeyUnparsable},
		{"json-login", "per-account", KeyTooLarge}, {"json-login", "per-account", KeyTooManyValues}, {"form-login", "per-account", KeyMissing},
	} {
		labels := map[string]string{"route": c.route, "limit": c.limit, "reason": c.reason}
		if got := e.counter(t, "extauthz_charge_keys_unreadable_total", labels); got != 2 {
			t.Errorf("%v counted %v, want 2 (one per wiring)", labels, got)
		}
		if n := strings.Count(logs.String(), "reason="+c.reason); n != 1 {
			t.Errorf("reason %s logged %d times, want once:\n%s", c.reason, n, logs.String())
		}
	}
}

// TestChargeAddressKeyShape: an IPv4 address keeps the key it had before
// IPv6 prefixes (its budget and lockout survive an upgrade); an IPv6
// address is keyed by its /64.
func TestChargeAddressKeyShape(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	for addr, want := range map[string]string{
		"192.0.2.1":            "~shared|http|route=login|limit=login-per-address|client_address=~a~192.0.2.1",
		"::ffff:192.0.2.1":     "~shared|http|route=login|limit=login-per-address|client_address=~a~192.0.2.1",
		"2001:db8:0:7:1:2:3:4": "~shared|http|route=login|limit=login-per-address|client_address=~a~2001%3Adb8%3A0%3A7%3A%3A/64", // ratelimit.Key escapes ":"
	} {
		md := chargeAdmitted(t, e.check(t, checkFrom(addr, "POST", "/login", []byte(`{"username":"a"}`))))
		limits := md.GetFilterMetadata()["envoy.filters.http.ext_authz"].GetFields()[MetadataCharge].GetStructValue().GetFields()[mdChargeLimits].GetListValue().GetValues()
		if got := limits[0].GetStructValue().GetFields()[mdChargeKey].GetStringValue(); got != want {
			t.Errorf("%s: key %q, want %q", addr, got, want)
		}
	}
}
