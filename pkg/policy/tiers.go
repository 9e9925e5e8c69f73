package policy

import (
	"slices"
	"sort"
	"strings"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TierSet is a named set of tiers (plans): the caller's tier, read from
// Attribute, picks the limits of a route that names the set in its
// tier_limits. A value that is no tier of the set, and a missing one, both
// take Default, so a client cannot reach a budget by inventing a tier.
type TierSet struct {
	// Name is the set's key under http.tiers.
	Name string
	// Attribute is where the caller's tier is read.
	Attribute TierAttribute
	// Default is the tier of callers without one or with an unknown one;
	// always a key of Limits once loaded.
	Default string
	// Limits are each tier's limits; all must admit, as a route's.
	Limits map[string][]ratelimit.Limit
	// Charged are each tier's charged limits (nil when none has any).
	Charged map[string][]*ChargedLimit
}

// TierAttribute names the one request attribute holding the caller's tier,
// read as the identity chain reads the source of the same name. Exactly one
// field is set.
type TierAttribute struct {
	// Header is a request header set by a trusted filter (lower case);
	// repeated lines are joined by commas, as Envoy joins them.
	Header string
	// MetadataKey is jwt_authn's payload_in_metadata name, Claim the claim
	// read from that payload (a string or number).
	MetadataKey, Claim string
	// Extension is a key of the route's ext_authz context_extensions.
	Extension string
}

// Tier returns the tier value selects: value itself when it is a tier of
// the set, else Default. Tier names compare exactly (case-sensitive).
func (t *TierSet) Tier(value string) string {
	if _, ok := t.Limits[value]; ok {
		return value
	}
	return t.Default
}

// Tiers returns the set's tier names, sorted.
func (t *TierSet) Tiers() []string {
	out := make([]string, 0, len(t.Limits))
	for name := range t.Limits {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// tierSets reads the `tiers` section: tier sets by name.
func (d *decoder) tierSets(f field) map[string]*TierSet {
	out := map[string]*TierSet{}
	for _, kv := range d.fields(f.node, f.path) {
		if kv.key == "" {
			d.problem(kv.line, kv.path, "a tier set needs a name")
			continue
		}
		out[kv.key] = d.tierSet(kv)
	}
	return out
}

func (d *decoder) tierSet(f field) *TierSet {
	t := &TierSet{Name: f.key, Limits: map[string][]ratelimit.Limit{}}
	var def, limits *field
	var written []string // every tier written, valid or not
	hasAttr := false
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "attribute":
			hasAttr = true
			t.Attribute = d.tierAttribute(kv)
		case "default":
			def = &kv
			t.Default = d.str(kv)
		case "limits":
			limits = &kv
			written = d.tierLimits(kv, t)
		default:
			d.unknown(kv)
		}
	}
	if !hasAttr {
		d.problem(f.line, joinPath(f.path, "attribute"), "is required: where the caller's tier is read (header, jwt_claim or context_extension)")
	}
	switch {
	case limits == nil:
		d.problem(f.line, joinPath(f.path, "limits"), "is required: each tier with its limits")
	case len(written) == 0:
		d.problem(limits.line, limits.path, "must name at least one tier")
	}
	switch {
	case def == nil:
		d.problem(f.line, joinPath(f.path, "default"), "is required: the tier of callers without one")
	case len(written) > 0 && !slices.Contains(written, t.Default):
		// A default naming a tier whose limits are wrong is reported there only.
		d.problem(def.line, def.path, "%q is not a tier of this set (its tiers: %s)", t.Default, strings.Join(written, ", "))
	}
	return t
}

// tierLimits reads `limits`: tier name to its limit list. It returns the
// names written, in file order.
func (d *decoder) tierLimits(f field, t *TierSet) []string {
	var written []string
	for _, kv := range d.fields(f.node, f.path) {
		written = append(written, kv.key)
		if isNull(kv.node) {
			d.problem(kv.line, kv.path, "tier %q names no limits; give it at least one", kv.key)
			continue
		}
		specs := d.limitList(kv, inRoute)
		ok := true
		for _, s := range specs {
			ok = ok && s.ok
		}
		if ls, charged := splitCharged(specs); ok && len(specs) > 0 {
			t.Limits[kv.key] = ls
			if len(charged) > 0 {
				if t.Charged == nil {
					t.Charged = map[string][]*ChargedLimit{}
				}
				t.Charged[kv.key] = charged
			}
		}
	}
	return written
}

// tierAttribute reads `attribute`: a mapping with exactly one key.
func (d *decoder) tierAttribute(f field) TierAttribute {
	var a TierAttribute
	fs := d.fields(f.node, f.path)
	if len(fs) != 1 {
		d.problem(f.line, f.path, "an attribute is one of header, jwt_claim, context_extension")
		return a
	}
	kv := fs[0]
	switch kv.key {
	case "header":
		a.Header = d.headerName(kv)
	case "jwt_claim":
		var s IdentitySource
		d.jwtClaim(kv, &s)
		a.MetadataKey, a.Claim = s.MetadataKey, s.Claim
	case "context_extension":
		if a.Extension = d.str(kv); a.Extension == "" {
			d.problem(kv.line, kv.path, "must name a context_extensions key")
		}
	default:
		d.unknown(kv)
	}
	return a
}

// resolveTiers points each route's tier_limits at its set.
func (d *decoder) resolveTiers(h *HTTP) {
	for _, r := range h.Routes {
		ref := r.tierRef
		if ref.name == "" {
			continue
		}
		if r.Tiers = h.Tiers[ref.name]; r.Tiers == nil {
			d.problem(ref.line, ref.path, "unknown tier set %q (http.tiers defines: %s)", ref.name, strings.Join(setNames(h.Tiers), ", "))
		}
	}
}

func setNames(m map[string]*TierSet) []string {
	out := make([]string, 0, len(m))
	for name := range m {
		out = append(out, name)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// HasLimits reports whether the route has HTTP rate limits, its own or its
// tiers'.
func (r *Route) HasLimits() bool { return r != nil && (len(r.Limits) > 0 || r.Tiers != nil) }

// HasCharged reports whether the route has charged limits, its own or its
// tiers'.
func (r *Route) HasCharged() bool {
	return r != nil && (len(r.Charged) > 0 || (r.Tiers != nil && len(r.Tiers.Charged) > 0))
}

// ChargedFor returns the charged limits of a caller whose tier attribute
// holds value, and its tier, as LimitsFor does for counted limits.
func (r *Route) ChargedFor(value string) ([]*ChargedLimit, string) {
	if r.Tiers == nil {
		return r.Charged, ""
	}
	tier := r.Tiers.Tier(value)
	return r.Tiers.Charged[tier], tier
}

// LimitsFor returns the limits of a caller whose tier attribute holds
// value, and the tier they belong to: the route's own limits and "" for a
// route without tier_limits, else the limits of the tier value selects (the
// set's default for a missing or unknown value).
func (r *Route) LimitsFor(value string) ([]ratelimit.Limit, string) {
	if r.Tiers == nil {
		return r.Limits, ""
	}
	tier := r.Tiers.Tier(value)
	return r.Tiers.Limits[tier], tier
}
