package policy

import (
	"strings"
	"time"

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
}

// NeedsBody reports whether the key is read from the request body.
func (k ChargeKey) NeedsBody() bool {
	return k.Kind == ChargeKeyFormField || k.Kind == ChargeKeyJSONField
}

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

// chargeKey reads `key`: a mapping with exactly one source.
func (d *decoder) chargeKey(f field) ChargeKey {
	k := ChargeKey{Kind: ChargeKeyCaller}
	fs := d.fields(f.node, f.path)
	if len(fs) != 1 {
		d.problem(f.line, f.path, "a key is one of caller, client_address, header, form_field, json_field")
		return k
	}
	kv := fs[0]
	k.Kind = ChargeKeyKind(kv.key)
	switch k.Kind {
	case ChargeKeyCaller:
		d.noFields(kv)
	case ChargeKeyClientAddress:
		k.TrustedHops = d.trustedHops(kv)
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
	return k
}

// noFields accepts only an empty mapping (or null).
func (d *decoder) noFields(f field) {
	for _, kv := range d.fields(f.node, f.path) {
		d.unknown(kv)
	}
}

// trustedHops reads `{xff_trusted_hops: N}` (or null: 0).
func (d *decoder) trustedHops(f field) int {
	hops := 0
	for _, kv := range d.fields(f.node, f.path) {
		if kv.key != "xff_trusted_hops" {
			d.unknown(kv)
			continue
		}
		n := d.integer(kv)
		if n < 0 || n > 64 {
			d.problem(kv.line, kv.path, "want 0 to 64, got %d", n)
			continue
		}
		hops = int(n)
	}
	return hops
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
