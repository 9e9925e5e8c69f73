package envoy

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Response header names (lower case: Envoy and HTTP/2 carry them so).
const (
	HeaderRateLimitPolicy = "ratelimit-policy"
	HeaderRateLimit       = "ratelimit"
	HeaderRetryAfter      = "retry-after"
)

// quota is one limit as the RateLimit header fields describe it.
type quota struct {
	name      string
	quota     int64
	window    time.Duration
	remaining int64
	reset     time.Duration
}

// rateLimitHeaders renders the IETF RateLimit header fields
// (draft-ietf-httpapi-ratelimit-headers-10, Structured Field Lists):
//
//	RateLimit-Policy: "per-tenant";q=100;w=60, "daily";q=10000;w=86400
//	RateLimit: "per-tenant";r=42;t=17, "daily";r=9120;t=51234
//
// with one item per counted (non-shadow) limit of the request, in
// descriptor order, so a client sees every limit it is subject to rather
// than a single "tightest" one; identical items are sent once. t is the
// seconds until the limit resets, or, for a limit that denied the request,
// until it would admit it again. Over the limit, Retry-After carries the
// longest wait among the denying descriptors, in seconds rounded up.
func rateLimitHeaders(qs []quota, over bool, retry time.Duration) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	if len(qs) > 0 {
		policies := make([]string, 0, len(qs))
		states := make([]string, 0, len(qs))
		for _, q := range qs {
			name := sfString(q.name)
			policies = append(policies, name+";q="+itoa(q.quota)+";w="+itoa(max(ceilSeconds(q.window), 1)))
			states = append(states, name+";r="+itoa(q.remaining)+";t="+itoa(ceilSeconds(q.reset)))
		}
		hs = append(hs,
			&corev3.HeaderValue{Key: HeaderRateLimitPolicy, Value: strings.Join(dedupe(policies), ", ")},
			&corev3.HeaderValue{Key: HeaderRateLimit, Value: strings.Join(dedupe(states), ", ")},
		)
	}
	if over {
		hs = append(hs, &corev3.HeaderValue{Key: HeaderRetryAfter, Value: itoa(ceilSeconds(retry))})
	}
	return hs
}

// maxSFInteger is the largest Structured Field Integer (RFC 9651 §3.3.1:
// at most 15 digits). Limits are int64 in the policy, and a recipient must
// ignore a whole field with one out-of-range parameter, so values are
// clamped to the range rather than written as they are.
const maxSFInteger = 999_999_999_999_999

// itoa renders n as a non-negative sf-integer, clamped to its range.
func itoa(n int64) string { return strconv.FormatInt(min(max(n, 0), maxSFInteger), 10) }

// sfString renders s as a Structured Field string (RFC 9651 §3.3.3): only
// printable ASCII is allowed, so anything else becomes '_', and '"' and
// '\' are escaped.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// dedupe drops repeated items, keeping the first of each.
func dedupe(items []string) []string {
	seen := make(map[string]bool, len(items))
	out := items[:0]
	for _, s := range items {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
