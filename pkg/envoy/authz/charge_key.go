package authz

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"mime"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
	"google.golang.org/grpc/codes"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// ProblemChargeKeyUnreadable is the problem type of a request refused
// because a charged limit's key (an account named in a header or the
// body) cannot be read from it: the limit would otherwise not apply.
const ProblemChargeKeyUnreadable = "https://github.com/extauthz/extauthz/blob/main/docs/policy.md#keys-of-charged-limits"

func problemChargeKeyUnreadable(limit string, status int) *reply {
	return problemReply(Problem{Type: ProblemChargeKeyUnreadable, Title: "Account cannot be read", Status: status,
		Detail:           "The request does not name the account this endpoint is limited by in a form the limit can read (a missing field, a body too large or malformed, several accounts at once).",
		ViolatedPolicies: []string{limit}})
}

// Why a key could not be read: the "reason" label of
// extauthz_charge_keys_unreadable_total.
const (
	KeyMissing       = "missing"         // no such header or field, or an empty value
	KeyTooLarge      = "too_large"       // a body over maxChargeKeyBody, or cut by Envoy
	KeyUnparsable    = "unparsable"      // a body read as JSON that is not, or a multipart form that does not parse
	KeyTooManyValues = "too_many_values" // more than policy.MaxKeyValues distinct values
	KeyNoAddress     = "no_address"      // no client IP address (no source.address, a Unix socket)
)

// keyUnreadableValue is the value of the key shared by every request of a
// limit whose key cannot be read (unreadable: shared): no IP address and
// no hex digest can equal it.
const keyUnreadableValue = "~unreadable"

// keyBody is the request body as read for an account key.
type keyBody struct {
	data []byte
	cut  bool // Envoy cut it (max_request_bytes) or it outgrew maxChargeKeyBody
}

// chargeKeys resolves keys: it hashes account values under an HMAC key
// and logs the first unreadable key of each limit and reason.
type chargeKeys struct {
	secret []byte
	log    *slog.Logger // nil: nothing logged
	logged *sync.Map    // route + limit + reason seen
}

// processKeySecret is the HMAC key of a process given none: right for
// in-process stores, which live as long as it does.
var processKeySecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
})

// hash keeps an account name out of the keyspace: hex HMAC-SHA-256 under
// the secret (a plain digest of an e-mail address is reversed by a
// dictionary).
func (k *chargeKeys) hash(v string) string {
	mac := hmac.New(sha256.New, k.secret)
	mac.Write([]byte(v))
	return hex.EncodeToString(mac.Sum(nil))
}

// keysOf is a charged limit's counting keys for a request:
// ratelimit.Key(scope, "http", route, [tier], limit, [<source>=<value>]).
// The caller's budget is under its scope; any other key is shared by
// every caller that names it (that is its point: an account attacked from
// many addresses), so its scope is scopeShared and its value (hashed
// unless an address) an entry. A request naming several accounts
// (duplicates: all) has a key for each. A key that cannot be read gets
// the limit's unreadable choice: a refusal (the reply), one shared key,
// or a fallback key.
func (c *charger) keysOf(scope string, route, tier string, cl *policy.ChargedLimit, in callerInput, body keyBody) ([]string, *reply) {
	base := []ratelimit.Entry{{Key: "route", Value: route}}
	if tier != "" {
		base = append(base, ratelimit.Entry{Key: "tier", Value: tier})
	}
	base = append(base, ratelimit.Entry{Key: "limit", Value: cl.Limit.Name})
	k := cl.Charge.Key
	if k.Kind == policy.ChargeKeyCaller {
		return []string{ratelimit.Key(scope, httpLimitDomain, base)}, nil
	}
	values, reason := c.keys.values(k, in, body)
	if reason == "" {
		return sharedKeys(base, k.Kind, values), nil
	}
	c.keys.unreadable(c.metrics, route, cl.Limit.Name, reason)
	return c.keys.unreadableKeys(scope, base, cl, in, body)
}

// unreadableKeys applies a key's unreadable choice: the shared key, a
// fallback key, or the refusal.
func (k *chargeKeys) unreadableKeys(scope string, base []ratelimit.Entry, cl *policy.ChargedLimit, in callerInput, body keyBody) ([]string, *reply) {
	key := cl.Charge.Key
	switch u := key.Unreadable; u.Action {
	case policy.UnreadableShared:
		return sharedKeys(base, key.Kind, []string{keyUnreadableValue}), nil
	case policy.UnreadableFallback:
		fb := *u.Fallback
		if fb.Kind == policy.ChargeKeyCaller {
			return []string{ratelimit.Key(scope, httpLimitDomain, base)}, nil
		}
		values, reason := k.values(fb, in, body)
		if reason != "" {
			values = []string{keyUnreadableValue} // no address either: the shared key
		}
		return sharedKeys(base, fb.Kind, values), nil
	}
	return nil, problemChargeKeyUnreadable(cl.Limit.Name, key.Unreadable.Status)
}

// sharedKeys are the keys of values under scopeShared.
func sharedKeys(base []ratelimit.Entry, kind policy.ChargeKeyKind, values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		entries := slices.Concat(base, []ratelimit.Entry{{Key: string(kind), Value: v}})
		out[i] = ratelimit.Key(scopeShared, httpLimitDomain, entries)
	}
	return out
}

// unreadable counts a key that could not be read, and logs the first of
// each route, limit and reason (a misconfigured Envoy that sends no
// address would otherwise log every request).
func (k *chargeKeys) unreadable(m *ChargeMetrics, route, limit, reason string) {
	m.keyUnreadable(route, limit, reason)
	if k.log == nil {
		return
	}
	if _, seen := k.logged.LoadOrStore(route+"\x00"+limit+"\x00"+reason, true); !seen {
		k.log.Warn("charged limit's key cannot be read: the key's unreadable choice applies (logged once; extauthz_charge_keys_unreadable_total counts each)",
			"route", route, "limit", limit, "reason", reason)
	}
}

// values reads the values of a key that is not the caller: a masked
// client address, or the hashed account names; reason says why there is
// none.
func (k *chargeKeys) values(key policy.ChargeKey, in callerInput, body keyBody) ([]string, string) {
	if key.Kind == policy.ChargeKeyClientAddress {
		ip := maskAddress(clientIP(in, key.TrustedHops), key.IPv6Prefix)
		if ip == "" {
			return nil, KeyNoAddress
		}
		// Tagged as the address scope always was: an IPv4 address keeps
		// the key (budget, lockout) it had before prefixes.
		return []string{scopeAddress + ip}, ""
	}
	raw, reason := accountValues(key, in, body)
	if reason != "" {
		return nil, reason
	}
	values := distinctNormalized(raw, key)
	switch {
	case len(values) == 0:
		return nil, KeyMissing
	case len(values) > policy.MaxKeyValues:
		return nil, KeyTooManyValues
	}
	for i, v := range values {
		values[i] = k.hash(v)
	}
	return values, ""
}

// accountValues reads the values an account key names, in request order:
// a header's (its lines joined by ",", as Envoy joins them), or a body
// field's.
func accountValues(key policy.ChargeKey, in callerInput, body keyBody) ([]string, string) {
	if key.Kind == policy.ChargeKeyHeader {
		return []string{headerValue(in.headers, key.Name)}, ""
	}
	switch {
	case body.cut || len(body.data) > maxChargeKeyBody:
		return nil, KeyTooLarge
	case len(body.data) == 0:
		return nil, KeyMissing
	}
	m := fieldMatcher{name: key.Name, exact: key.ExactFieldNames}
	switch format, boundary := bodyFormat(key.Kind, headerValue(in.headers, "content-type")); format {
	case formatForm:
		return formValues(body.data, m), ""
	case formatMultipart:
		vs, err := multipartValues(body.data, boundary, m)
		if err != nil {
			return nil, KeyUnparsable
		}
		return vs, ""
	}
	path := []string{key.Name}
	if key.Kind == policy.ChargeKeyJSONField {
		path = strings.Split(key.Name, ".")
	}
	vs, err := jsonValues(body.data, path, key.ExactFieldNames)
	if err != nil {
		return nil, KeyUnparsable
	}
	return vs, ""
}

// The ways a body is read for an account.
const (
	formatJSON = iota
	formatForm
	formatMultipart
)

// bodyFormat decides how a body is read, by its content type as the
// upstream's framework decides: a form (urlencoded or multipart) is read
// as a form and a JSON document as JSON whichever the key names (a
// form_field key reads the top-level field of its name, a json_field key a
// field named as its whole path); a body of no or another content type as
// the key's kind. boundary is a multipart body's.
func bodyFormat(kind policy.ChargeKeyKind, contentType string) (format int, boundary string) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt, _, _ = strings.Cut(strings.ToLower(contentType), ";")
		mt = strings.TrimSpace(mt)
	}
	switch {
	case mt == "application/x-www-form-urlencoded":
		return formatForm, ""
	case mt == "multipart/form-data":
		return formatMultipart, params["boundary"]
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return formatJSON, ""
	case kind == policy.ChargeKeyFormField:
		return formatForm, ""
	}
	return formatJSON, ""
}

// distinctNormalized applies the key's normalisation and duplicate rule:
// every distinct non-empty value (all), or the first or last value.
func distinctNormalized(raw []string, key policy.ChargeKey) []string {
	switch {
	case len(raw) == 0:
		return nil
	case key.Duplicates == policy.DuplicatesFirst:
		raw = raw[:1]
	case key.Duplicates == policy.DuplicatesLast:
		raw = raw[len(raw)-1:]
	}
	var out []string
	for _, v := range raw {
		v = normalize(v, key.Normalize)
		if v != "" && !contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// normalize applies n's steps in their order: NFKC (fullwidth letters,
// ligatures and compatibility forms become their plain letters), trim
// (Unicode white space), case fold, then NFKC again (a fold can leave a
// sequence NFKC would change).
func normalize(v string, n policy.Normalization) string {
	if n.NFKC {
		v = norm.NFKC.String(v)
	}
	if n.Trim {
		v = strings.TrimSpace(v)
	}
	if n.CaseFold {
		v = cases.Fold().String(v)
		if n.NFKC {
			v = norm.NFKC.String(v)
		}
	}
	return v
}

// maskAddress keys an address: an IPv4 address (an IPv4-mapped IPv6 one
// too) as itself, an IPv6 address by its first v6prefix bits ("2001:db8::/64",
// zone dropped), so that one subscriber's /64 is one key. "" for "".
func maskAddress(ip string, v6prefix int) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	if v6prefix <= 0 || v6prefix > 128 {
		v6prefix = policy.DefaultIPv6Prefix
	}
	p, err := a.Prefix(v6prefix)
	if err != nil {
		return a.String()
	}
	return p.Masked().Addr().String() + "/" + strconv.Itoa(v6prefix)
}

// refusedCode is the gRPC status of an ext_authz refusal of an unreadable
// key: what Envoy records beside the reply's HTTP status.
func refusedCode(r *reply) codes.Code {
	if r.status == 429 {
		return codes.ResourceExhausted
	}
	return codes.InvalidArgument
}
