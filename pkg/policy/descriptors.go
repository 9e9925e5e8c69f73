package policy

import (
	"fmt"
	"strings"
)

// maxDepth bounds descriptor nesting; Envoy sends a handful of entries per
// descriptor, and a bound keeps a cyclic alias from recursing forever.
const maxDepth = 32

// domainBuilder gathers what is checked once the whole domain is read.
type domainBuilder struct {
	names    map[string]bool // every rule and limit name in the domain
	replaces []ownedRef
}

// ownedRef is a `replaces` entry, the rule that wrote it and its file.
type ownedRef struct {
	ref
	owner *Rule
	file  string
}

// domain builds the descriptor tree of one file. The `replaces` entries are
// checked by the caller once every file of the domain is read (see
// domainBuilder.check), since with merged domains a rule may replace one
// written in another file.
func (d *decoder) domain(name string, descs field, hasDescs bool) (*Domain, *domainBuilder) {
	dom := &Domain{Name: name, File: d.file, root: newRoot(name)}
	b := &domainBuilder{names: map[string]bool{}}
	if hasDescs {
		d.descriptors(descs, dom.root, b)
	}
	return dom, b
}

// check reports every `replaces` entry that names its own rule or no rule
// of the domain.
func (b *domainBuilder) check(domain string) Errors {
	var probs Errors
	for _, r := range b.replaces {
		msg := ""
		switch {
		case r.owner.Named(r.name):
			msg = "a rule cannot replace itself"
		case !b.names[r.name]:
			msg = fmt.Sprintf("no rule named %q in domain %q", r.name, domain)
		default:
			continue
		}
		probs = append(probs, &Problem{File: r.file, Line: r.line, Field: r.path, Message: msg})
	}
	return probs
}

// absorb adds what other gathered (a later file of the same domain) to b.
func (b *domainBuilder) absorb(other *domainBuilder) {
	for name := range other.names {
		b.names[name] = true
	}
	b.replaces = append(b.replaces, other.replaces...)
}

func (d *decoder) descriptors(f field, parent *node, b *domainBuilder) {
	if parent.depth >= maxDepth {
		d.problem(f.line, f.path, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	for _, item := range d.items(f) {
		d.descriptor(item, parent, b)
	}
}

// descriptorFields are what one descriptor mapping said.
type descriptorFields struct {
	key, value                        string
	rateLimit, rateLimits, subs       field
	shadow, detailed, share, valueMet bool
	quota                             bool
	metadata                          map[string]any
	has                               map[string]bool
}

func (d *decoder) descriptorFields(f field) descriptorFields {
	df := descriptorFields{has: map[string]bool{}}
	for _, kv := range d.fields(f.node, f.path) {
		df.has[kv.key] = true
		switch kv.key {
		case "key":
			df.key = d.str(kv)
		case "value":
			df.value = d.str(kv)
		case "rate_limit":
			df.rateLimit = kv
		case "rate_limits":
			df.rateLimits = kv
		case "descriptors":
			df.subs = kv
		case "shadow_mode":
			df.shadow = d.boolean(kv)
		case "detailed_metric":
			df.detailed = d.boolean(kv)
		case "share_threshold":
			df.share = d.boolean(kv)
		case "value_to_metric":
			df.valueMet = d.boolean(kv)
		case "quota_mode":
			df.quota = d.boolean(kv)
		case "metadata":
			df.metadata = d.metadata(kv)
		default:
			d.unknown(kv)
		}
	}
	return df
}

// descriptor reads one descriptor and adds it (with its children) below parent.
func (d *decoder) descriptor(f field, parent *node, b *domainBuilder) {
	df := d.descriptorFields(f)
	if df.key == "" {
		d.problem(f.line, joinPath(f.path, "key"), "is required and must not be empty")
		return
	}
	n := &node{key: df.key, value: df.value, field: f.path, line: f.line, share: df.share, valueMetric: df.valueMet}
	if strings.Contains(n.value, "*") {
		n.glob = compileWildcard(n.value)
	} else if df.share {
		// envoyproxy/ratelimit rejects the file too: the flag would do nothing.
		d.problem(f.line, joinPath(f.path, "share_threshold"),
			"can only be used with wildcard values (containing '*'), got value %q", n.value)
	}
	if prev := parent.sibling(n); prev != nil {
		d.problem(f.line, f.path, "duplicate descriptor: key %q value %q is already at %s", n.key, n.value, prev.field)
		return
	}
	parent.add(n)
	if n.rule = d.rule(df, b); n.rule != nil {
		n.rule.ID = n.id
		n.rule.ShadowMode = df.shadow
		n.rule.DetailedMetric = df.detailed
		n.rule.ShareThreshold = df.share
		n.rule.QuotaMode = df.quota
		n.rule.Metadata = df.metadata
	}
	if df.has["descriptors"] {
		d.descriptors(df.subs, n, b)
	}
}

// sameChargeOver reports a rate_limits list whose limits disagree on
// charge_over_limit: a descriptor's limits are decided as one request, so
// they are charged the same way.
func (d *decoder) sameChargeOver(f field, specs []limitSpec) {
	for i, s := range specs {
		if i > 0 && s.chargeOver != specs[0].chargeOver {
			d.problem(f.line, fmt.Sprintf("%s[%d].charge_over_limit", f.path, i),
				"must be the same on every limit of rate_limits (the descriptor's limits are charged as one)")
			return
		}
	}
}

// rule builds the rule of a descriptor from rate_limit or rate_limits, or
// returns nil when it has neither (a placeholder for nested descriptors, or,
// with no children either, an allow-listed descriptor).
func (d *decoder) rule(df descriptorFields, b *domainBuilder) *Rule {
	// An empty `rate_limit:` is no limit, as envoyproxy/ratelimit reads it.
	hasOne := df.has["rate_limit"] && !isNull(df.rateLimit.node)
	hasMany := df.has["rate_limits"] && !isNull(df.rateLimits.node)
	var specs []limitSpec
	switch {
	case hasOne && hasMany:
		d.problem(df.rateLimits.line, df.rateLimits.path, "rate_limit and rate_limits are mutually exclusive")
		return nil
	case hasOne:
		specs = []limitSpec{d.limit(df.rateLimit, inRateLimit)}
	case hasMany:
		specs = d.limitList(df.rateLimits, inRateLimits)
		d.sameChargeOver(df.rateLimits, specs)
	default:
		return nil
	}
	r := &Rule{}
	for _, s := range specs {
		r.ChargeOverLimit = r.ChargeOverLimit || s.chargeOver
		switch {
		case s.unlimited:
			r.Unlimited = true
		case s.blocked:
			r.Blocked = true
			r.Limits = append(r.Limits, s.limit)
		default:
			r.Limits = append(r.Limits, s.limit)
		}
		if r.Name == "" {
			r.Name = s.limit.Name
		}
		if s.limit.Name != "" {
			b.names[s.limit.Name] = true
		}
		for _, ref := range s.replaces {
			r.Replaces = append(r.Replaces, ref.name)
			b.replaces = append(b.replaces, ownedRef{ref: ref, owner: r, file: d.file})
		}
	}
	return r
}
