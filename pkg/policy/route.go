package policy

import (
	"slices"
	"strings"
)

// Route returns the first route that matches the request, or nil. host is
// the request's Host or :authority ("" when unknown: only routes without
// hosts match then); the path is matched in its canonical form (see
// canonicalPath), path_prefix ignoring ASCII case.
func (h *HTTP) Route(host, method, path string) *Route {
	if h == nil {
		return nil
	}
	name, port := splitHost(host)
	path = canonicalPath(path)
	for _, r := range h.Routes {
		if r.matches(name, port, method, path) {
			return r
		}
	}
	return nil
}

// Matches reports whether the route applies to a request: its host matches
// one of the route's hosts (or the route lists none), its method is listed,
// case-insensitively (or no method is), and its path, without the query
// string, has the route's prefix (a plain string prefix, as Envoy's prefix
// match) or matches its regular expression (RE2, anchored only where the
// pattern says so).
//
// Hosts compare case-insensitively; a port in host is ignored unless the
// pattern has one, and a trailing dot is ignored; "*.example.com" matches
// any name ending in ".example.com" with at least one label before it.
func (r *Route) Matches(host, method, path string) bool {
	if r == nil {
		return false
	}
	name, port := splitHost(host)
	return r.matches(name, port, method, canonicalPath(path))
}

func (r *Route) matches(hostName, hostPort, method, path string) bool {
	if len(r.Methods) > 0 && !containsFold(r.Methods, method) {
		return false
	}
	if !matchHost(r.hosts, hostName, hostPort) {
		return false
	}
	if r.pathRegex != nil {
		return r.pathRegex.MatchString(path)
	}
	return r.pathPrefix != "" && hasPrefixFold(path, r.pathPrefix)
}

// IsExempt reports whether no HTTP rate limit applies to a request: its path
// (without the query string) starts with an exempt prefix and is already
// canonical (no `//`, dot segments, escaped slashes or unreserved
// characters: `/healthz/../orders` is not exempt), one of its
// headers has an exempt value, or its principal is exempt. Header names in
// headers must be lower-case, as Envoy passes them. (It is not named Exempt
// because that is the name of the field it reads.)
func (h *HTTP) IsExempt(path string, headers map[string]string, principal string) bool {
	if h == nil {
		return false
	}
	path = stripQuery(path)
	canonical := path == canonicalPath(path)
	for _, p := range h.Exempt.PathPrefixes {
		if canonical && strings.HasPrefix(path, p) {
			return true
		}
	}
	for name, want := range h.Exempt.Headers {
		if got, ok := headers[name]; ok && got == want {
			return true
		}
	}
	return principal != "" && slices.Contains(h.Exempt.Principals, principal)
}

func stripQuery(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i]
	}
	return path
}

// containsFold reports whether list holds s, ignoring ASCII case.
func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
