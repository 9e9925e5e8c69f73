package policy

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// hostPattern is one entry of a route's hosts, lower-cased at load so that
// matching a request costs a few string comparisons and no allocation.
type hostPattern struct {
	// name is the host name, or for a wildcard the suffix after the `*`,
	// dot included (".example.com").
	name     string
	wildcard bool
	// port is "" when the pattern has none: the request's port is ignored.
	port string
}

// matches reports whether a request host, already split by splitHost,
// matches the pattern. A wildcard needs at least one character (one label)
// before its suffix, so "*.example.com" does not match "example.com".
func (p hostPattern) matches(name, port string) bool {
	if p.port != "" && p.port != port {
		return false
	}
	if !p.wildcard {
		return equalLower(name, p.name)
	}
	n := len(name) - len(p.name)
	return n > 0 && name[n-1] != '.' && equalLower(name[n:], p.name)
}

// equalLower reports whether s equals lower, a lower-case pattern, ignoring
// ASCII case only: strings.EqualFold's Unicode folding would let a
// non-ASCII host (the Kelvin sign for k) match an ASCII pattern.
func equalLower(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// matchHost reports whether a split request host matches one of patterns;
// no patterns match every host.
func matchHost(patterns []hostPattern, name, port string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p.matches(name, port) {
			return true
		}
	}
	return false
}

// splitHost splits a request's host (the Host header or :authority) into
// its name and port ("" when absent). An IPv6 literal keeps its brackets;
// one trailing dot (an absolute DNS name) is dropped, since it names the
// same host.
func splitHost(host string) (name, port string) {
	name = host
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i >= 0 {
			name = host[:i+1]
			if rest := host[i+1:]; strings.HasPrefix(rest, ":") {
				port = rest[1:]
			}
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 {
		name, port = host[:i], host[i+1:]
	}
	return strings.TrimSuffix(name, "."), port
}

// parseHostPattern parses one configured pattern: a host name or IP, an
// optional :port, and optionally a leading "*." wildcard. The error
// message says what is wrong with it.
func parseHostPattern(s string) (hostPattern, string) {
	switch {
	case s == "":
		return hostPattern{}, "must not be empty (omit hosts to match every host)"
	case s == "*" || strings.HasPrefix(s, "*:"):
		return hostPattern{}, "is a bad pattern: a lone * is not a pattern (omit hosts to match every host)"
	case strings.ContainsAny(s, " \t\r\n\v\f"):
		return hostPattern{}, "must not contain whitespace"
	case strings.ContainsAny(s, "/?#@"):
		return hostPattern{}, "is a URL, want a host name with an optional :port"
	}
	s = strings.ToLower(s)
	name, port := splitHost(s)
	if strings.HasPrefix(s, "[") && !strings.HasSuffix(s, "]") && !strings.Contains(s, "]:") {
		return hostPattern{}, "is a bad IPv6 literal"
	}
	if strings.HasSuffix(s, ":") || (port != "" && !validPort(port)) {
		return hostPattern{}, "has a bad port (want 1-65535)"
	}
	p := hostPattern{name: name, port: port}
	if rest, ok := strings.CutPrefix(name, "*"); ok {
		if !strings.HasPrefix(rest, ".") {
			return hostPattern{}, "is a bad pattern: a wildcard must be a whole leading label, as in *.example.com"
		}
		p.name, p.wildcard = rest, true
	}
	if strings.HasSuffix(s, ".") || strings.Contains(s, ".:") {
		return hostPattern{}, "must not end with a dot"
	}
	if msg := checkHostName(p.name, p.wildcard); msg != "" {
		return hostPattern{}, msg
	}
	return p, ""
}

// checkHostName checks the name part of a pattern (after any wildcard).
func checkHostName(name string, wildcard bool) string {
	if strings.HasPrefix(name, "[") {
		if wildcard || !strings.HasSuffix(name, "]") || len(name) < 3 || strings.Trim(name[1:len(name)-1], "0123456789abcdef:.") != "" {
			return "is a bad IPv6 literal"
		}
		return ""
	}
	labels := name
	if wildcard {
		if labels = name[1:]; labels == "" { // the suffix starts with the dot after "*"
			return "is a bad pattern: a wildcard needs a domain after *."
		}
	}
	if strings.Contains(name, "*") {
		return "is a bad pattern: * is only allowed as a whole leading label (*.example.com)"
	}
	for _, l := range strings.Split(labels, ".") {
		if l == "" {
			return "is a bad host name: empty label"
		}
		if strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return "is a bad host name: want letters, digits, - and _ in dot-separated labels"
		}
	}
	return ""
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strings.Trim(s, "0123456789") == ""
}

// hosts reads a route's hosts: each pattern is validated and lower-cased,
// and a pattern listed twice (case-insensitively) is an error.
func (d *decoder) hosts(f field) ([]string, []hostPattern) {
	var names []string
	var pats []hostPattern
	seen := map[string]string{}
	for _, item := range d.items(f) {
		if item.node.Kind != yaml.ScalarNode {
			d.str(item) // reports the wrong kind
			continue
		}
		s := d.str(item)
		p, msg := parseHostPattern(s)
		if msg != "" {
			d.problem(item.line, item.path, "%s %s", describe(item.node), msg)
			continue
		}
		s = strings.ToLower(s)
		if first, dup := seen[s]; dup {
			d.problem(item.line, item.path, "host %q is already listed at %s", s, first)
			continue
		}
		seen[s] = item.path
		names = append(names, s)
		pats = append(pats, p)
	}
	return names, pats
}
