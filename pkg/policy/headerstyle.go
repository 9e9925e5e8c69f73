package policy

import "strings"

// HeaderStyle says which rate-limit header fields answer a request.
type HeaderStyle string

// The header styles; the zero value is HeaderStyleIETF.
const (
	// HeaderStyleIETF sends RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-10), one item per limit.
	HeaderStyleIETF HeaderStyle = "ietf"
	// HeaderStyleRateLimit sends RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (the draft-03 fields, as envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED names them) for the limit closest to
	// denying.
	HeaderStyleRateLimit HeaderStyle = "ratelimit"
	// HeaderStyleXRateLimit sends the same three as X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (Envoy's DRAFT_VERSION_03 names).
	HeaderStyleXRateLimit HeaderStyle = "x-ratelimit"
	// HeaderStyleNone sends no rate-limit fields (Retry-After still goes
	// with a denial): for setups where Envoy adds its own.
	HeaderStyleNone HeaderStyle = "none"
)

// OrDefault returns s, or HeaderStyleIETF for the zero value.
func (s HeaderStyle) OrDefault() HeaderStyle {
	if s == "" {
		return HeaderStyleIETF
	}
	return s
}

// headerStyle reads a header_style field.
func (d *decoder) headerStyle(f field) HeaderStyle {
	s := HeaderStyle(strings.ToLower(d.str(f)))
	switch s {
	case HeaderStyleIETF, HeaderStyleRateLimit, HeaderStyleXRateLimit, HeaderStyleNone:
		return s
	}
	d.problem(f.line, f.path, "unknown header style %s (want ietf, ratelimit, x-ratelimit or none)", describe(f.node))
	return HeaderStyleIETF
}
