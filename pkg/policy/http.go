package policy

import (
	"regexp"
	"strings"
)

// http reads the `http` section: tenant source, exemptions and routes.
func (d *decoder) http(f field) *HTTP {
	h := &HTTP{}
	var identity, tenant *field
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "identity":
			identity = &kv
			h.Identity = d.identity(kv)
		case "tenant":
			tenant = &kv
			d.tenant(kv, &h.Tenant)
		case "exempt":
			d.exempt(kv, &h.Exempt)
		case "routes":
			h.Routes = d.routes(kv)
		case "header_style":
			h.HeaderStyle = d.headerStyle(kv)
		case "tiers":
			h.Tiers = d.tierSets(kv)
		default:
			d.unknown(kv)
		}
	}
	d.resolveTiers(h)
	switch {
	case identity != nil && tenant != nil:
		d.problem(tenant.line, tenant.path, "set identity or tenant, not both (tenant is the older form of identity)")
	case identity == nil:
		h.Identity = legacyIdentity(h.Tenant)
	}
	for _, r := range h.Routes {
		if r.HeaderStyle == "" {
			r.HeaderStyle = h.HeaderStyle.OrDefault()
		}
		d.keyHeaderNotIdentity(r, h.Identity)
	}
	return h
}

// keyHeaderNotIdentity refuses a route whose key_header is a header the
// identity chain reads: the key would be the same on every request of a
// caller, and each request after the first would get the first's reply.
func (d *decoder) keyHeaderNotIdentity(r *Route, id Identity) {
	if r.Idempotency == nil || r.Idempotency.keyHeaderLine == 0 {
		return
	}
	for _, s := range id.Sources {
		if s.Header != "" && s.Header == r.Idempotency.KeyHeader {
			d.problem(r.Idempotency.keyHeaderLine, r.Idempotency.keyHeaderPath, "%s names the caller (http.identity): a key must name one operation", s.Header)
			return
		}
	}
}

func (d *decoder) tenant(f field, t *TenantSource) {
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "header":
			t.Header = d.headerName(kv)
		case "principal":
			t.Principal = d.boolean(kv)
		case "context_extension":
			t.ContextExtension = d.str(kv)
		case "default":
			t.Default = d.str(kv)
		default:
			d.unknown(kv)
		}
	}
}

func (d *decoder) exempt(f field, e *Exemptions) {
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "path_prefixes":
			for _, item := range d.items(kv) {
				if p := d.str(item); strings.HasPrefix(p, "/") {
					e.PathPrefixes = append(e.PathPrefixes, p)
				} else {
					d.problem(item.line, item.path, "must start with /, got %s", describe(item.node))
				}
			}
		case "headers":
			e.Headers = d.headerValues(kv)
		case "principals":
			e.Principals = d.strs(kv)
		default:
			d.unknown(kv)
		}
	}
}

// headerValues reads a name: value mapping, lower-casing the names.
func (d *decoder) headerValues(f field) map[string]string {
	fs := d.fields(f.node, f.path)
	out := make(map[string]string, len(fs))
	for _, kv := range fs {
		name := strings.ToLower(kv.key)
		if !isToken(name) {
			d.problem(kv.line, kv.path, "%q is not a valid header name", kv.key)
			continue
		}
		if _, dup := out[name]; dup {
			d.problem(kv.line, kv.path, "header %q is listed twice (names are case-insensitive)", name)
		}
		out[name] = d.str(kv)
	}
	return out
}

func (d *decoder) routes(f field) []*Route {
	var out []*Route
	seen := map[string]string{}
	for _, item := range d.items(f) {
		r := d.route(item)
		if r.Name == "" {
			continue
		}
		if first, dup := seen[r.Name]; dup {
			d.problem(item.line, joinPath(item.path, "name"), "route %q is already defined at %s", r.Name, first)
		}
		seen[r.Name] = item.path
		out = append(out, r)
	}
	return out
}

func (d *decoder) route(f field) *Route {
	r := &Route{}
	has := map[string]bool{}
	for _, kv := range d.fields(f.node, f.path) {
		has[kv.key] = true
		switch kv.key {
		case "name":
			r.Name = d.str(kv)
		case "path_prefix":
			if r.pathPrefix = d.str(kv); r.pathPrefix == "" {
				d.problem(kv.line, kv.path, "must not be empty (use / to match every path)")
			}
		case "path_regex":
			r.pathRegex = d.regex(kv)
		case "hosts":
			r.Hosts, r.hosts = d.hosts(kv)
		case "methods":
			r.Methods = d.methods(kv)
		case "rate_limits":
			r.Limits, r.Charged = splitCharged(d.limitList(kv, inRoute))
		case "tier_limits":
			if r.tierRef = (ref{name: d.str(kv), path: kv.path, line: kv.line}); r.tierRef.name == "" {
				d.problem(kv.line, kv.path, "must name a tier set of http.tiers")
			}
		case "idempotency":
			r.Idempotency = d.idempotency(kv)
		case "header_style":
			r.HeaderStyle = d.headerStyle(kv)
		case "max_in_flight":
			r.MaxInFlight = d.maxInFlight(kv)
		case "in_flight_ttl":
			r.InFlightTTL = d.inFlightTTL(kv)
		default:
			d.unknown(kv)
		}
	}
	d.inFlightDefaults(r, f, has)
	if r.Name == "" {
		d.problem(f.line, joinPath(f.path, "name"), "is required")
	}
	if has["rate_limits"] && has["tier_limits"] {
		d.problem(r.tierRef.line, r.tierRef.path, "set rate_limits or tier_limits, not both (write a limit every tier shares in each tier)")
	}
	if has["path_prefix"] == has["path_regex"] {
		d.problem(f.line, f.path, "set exactly one of path_prefix and path_regex")
	}
	return r
}

func (d *decoder) regex(f field) *regexp.Regexp {
	re, err := regexp.Compile(d.str(f))
	if err != nil {
		d.problem(f.line, f.path, "bad regular expression: %v", err)
		return nil
	}
	return re
}

// methods reads a list of HTTP methods, upper-cased.
func (d *decoder) methods(f field) []string {
	var out []string
	for _, item := range d.items(f) {
		m := strings.ToUpper(d.str(item))
		if !isToken(m) {
			d.problem(item.line, item.path, "%s is not an HTTP method", describe(item.node))
			continue
		}
		out = append(out, m)
	}
	return out
}

// headerName reads one header name, lower-cased as Envoy passes them.
func (d *decoder) headerName(f field) string {
	name := strings.ToLower(d.str(f))
	if !isToken(name) {
		d.problem(f.line, f.path, "%s is not a valid header name", describe(f.node))
	}
	return name
}

// isToken reports whether s is an RFC 9110 token (a header name or method).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
