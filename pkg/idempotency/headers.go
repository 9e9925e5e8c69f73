package idempotency

import "strings"

// Limits on the headers kept with a stored response, so that a hostile or
// buggy upstream cannot make one record arbitrarily large.
const (
	// MaxReplayHeaders is the most header fields stored per response.
	MaxReplayHeaders = 64
	// MaxHeaderValueLen is the longest header value stored.
	MaxHeaderValueLen = 8 << 10
)

// neverReplayed lists response headers that are never stored or replayed,
// whatever a route's allow-list says: they carry credentials or cookies of
// the first caller, describe the first connection (hop-by-hop), or belong
// to the current response (Date, Content-Length, rate-limit state, a
// cache's X-Cache-Lookup, which a replay sets itself when asked to).
var neverReplayed = map[string]bool{
	"set-cookie": true, "set-cookie2": true, "cookie": true,
	"authorization": true, "proxy-authorization": true,
	"www-authenticate": true, "proxy-authenticate": true,
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "te": true, "trailer": true, "upgrade": true,
	"date": true, "content-length": true, "age": true,
	"ratelimit": true, "ratelimit-policy": true, "retry-after": true,
	"idempotent-replayed": true, "idempotency-key": true, "x-cache-lookup": true,
	"x-request-id": true, "traceparent": true, "tracestate": true, "b3": true,
	"alt-svc": true, "server": true, "via": true,
}

// neverReplayedPrefixes extends neverReplayed to families of names.
var neverReplayedPrefixes = []string{
	":", "x-envoy-", "x-ratelimit-", "ratelimit-", "x-b3-", "x-amzn-trace-",
}

// alwaysReplayed headers describe the stored body itself; replaying the
// body without them would change its meaning (a gzip body without
// Content-Encoding is garbage to the client).
var alwaysReplayed = map[string]bool{"content-type": true, "content-encoding": true}

// NeverReplayed reports whether a header named name (any case) is excluded
// from storage and replay regardless of configuration.
func NeverReplayed(name string) bool {
	n := strings.ToLower(name)
	if neverReplayed[n] {
		return true
	}
	for _, p := range neverReplayedPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// ReplayHeaders returns the headers of hs that may be stored and replayed,
// names lower-cased, order kept: a header is kept when allow(name) is true
// (name lower-cased) or it is Content-Type/Content-Encoding, it is not
// NeverReplayed, and its name and value are valid HTTP field syntax. At
// most MaxReplayHeaders are kept; longer values are dropped. allow may be
// nil (only the always-replayed headers are kept).
func ReplayHeaders(hs []Header, allow func(name string) bool) []Header {
	var out []Header
	for _, h := range hs {
		if len(out) == MaxReplayHeaders {
			break
		}
		name := strings.ToLower(h.Name)
		if !ValidHeaderName(name) || NeverReplayed(name) || !ValidHeaderValue(h.Value) {
			continue
		}
		if !alwaysReplayed[name] && (allow == nil || !allow(name)) {
			continue
		}
		out = append(out, Header{Name: name, Value: h.Value})
	}
	return out
}

// ValidHeaderName reports whether name is a non-empty RFC 9110 token.
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTchar(name[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ValidHeaderValue reports whether v may be sent as a field value: no
// control characters other than horizontal tab (so no CR, LF or NUL), no
// leading or trailing whitespace, at most MaxHeaderValueLen bytes.
// obs-text (bytes 0x80-0xFF) is allowed.
func ValidHeaderValue(v string) bool {
	if len(v) > MaxHeaderValueLen {
		return false
	}
	if v != "" && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
