package policy

import (
	"path"
	"strings"
)

// canonicalPath is the path an upstream could take a request target for,
// at its most lenient: query and fragment dropped, %2F and %5C and every
// percent-escaped unreserved character decoded, backslashes read as
// slashes, runs of slashes merged and dot segments resolved (a trailing
// slash kept). Routes are chosen on it, so `//orders`, `/x/../orders` or
// `/%2Forders` cannot step around the route of `/orders` (and its limits
// and Idempotency-Key handling) on an upstream that normalises them.
func canonicalPath(p string) string {
	p = stripQuery(p)
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	if !strings.HasPrefix(p, "/") {
		return p // not origin-form ("*", or what Envoy rejects): matches no prefix
	}
	p = strings.ReplaceAll(decodeUnreserved(p), `\`, "/")
	trailing := strings.HasSuffix(p, "/")
	c := path.Clean(p)
	if trailing && c != "/" {
		c += "/"
	}
	return c
}

// decodeUnreserved decodes the percent-escapes an upstream may read as the
// character itself: unreserved characters (RFC 3986) and the separators
// '/' and '\'. Other escapes are kept as they are.
func decodeUnreserved(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			if c, ok := unhex2(p[i+1], p[i+2]); ok && decodable(c) {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func decodable(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~/\\", c) >= 0
}

func unhex2(a, b byte) (byte, bool) {
	x, ok1 := unhex(a)
	y, ok2 := unhex(b)
	return x<<4 | y, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// hasPrefixFold reports whether s starts with prefix, ignoring ASCII case:
// an upstream that routes /ORDERS to /orders must not lose the route.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
