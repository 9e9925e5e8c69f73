package envoy

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/extauthz/extauthz/pkg/policy"
)

// QuotaUnitConcurrent is the RateLimit-Policy quota unit ("qu", IETF
// RateLimit header fields draft) of an in-flight limit: the quota counts
// requests running at once, not requests per window.
const QuotaUnitConcurrent = "concurrent-requests"

// InFlightSuffix names a route's in-flight limit in RateLimit-Policy:
// "<route>-in-flight", apart from the route's rate limits.
const InFlightSuffix = "-in-flight"

// InFlightHeaders are the header fields of a request refused by route's
// max_in_flight of limit: RateLimit-Policy with the concurrent-requests
// unit and no window (a concurrency has none), unless style is
// HeaderStyleNone, and always Retry-After, at least 1 second (the slot
// frees when a request ends, which no one can promise sooner).
func InFlightHeaders(style policy.HeaderStyle, route string, limit int, retry time.Duration) []*corev3.HeaderValue {
	secs := max(CeilSeconds(retry), 1)
	hs := []*corev3.HeaderValue{{Key: "Retry-After", Value: strconv.FormatInt(secs, 10)}}
	if style == policy.HeaderStyleNone {
		return hs
	}
	b := appendSFString(nil, route+InFlightSuffix)
	b = appendParam(b, ";q=", int64(limit))
	b = append(b, `;qu="`+QuotaUnitConcurrent+`"`...)
	return append([]*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: string(b)}}, hs...)
}
