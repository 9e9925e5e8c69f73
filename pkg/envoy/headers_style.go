package envoy

import (
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/extauthz/extauthz/pkg/policy"
)

// styledHeaders renders the rate-limit header fields of one answer in the
// policy's style (see policy.HeaderStyle); Retry-After goes with a denial
// in every style.
func styledHeaders(style policy.HeaderStyle, qs []quota, over bool, retry time.Duration) []*corev3.HeaderValue {
	switch style {
	case policy.HeaderStyleRateLimit:
		return draft03Headers("ratelimit-", qs, over, retry)
	case policy.HeaderStyleXRateLimit:
		return draft03Headers("x-ratelimit-", qs, over, retry)
	case policy.HeaderStyleNone:
		return rateLimitHeaders(nil, over, retry)
	}
	return rateLimitHeaders(qs, over, retry)
}

// draft03Headers renders the three fields of
// draft-ietf-httpapi-ratelimit-headers-03, the shape Envoy's
// DRAFT_VERSION_03 option gives them, under prefix:
//
//	<prefix>limit: 10, 10;w=60;name="per-tenant", 1000;w=86400;name="daily"
//	<prefix>remaining: 3
//	<prefix>reset: 17
//
// limit, remaining and reset describe the limit closest to denying (the
// fewest remaining; among those the longest wait), followed in limit by a
// quota policy per limit. Every value is a Structured Field (a List, then
// two Integers).
func draft03Headers(prefix string, qs []quota, over bool, retry time.Duration) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	if len(qs) > 0 {
		t := qs[0]
		for _, q := range qs[1:] {
			if q.remaining < t.remaining || (q.remaining == t.remaining && q.reset > t.reset) {
				t = q
			}
		}
		policies := []string{itoa(t.quota)}
		for _, q := range qs {
			policies = append(policies, itoa(q.quota)+";w="+itoa(max(ceilSeconds(q.window), 1))+";name="+sfString(q.name))
		}
		hs = append(hs,
			&corev3.HeaderValue{Key: prefix + "limit", Value: strings.Join(dedupe(policies), ", ")},
			&corev3.HeaderValue{Key: prefix + "remaining", Value: itoa(t.remaining)},
			&corev3.HeaderValue{Key: prefix + "reset", Value: itoa(ceilSeconds(t.reset))},
		)
	}
	return append(hs, rateLimitHeaders(nil, over, retry)...)
}
