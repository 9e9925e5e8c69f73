package policy

import (
	"slices"
	"strings"
)

// Route returns the first route that matches the request, or nil. The path
// is matched without its query string.
func (h *HTTP) Route(method, path string) *Route {
	if h == nil {
		return nil
	}
	path = stripQuery(path)
	for _, r := range h.Routes {
		if r.matches(method, path) {
			return r
		}
	}
	return nil
}

// Matches reports whether the route applies to a request: its method is
// listed, case-insensitively (or no method is) and its path, without the query string, has the
// route's prefix (a plain string prefix, as Envoy's prefix match) or matches
// its regular expression (RE2, anchored only where the pattern says so).
func (r *Route) Matches(method, path string) bool {
	return r != nil && r.matches(method, stripQuery(path))
}

func (r *Route) matches(method, path string) bool {
	if len(r.Methods) > 0 && !containsFold(r.Methods, method) {
		return false
	}
	if r.pathRegex != nil {
		return r.pathRegex.MatchString(path)
	}
	return r.pathPrefix != "" && strings.HasPrefix(path, r.pathPrefix)
}

// IsExempt reports whether no HTTP rate limit applies to a request: its path
// (without the query string) starts with an exempt prefix, one of its
// headers has an exempt value, or its principal is exempt. Header names in
// headers must be lower-case, as Envoy passes them. (It is not named Exempt
// because that is the name of the field it reads.)
func (h *HTTP) IsExempt(path string, headers map[string]string, principal string) bool {
	if h == nil {
		return false
	}
	path = stripQuery(path)
	for _, p := range h.Exempt.PathPrefixes {
		if strings.HasPrefix(path, p) {
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
