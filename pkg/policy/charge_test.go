package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// chargeConfig is the design's YAML of issue 31, as written.
const chargeConfig = `
http:
  routes:
    - name: login
      path_prefix: /login
      rate_limits:
        - name: login-per-address
          requests_per_unit: 5
          unit: minute
          algorithm: fixed_window
          charge:
            on_status: [401, 403]
            key: {client_address: {xff_trusted_hops: 0}}
            lockout: {initial: 1m, factor: 2, max: 1h}
        - name: login-per-account
          requests_per_unit: 20
          unit: hour
          charge:
            on_status: [4xx]
            key: {json_field: username}
        - {requests_per_unit: 100, unit: minute}
    - name: chat
      path_prefix: /v1/chat
      rate_limits:
        - name: tokens
          requests_per_unit: 1000
          unit: minute
          charge:
            cost: {json_field: usage.total_tokens, default: 0}
            reserve: {header: x-max-tokens, default: 0}
`

func TestChargedLimitsParse(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "charge.yaml", chargeConfig).HTTP
	login, chat := h.Routes[0], h.Routes[1]
	if len(login.Limits) != 1 || login.Limits[0].Requests != 100 {
		t.Errorf("counted limits %+v, want only the 100/minute one", login.Limits)
	}
	if len(login.Charged) != 2 || !login.HasCharged() {
		t.Fatalf("charged %+v, want 2", login.Charged)
	}
	addr := login.Charged[0]
	wantLimit := ratelimit.Limit{Name: "login-per-address", Algorithm: ratelimit.FixedWindow, Requests: 5, Period: time.Minute}
	if addr.Limit != wantLimit {
		t.Errorf("limit %+v, want %+v", addr.Limit, wantLimit)
	}
	if k := addr.Charge.Key; k.Kind != ChargeKeyClientAddress || k.TrustedHops != 0 || k.IPv6Prefix != DefaultIPv6Prefix {
		t.Errorf("key %+v, want client_address", addr.Charge.Key)
	}
	if l := addr.Charge.Lockout; l == nil || *l != (lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}) {
		t.Errorf("lockout %+v", l)
	}
	for status, want := range map[int]bool{401: true, 403: true, 400: false, 200: false} {
		if addr.Charge.Counts(status) != want {
			t.Errorf("Counts(%d) = %v, want %v", status, !want, want)
		}
	}
	acct := login.Charged[1].Charge
	if k := acct.Key; k.Kind != ChargeKeyJSONField || k.Name != "username" || !k.NeedsBody() || !acct.Counts(429) || acct.Lockout != nil {
		t.Errorf("account charge %+v", acct)
	}
	tok := chat.Charged[0].Charge
	if tok.Key.Kind != ChargeKeyCaller || tok.Cost == nil || *tok.Cost != (ValueSource{JSONField: "usage.total_tokens", HasDefault: true}) {
		t.Errorf("token charge %+v cost %+v", tok, tok.Cost)
	}
	if tok.Reserve == nil || *tok.Reserve != (ValueSource{Header: "x-max-tokens", HasDefault: true}) {
		t.Errorf("reserve %+v", tok.Reserve)
	}
	if chat.HasLimits() {
		t.Error("a route with only charged limits has no counted limits")
	}
}

func TestChargedLimitsInTiers(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "tiers.yaml", `
http:
  tiers:
    plans:
      attribute: {header: x-plan}
      default: free
      limits:
        free:
          - {name: tokens, requests_per_unit: 1000, unit: minute, charge: {cost: {header: x-usage-tokens, default: 0}}}
        pro:
          - {requests_per_unit: 50, unit: second}
          - {name: tokens, requests_per_unit: 100000, unit: minute, charge: {cost: {header: x-usage-tokens, default: 10}}}
  routes:
    - {name: chat, path_prefix: /, tier_limits: plans}
`).HTTP
	r := h.Routes[0]
	if !r.HasCharged() {
		t.Fatal("HasCharged false for a tiered route with charged limits")
	}
	ch, tier := r.ChargedFor("pro")
	if tier != "pro" || len(ch) != 1 || ch[0].Limit.Requests != 100000 || !ch[0].Charge.Cost.HasDefault {
		t.Errorf("pro: %q %+v", tier, ch)
	}
	if ls, _ := r.LimitsFor("pro"); len(ls) != 1 {
		t.Errorf("pro counted limits %+v, want 1", ls)
	}
	ch, tier = r.ChargedFor("unknown")
	if tier != "free" || len(ch) != 1 || ch[0].Limit.Requests != 1000 {
		t.Errorf("default tier: %q %+v", tier, ch)
	}
	if ls, _ := r.LimitsFor("free"); len(ls) != 0 {
		t.Errorf("free counted limits %+v, want none", ls)
	}
}

// TestChargeValidation has one case per rule: each names file, field and problem.
func TestChargeValidation(t *testing.T) {
	t.Parallel()
	const route = "http:\n  routes:\n    - name: r\n      path_prefix: /\n      rate_limits:\n        - "
	const lim = route + "{name: n, requests_per_unit: 5, unit: minute, charge: "
	tests := []struct{ name, yaml, field, msg string }{
		{"no name", route + "{requests_per_unit: 5, unit: minute, charge: {on_status: [401]}}", "rate_limits[0].name", "is required on a charged limit"},
		{"neither", lim + "{}}", "rate_limits[0].charge", "set one of on_status"},
		{"both", lim + "{on_status: [401], cost: {header: x-c}}}", "rate_limits[0].charge.cost", "not both"},
		{"bad status", lim + "{on_status: [99]}}", "rate_limits[0].charge.on_status[0]", "want a status code"},
		{"empty status", lim + "{on_status: []}}", "rate_limits[0].charge.on_status", "at least one"},
		{"reserve on outcome", lim + "{on_status: [401], reserve: {default: 3}}}", "rate_limits[0].charge.reserve", "cost limit only"},
		{"cost without source", lim + "{cost: {default: 3}}}", "rate_limits[0].charge.cost", "set one source"},
		{"cost without default", lim + "{cost: {json_field: usage.total_tokens}}}", "rate_limits[0].charge.cost.default", "is required"},
		{"header cost without default", lim + "{cost: {header: x-usage}}}", "rate_limits[0].charge.cost.default", "default: 0"},
		{"cost two sources", lim + "{cost: {header: a, trailer: b}}}", "rate_limits[0].charge.cost", "not 2"},
		{"negative default", lim + "{cost: {header: a, default: -1}}}", "rate_limits[0].charge.cost.default", "must not be negative"},
		{"reserve from body", lim + "{cost: {header: a}, reserve: {json_field: x}}}", "rate_limits[0].charge.reserve.json_field", "not a json_field"},
		{"empty reserve", lim + "{cost: {header: a}, reserve: {}}}", "rate_limits[0].charge.reserve", "a header, a default"},
		{"bad json path", lim + "{cost: {json_field: usage..tokens}}}", "rate_limits[0].charge.cost.json_field", "dot-separated path"},
		{"bad header", lim + "{cost: {header: 'a b'}}}", "rate_limits[0].charge.cost.header", "not a valid header name"},
		{"unknown key source", lim + "{on_status: [401], key: {cookie: x}}}", "rate_limits[0].charge.key.cookie", "unknown key source"},
		{"two key sources", lim + "{on_status: [401], key: {header: a, form_field: b}}}", "rate_limits[0].charge.key.form_field", "one source, already header"},
		{"no key source", lim + "{on_status: [401], key: {normalize: [trim]}}}", "rate_limits[0].charge.key", "one of caller"},
		{"bad ipv6 prefix", lim + "{on_status: [401], key: {client_address: {ipv6_prefix: 129}}}}", "key.client_address.ipv6_prefix", "from 1 to 128"},
		{"unknown address field", lim + "{on_status: [401], key: {client_address: {ipv4_prefix: 24}}}}", "key.client_address.ipv4_prefix", "unknown field"},
		{"bad normalize step", lim + "{on_status: [401], key: {json_field: u, normalize: [lower]}}}", "key.normalize[0]", "nfkc, trim or casefold"},
		{"normalize an address", lim + "{on_status: [401], key: {client_address: {}, normalize: [trim]}}}", "key.normalize", "account key"},
		{"bad duplicates", lim + "{on_status: [401], key: {form_field: u, duplicates: any}}}", "key.duplicates", "all, first or last"},
		{"duplicates of a header", lim + "{on_status: [401], key: {header: x-user, duplicates: first}}}", "key.duplicates", "body field"},
		{"bad field_names", lim + "{on_status: [401], key: {json_field: u, field_names: lower}}}", "key.field_names", "any_case or exact"},
		{"unreadable of caller", lim + "{on_status: [401], key: {caller: {}, unreadable: refuse}}}", "key.unreadable", "not caller"},
		{"bad unreadable", lim + "{on_status: [401], key: {json_field: u, unreadable: ignore}}}", "key.unreadable", "want refuse"},
		{"unreadable refuse 200", lim + "{on_status: [401], key: {json_field: u, unreadable: {refuse: 200}}}}", "key.unreadable.refuse", "4xx status"},
		{"unreadable header fallback", lim + "{on_status: [401], key: {json_field: u, unreadable: {header: x}}}}", "key.unreadable.header", "want refuse"},
		{"address falls back to address", lim + "{on_status: [401], key: {client_address: {}, unreadable: {client_address: {}}}}}", "key.unreadable.client_address", "cannot fall back to an address"},
		{"bad fallback hops", lim + "{on_status: [401], key: {json_field: u, unreadable: {client_address: {xff_trusted_hops: 99}}}}}", "key.unreadable.client_address.xff_trusted_hops", "0 to 64"},
		{"bad hops", lim + "{on_status: [401], key: {client_address: {xff_trusted_hops: -1}}}}", "key.client_address.xff_trusted_hops", "0 to 64"},
		{"empty form field", lim + "{on_status: [401], key: {form_field: ''}}}", "key.form_field", "must name a form field"},
		{"lockout without initial", lim + "{on_status: [401], lockout: {max: 1h}}}", "rate_limits[0].charge.lockout.initial", "is required"},
		{"lockout max below initial", lim + "{on_status: [401], lockout: {initial: 1h, max: 1m}}}", "lockout.max", "at least initial"},
		{"lockout factor", lim + "{on_status: [401], lockout: {initial: 1m, factor: 0.5}}}", "lockout.factor", "from 1 to 1000"},
		{"lockout max too long", lim + "{on_status: [401], lockout: {initial: 1m, max: 9000h}}}", "rate_limits[0].charge.lockout", "above"},
		{"lockout bad duration", lim + "{on_status: [401], lockout: {initial: soon}}}", "lockout.initial", "positive duration"},
		{"unknown charge field", lim + "{on_status: [401], on_stauts: [403]}}", "rate_limits[0].charge.on_stauts", "unknown field"},
		{"duplicate name", route + "{name: n, requests_per_unit: 5, unit: minute, charge: {on_status: [401]}}\n        - {name: n, requests_per_unit: 9, unit: hour, charge: {on_status: [403]}}",
			"rate_limits[1].name", `charged limit "n" is already defined`},
		{"charge in a descriptor", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, charge: {on_status: [401]}}}]",
			"descriptors[0].rate_limit.charge", "only allowed in an HTTP route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, _ := loadErr(t, "charge.yaml", tt.yaml)
			if !strings.Contains(msg, "charge.yaml:") || !strings.Contains(msg, tt.field) || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q\nwant file, field %q and %q", msg, tt.field, tt.msg)
			}
		})
	}
}

// TestChargedLimitSharesPeriodWithCounted: a charged limit keys its state
// by its name, so it may share algorithm and period with a counted limit.
func TestChargedLimitSharesPeriodWithCounted(t *testing.T) {
	t.Parallel()
	r := mustLoad(t, "p.yaml", `
http:
  routes:
    - name: r
      path_prefix: /
      rate_limits:
        - {requests_per_unit: 5, unit: minute}
        - {name: fails, requests_per_unit: 5, unit: minute, charge: {on_status: [401]}}
`).HTTP.Routes[0]
	if len(r.Limits) != 1 || len(r.Charged) != 1 {
		t.Errorf("limits %+v charged %+v", r.Limits, r.Charged)
	}
}

// TestChargeKeyDefaults: an account key is normalised, counts every
// duplicate whatever a field name's case, and refuses a request that does
// not name it (400); an address key keys a /64 and shares one key among
// requests without an address; each option overrides its default.
func TestChargeKeyDefaults(t *testing.T) {
	t.Parallel()
	r := mustLoad(t, "p.yaml", `
http:
  routes:
    - name: r
      path_prefix: /
      rate_limits:
        - {name: a, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {json_field: user.name}}}
        - {name: b, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {client_address: {}}}}
        - name: c
          requests_per_unit: 5
          unit: minute
          charge:
            on_status: [401]
            key:
              form_field: username
              normalize: [trim]
              duplicates: last
              field_names: exact
              unreadable: {client_address: {xff_trusted_hops: 1, ipv6_prefix: 56}}
        - {name: d, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {header: x-user, normalize: [], unreadable: {refuse: 429}}}}
        - {name: e, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {client_address: {ipv6_prefix: 128}, unreadable: refuse}}}
        - {name: f, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {json_field: u, unreadable: caller}}}
        - {name: g, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {json_field: u, unreadable: shared}}}
        - {name: h, requests_per_unit: 5, unit: minute, charge: {on_status: [401]}}
`).HTTP.Routes[0]
	keys := map[string]ChargeKey{}
	for _, c := range r.Charged {
		keys[c.Limit.Name] = c.Charge.Key
	}
	refuse400 := Unreadable{Action: UnreadableRefuse, Status: 400}
	want := map[string]ChargeKey{
		"a": {Kind: ChargeKeyJSONField, Name: "user.name", Normalize: DefaultNormalization, Duplicates: DuplicatesAll, Unreadable: refuse400},
		"b": {Kind: ChargeKeyClientAddress, IPv6Prefix: 64, Unreadable: Unreadable{Action: UnreadableShared}},
		"c": {Kind: ChargeKeyFormField, Name: "username", Normalize: Normalization{Trim: true}, Duplicates: DuplicatesLast, ExactFieldNames: true,
			Unreadable: Unreadable{Action: UnreadableFallback, Fallback: &ChargeKey{Kind: ChargeKeyClientAddress, TrustedHops: 1, IPv6Prefix: 56}}},
		"d": {Kind: ChargeKeyHeader, Name: "x-user", Duplicates: DuplicatesAll, Unreadable: Unreadable{Action: UnreadableRefuse, Status: 429}},
		"e": {Kind: ChargeKeyClientAddress, IPv6Prefix: 128, Unreadable: refuse400},
		"f": {Kind: ChargeKeyJSONField, Name: "u", Normalize: DefaultNormalization, Duplicates: DuplicatesAll,
			Unreadable: Unreadable{Action: UnreadableFallback, Fallback: &ChargeKey{Kind: ChargeKeyCaller}}},
		"g": {Kind: ChargeKeyJSONField, Name: "u", Normalize: DefaultNormalization, Duplicates: DuplicatesAll, Unreadable: Unreadable{Action: UnreadableShared}},
		"h": {Kind: ChargeKeyCaller},
	}
	for name, w := range want {
		if got := keys[name]; !reflect.DeepEqual(got, w) {
			t.Errorf("limit %s key\n got %+v\nwant %+v", name, got, w)
		}
	}
}

// TestRejectAccountKeys: with RejectAccountKeys (a shared store and no key
// secret) each account-keyed charged limit, a route's or a tier's, is a
// problem naming its file, line and field; caller and address keys load.
func TestRejectAccountKeys(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "login.yaml", `
http:
  tiers:
    plans:
      attribute: {header: x-plan}
      default: free
      limits:
        free: [{name: t, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {header: x-user}}}]
  routes:
    - name: login
      path_prefix: /login
      rate_limits:
        - {name: a, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {client_address: {}}}}
        - {name: b, requests_per_unit: 5, unit: minute, charge: {on_status: [401], key: {json_field: username}}}
        - {name: c, requests_per_unit: 5, unit: minute, charge: {on_status: [401]}}
    - {name: tiered, path_prefix: /t, tier_limits: plans}
`)
	_, err := LoadWith(path, LoadOptions{RejectAccountKeys: "set the secret"})
	var probs Errors
	if !errors.As(err, &probs) || len(probs) != 2 {
		t.Fatalf("error %v, want two problems", err)
	}
	for i, field := range []string{"http.routes[0].rate_limits[1].charge.key", "http.tiers.plans.limits.free[0].charge.key"} {
		if msg := probs[i].Error(); !strings.Contains(msg, "login.yaml:") || !strings.Contains(msg, field) || !strings.Contains(msg, "set the secret") || probs[i].Line == 0 {
			t.Errorf("problem %q, want file, line, %s and the reason", msg, field)
		}
	}
	if _, err := LoadWith(path, LoadOptions{}); err != nil {
		t.Errorf("without the option: %v", err)
	}
}
