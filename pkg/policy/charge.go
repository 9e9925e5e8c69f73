package policy

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// ChargedLimit is a limit of an HTTP route charged after the fact (its
// `charge` mapping): checked on the request path without being charged,
// and charged on the response path by what the response says.
type ChargedLimit struct {
	// Limit is the budget; its Name is required and names the limit in
	// keys, metadata and metrics.
	Limit ratelimit.Limit
	// Charge says what is charged and under which key.
	Charge Charge
}

// Charge is what a charged limit counts. Exactly one of OnStatus and Cost
// is set.
type Charge struct {
	// OnStatus lists the statuses ("401") and classes ("4xx") of the
	// responses that count one hit each.
	OnStatus []string
	// Cost is where a response's cost is read; nil for an outcome limit.
	Cost *ValueSource
	// Reserve, with Cost, is charged up front and reconciled with the
	// real cost; nil: nothing is reserved.
	Reserve *ValueSource
	// Key is whose budget it is: the caller's by default.
	Key ChargeKey
	// Lockout, when set, locks a key out once a charge spends its budget.
	Lockout *lockout.Policy

	statuses statusSet
	keyLine  int    // where `key` is written, for a problem found after parsing
	keyPath  string // (LoadOptions.RejectAccountKeys)
}

// Counts reports whether a response with this status counts against an
// outcome limit.
func (c *Charge) Counts(status int) bool { return c != nil && c.statuses.has(status) }

// ChargeKeyKind says where a charged limit's key comes from.
type ChargeKeyKind string

// The kinds of charge key.
const (
	ChargeKeyCaller        ChargeKeyKind = "caller"         // the identity chain's caller (the default)
	ChargeKeyClientAddress ChargeKeyKind = "client_address" // the client address, trusted hops only
	ChargeKeyHeader        ChargeKeyKind = "header"         // a request header (hashed into the key)
	ChargeKeyFormField     ChargeKeyKind = "form_field"     // a field of a form-encoded body (hashed)
	ChargeKeyJSONField     ChargeKeyKind = "json_field"     // a field of a JSON body (hashed)
)

// ChargeKey names whose budget a charged limit counts.
type ChargeKey struct {
	// Kind is the source; never empty once loaded.
	Kind ChargeKeyKind
	// Name is the header name, form field or JSON path (dot-separated)
	// of kinds that read one.
	Name string
	// TrustedHops is client_address's xff_trusted_hops.
	TrustedHops int
	// IPv6Prefix is client_address's ipv6_prefix: an IPv6 address is
	// keyed by its first IPv6Prefix bits (one /64 is one client); an
	// IPv4 address (or an IPv4-mapped IPv6 one) by all 32.
	IPv6Prefix int
	// Normalize is how an account value is normalised before it is keyed
	// (header, form_field, json_field).
	Normalize Normalization
	// Duplicates says which of several values of a field count
	// (form_field, json_field).
	Duplicates DuplicateRule
	// ExactFieldNames matches field names as written; by default a field
	// is matched whatever its case (Username is username), as Go and
	// ASP.NET bind JSON.
	ExactFieldNames bool
	// Unreadable is what a request whose key cannot be read gets.
	Unreadable Unreadable
}

// NeedsBody reports whether the key is read from the request body.
func (k ChargeKey) NeedsBody() bool {
	return k.Kind == ChargeKeyFormField || k.Kind == ChargeKeyJSONField
}

// IsAccount reports whether the key is an account named by the request
// (a header, a form field, a JSON field), hashed into the key.
func (k ChargeKey) IsAccount() bool {
	return k.Kind == ChargeKeyHeader || k.NeedsBody()
}

// DefaultIPv6Prefix is client_address's default ipv6_prefix: a /64 is
// what one subscriber or host is given.
const DefaultIPv6Prefix = 64

// Normalization lists the steps applied to an account value, always in
// this order: NFKC, then Trim, then CaseFold (then NFKC again, which a
// fold can undo).
type Normalization struct {
	NFKC     bool // Unicode NFKC: fullwidth "ｃａｒｏｌ" is "carol"
	Trim     bool // leading and trailing white space dropped
	CaseFold bool // Unicode case folding: "Carol" is "carol"
}

// DefaultNormalization fits e-mail addresses and user names: every step.
var DefaultNormalization = Normalization{NFKC: true, Trim: true, CaseFold: true}

// DuplicateRule says which values count when a field appears more than
// once (or in more than one case).
type DuplicateRule string

// The duplicate rules.
const (
	// DuplicatesAll checks and charges every distinct value, so that
	// whichever one the upstream reads is limited (the default).
	DuplicatesAll DuplicateRule = "all"
	// DuplicatesFirst takes the first value, as Flask does.
	DuplicatesFirst DuplicateRule = "first"
	// DuplicatesLast takes the last value, as PHP and Django do.
	DuplicatesLast DuplicateRule = "last"
)

// UnreadableAction is what a request gets whose key cannot be read.
type UnreadableAction string

// The unreadable actions.
const (
	// UnreadableRefuse answers the request with Unreadable.Status (the
	// default of account keys).
	UnreadableRefuse UnreadableAction = "refuse"
	// UnreadableShared charges one key shared by every request of the
	// limit whose key cannot be read (the default of client_address).
	UnreadableShared UnreadableAction = "shared"
	// UnreadableFallback charges Unreadable.Fallback's key instead.
	UnreadableFallback UnreadableAction = "fallback"
)

// Unreadable is a key's answer to a request that does not name it (no
// such header or field, a body too large, cut or not parsable, no client
// address): never "not limited".
type Unreadable struct {
	Action UnreadableAction
	// Status is the refusal's status (400 by default; any 4xx).
	Status int
	// Fallback is the key charged instead: caller or client_address.
	Fallback *ChargeKey
}

// DefaultUnreadableStatus is the status of a request refused because its
// account cannot be read.
const DefaultUnreadableStatus = 400

// MaxKeyValues bounds the distinct values of one key a request may name
// (duplicates: all): more is unreadable, so that a body cannot make one
// request cost hundreds of store calls.
const MaxKeyValues = 4

// ValueSource is where a number is read: one of a response (or request)
// header, a response trailer, or a JSON field of the body, with a default
// for when it is missing.
type ValueSource struct {
	Header    string
	Trailer   string
	JSONField string // a dot-separated path, e.g. usage.total_tokens
	// Default is used when the value is missing; meaningful only when
	// HasDefault, which a cost always has (required: a missing cost is
	// free only where the policy says default: 0).
	Default    int64
	HasDefault bool
}

// Lockout defaults.
const (
	DefaultLockoutFactor = 2
	DefaultLockoutMax    = time.Hour
)

// chargeSpec reads a limit's `charge` mapping into c.
func (d *decoder) charge(f field) *Charge {
	c := &Charge{Key: ChargeKey{Kind: ChargeKeyCaller}}
	var onStatus, cost, reserve *field
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "on_status":
			onStatus = &kv
			c.OnStatus = d.statuses(kv, &c.statuses)
		case "cost":
			cost = &kv
			c.Cost = d.valueSource(kv, true)
		case "reserve":
			reserve = &kv
			c.Reserve = d.valueSource(kv, false)
		case "key":
			c.Key = d.chargeKey(kv)
			c.keyLine, c.keyPath = kv.line, kv.path
		case "lockout":
			c.Lockout = d.lockout(kv)
		default:
			d.unknown(kv)
		}
	}
	switch {
	case onStatus == nil && cost == nil:
		d.problem(f.line, f.path, "set one of on_status (responses that count) and cost (where the cost is read)")
	case onStatus != nil && cost != nil:
		d.problem(cost.line, cost.path, "set on_status or cost, not both")
	case reserve != nil && cost == nil:
		d.problem(reserve.line, reserve.path, "a reservation applies to a cost limit only")
	}
	return c
}

// valueSource reads `{header|trailer|json_field: ..., default: N}`. A
// cost (response true) requires its default: a reply that does not say its
// cost would otherwise be free. A reservation (response false) is read
// from the request: a header or a default only.
func (d *decoder) valueSource(f field, response bool) *ValueSource {
	v := &ValueSource{}
	sources := 0
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "header":
			sources++
			v.Header = d.headerName(kv)
		case "trailer", "json_field":
			if !response {
				d.problem(kv.line, kv.path, "a reservation is read from a request header or a default, not a %s", kv.key)
				continue
			}
			sources++
			if kv.key == "trailer" {
				v.Trailer = d.headerName(kv)
			} else {
				v.JSONField = d.jsonPath(kv)
			}
		case "default":
			v.HasDefault = true
			if v.Default = d.integer(kv); v.Default < 0 {
				d.problem(kv.line, kv.path, "must not be negative, got %d", v.Default)
			}
		default:
			d.unknown(kv)
		}
	}
	switch {
	case sources > 1:
		d.problem(f.line, f.path, "set one source (header, trailer or json_field), not %d", sources)
	case sources == 0 && response:
		d.problem(f.line, f.path, "set one source: header, trailer or json_field")
	case sources == 0 && !v.HasDefault:
		d.problem(f.line, f.path, "set a header, a default, or both")
	case response && !v.HasDefault:
		d.problem(f.line, joinPath(f.path, "default"), "is required: the cost charged when the response does not say it "+
			"(no such header or field, a reply cut short, a client gone); write default: 0 for a missing cost to be free")
	}
	return v
}

// jsonPath reads a dot-separated path of JSON object fields.
func (d *decoder) jsonPath(f field) string {
	p := d.str(f)
	for _, seg := range strings.Split(p, ".") {
		if seg == "" {
			d.problem(f.line, f.path, "want a dot-separated path of field names such as usage.total_tokens, got %s", describe(f.node))
			break
		}
	}
	return p
}

// chargeKey reads `key`: a mapping with exactly one source and the
// options of that source.
func (d *decoder) chargeKey(f field) ChargeKey {
	k := ChargeKey{Kind: ChargeKeyCaller}
	var source *field
	var options []field
	for _, kv := range d.fields(f.node, f.path) {
		switch {
		case keyOptions[kv.key]:
			options = append(options, kv)
		case source != nil:
			d.problem(kv.line, kv.path, "a key has one source, already %s", source.key)
		default:
			source = &kv
		}
	}
	if source == nil {
		d.problem(f.line, f.path, "a key is one of caller, client_address, header, form_field, json_field")
		return k
	}
	d.keySource(*source, &k)
	k.setDefaults()
	for _, kv := range options {
		d.keyOption(kv, &k)
	}
	return k
}

// keyOptions are the fields of `key` beside its source.
var keyOptions = map[string]bool{"normalize": true, "duplicates": true, "field_names": true, "unreadable": true}

// keySource reads the source field of `key`.
func (d *decoder) keySource(kv field, k *ChargeKey) {
	k.Kind = ChargeKeyKind(kv.key)
	switch k.Kind {
	case ChargeKeyCaller:
		d.noFields(kv)
	case ChargeKeyClientAddress:
		k.TrustedHops, k.IPv6Prefix = d.chargeAddress(kv)
	case ChargeKeyHeader:
		k.Name = d.headerName(kv)
	case ChargeKeyFormField:
		if k.Name = d.str(kv); k.Name == "" {
			d.problem(kv.line, kv.path, "must name a form field")
		}
	case ChargeKeyJSONField:
		k.Name = d.jsonPath(kv)
	default:
		k.Kind = ChargeKeyCaller
		d.problem(kv.line, kv.path, "unknown key source (want caller, client_address, header, form_field or json_field)")
	}
}

// setDefaults gives a key of its kind the safe defaults: an account is
// normalised, every duplicate counts, and a request that does not name
// it is refused; an unknown address shares one key.
func (k *ChargeKey) setDefaults() {
	switch {
	case k.IsAccount():
		k.Normalize = DefaultNormalization
		k.Duplicates = DuplicatesAll
		k.Unreadable = Unreadable{Action: UnreadableRefuse, Status: DefaultUnreadableStatus}
	case k.Kind == ChargeKeyClientAddress:
		k.Unreadable = Unreadable{Action: UnreadableShared}
	}
}

// keyOption reads one option of `key`, checking it applies to the source.
func (d *decoder) keyOption(kv field, k *ChargeKey) {
	switch kv.key {
	case "normalize":
		if d.keyOptionFor(kv, k.IsAccount(), "an account key (header, form_field, json_field)") {
			k.Normalize = d.normalization(kv)
		}
	case "duplicates":
		if d.keyOptionFor(kv, k.NeedsBody(), "a body field (form_field, json_field)") {
			k.Duplicates = d.duplicates(kv)
		}
	case "field_names":
		if d.keyOptionFor(kv, k.NeedsBody(), "a body field (form_field, json_field)") {
			k.ExactFieldNames = d.fieldNames(kv)
		}
	case "unreadable":
		if d.keyOptionFor(kv, k.Kind != ChargeKeyCaller, "a key that can be unreadable (not caller)") {
			k.Unreadable = d.unreadable(kv, *k)
		}
	}
}

func (d *decoder) keyOptionFor(kv field, ok bool, what string) bool {
	if !ok {
		d.problem(kv.line, kv.path, "applies to %s only", what)
	}
	return ok
}

// normalization reads `normalize: [nfkc, trim, casefold]` (any subset;
// [] for none).
func (d *decoder) normalization(f field) Normalization {
	var n Normalization
	for _, item := range d.items(f) {
		switch d.str(item) {
		case "nfkc":
			n.NFKC = true
		case "trim":
			n.Trim = true
		case "casefold":
			n.CaseFold = true
		default:
			d.problem(item.line, item.path, "want nfkc, trim or casefold, got %s", describe(item.node))
		}
	}
	return n
}

func (d *decoder) duplicates(f field) DuplicateRule {
	switch r := DuplicateRule(d.str(f)); r {
	case DuplicatesAll, DuplicatesFirst, DuplicatesLast:
		return r
	}
	d.problem(f.line, f.path, "want all, first or last, got %s", describe(f.node))
	return DuplicatesAll
}

func (d *decoder) fieldNames(f field) bool {
	switch d.str(f) {
	case "any_case":
		return false
	case "exact":
		return true
	}
	d.problem(f.line, f.path, "want any_case or exact, got %s", describe(f.node))
	return false
}

// unreadable reads `unreadable`: refuse, shared, caller, {refuse: <4xx>}
// or {client_address: {...}} (an account key's fallback).
func (d *decoder) unreadable(f field, k ChargeKey) Unreadable {
	const want = "want refuse, {refuse: <4xx status>}, shared, caller or {client_address: {...}}"
	u := Unreadable{Action: UnreadableRefuse, Status: DefaultUnreadableStatus}
	if f.node.Kind == yaml.ScalarNode {
		switch d.str(f) {
		case "refuse":
			return u
		case "shared":
			return Unreadable{Action: UnreadableShared}
		case "caller":
			return Unreadable{Action: UnreadableFallback, Fallback: &ChargeKey{Kind: ChargeKeyCaller}}
		}
		d.problem(f.line, f.path, "%s, got %s", want, describe(f.node))
		return u
	}
	fs := d.fields(f.node, f.path)
	if len(fs) != 1 {
		d.problem(f.line, f.path, "%s", want)
		return u
	}
	kv := fs[0]
	switch kv.key {
	case "refuse":
		if u.Status = int(d.integer(kv)); u.Status < 400 || u.Status > 499 {
			d.problem(kv.line, kv.path, "want a 4xx status such as 400 or 429, got %s", describe(kv.node))
		}
	case "client_address":
		if k.Kind == ChargeKeyClientAddress {
			d.problem(kv.line, kv.path, "an address key cannot fall back to an address (want refuse, shared or caller)")
			return u
		}
		fb := &ChargeKey{Kind: ChargeKeyClientAddress}
		fb.TrustedHops, fb.IPv6Prefix = d.chargeAddress(kv)
		return Unreadable{Action: UnreadableFallback, Fallback: fb}
	default:
		d.problem(kv.line, kv.path, "%s", want)
	}
	return u
}

// noFields accepts only an empty mapping (or null).
func (d *decoder) noFields(f field) {
	for _, kv := range d.fields(f.node, f.path) {
		d.unknown(kv)
	}
}

// chargeAddress reads `{xff_trusted_hops: N, ipv6_prefix: P}` (or null:
// 0 hops, a /64).
func (d *decoder) chargeAddress(f field) (hops, v6prefix int) {
	v6prefix = DefaultIPv6Prefix
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "xff_trusted_hops":
			n := d.integer(kv)
			if n < 0 || n > 64 {
				d.problem(kv.line, kv.path, "want 0 to 64, got %d", n)
				continue
			}
			hops = int(n)
		case "ipv6_prefix":
			n := d.integer(kv)
			if n < 1 || n > 128 {
				d.problem(kv.line, kv.path, "want a prefix length from 1 to 128 (64: one subscriber), got %d", n)
				continue
			}
			v6prefix = int(n)
		default:
			d.unknown(kv)
		}
	}
	return hops, v6prefix
}

// lockout reads `{initial, factor, max, forget}`.
func (d *decoder) lockout(f field) *lockout.Policy {
	l := &lockout.Policy{Factor: DefaultLockoutFactor, Max: DefaultLockoutMax}
	var maxField *field
	hasInitial := false
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "initial":
			hasInitial = true
			l.Initial = d.positiveDuration(kv)
		case "factor":
			l.Factor = d.factor(kv)
		case "max":
			maxField = &kv
			l.Max = d.positiveDuration(kv)
		case "forget":
			l.Forget = d.positiveDuration(kv)
		default:
			d.unknown(kv)
		}
	}
	switch {
	case !hasInitial:
		d.problem(f.line, joinPath(f.path, "initial"), "is required: the first lockout, e.g. 1m")
	case maxField != nil && l.Max < l.Initial:
		d.problem(maxField.line, maxField.path, "must be at least initial (%s), got %s", l.Initial, l.Max)
	case maxField == nil && l.Max < l.Initial:
		l.Max = l.Initial
	}
	if hasInitial && l.Max >= l.Initial {
		if err := l.Validate(); err != nil {
			d.problem(f.line, f.path, "%v", err)
		}
	}
	return l
}

func (d *decoder) factor(f field) float64 {
	var v float64
	if f.node.Kind != 0 && f.node.Decode(&v) == nil && v >= 1 && v <= 1000 {
		return v
	}
	d.problem(f.line, f.path, "want a number from 1 to 1000 (2 doubles each lockout), got %s", describe(f.node))
	return DefaultLockoutFactor
}

// checkCharged validates what a charged limit needs beyond its charge.
func (d *decoder) checkCharged(f field, s limitSpec) {
	if s.limit.Name == "" {
		d.problem(f.line, joinPath(f.path, "name"), "is required on a charged limit: it names the limit in keys and metrics")
	}
}

// uniqueCharged reports a charged limit named like an earlier one of the
// same list (seen maps "charged/<name>" to the first one's path).
func (d *decoder) uniqueCharged(item field, name string, seen map[string]string) {
	k := "charged/" + name
	if first, dup := seen[k]; dup {
		d.problem(item.line, joinPath(item.path, "name"), "charged limit %q is already defined at %s", name, first)
		return
	}
	seen[k] = item.path
}

// splitCharged sorts a parsed limit list into counted and charged limits.
func splitCharged(specs []limitSpec) (counted []ratelimit.Limit, charged []*ChargedLimit) {
	for _, s := range specs {
		if c := s.charged(); c != nil {
			charged = append(charged, c)
			continue
		}
		counted = append(counted, s.limit)
	}
	return counted, charged
}

// accountKeyProblems reports each charged limit of h keyed by an account
// (header, form_field, json_field), its own and its tiers', with reason.
func accountKeyProblems(h *HTTP, file, reason string) Errors {
	if h == nil {
		return nil
	}
	var probs Errors
	for _, r := range h.Routes {
		all := r.Charged
		if r.Tiers != nil {
			for _, name := range sortedKeys(r.Tiers.Charged) {
				all = append(all[:len(all):len(all)], r.Tiers.Charged[name]...)
			}
		}
		for _, c := range all {
			if c.Charge.Key.IsAccount() {
				probs = append(probs, &Problem{File: file, Line: c.Charge.keyLine, Field: c.Charge.keyPath, Message: reason})
			}
		}
	}
	return probs
}
