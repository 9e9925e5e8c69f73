package envoy

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/extauthz/extauthz/pkg/policy"
)

// StyledHeaders renders the rate-limit header fields of one answer in the
// policy's style (see policy.HeaderStyle); Retry-After goes with a denial
// in every style.
func StyledHeaders(style policy.HeaderStyle, qs []Quota, over bool, retry time.Duration) []*corev3.HeaderValue {
	switch style {
	case policy.HeaderStyleRateLimit:
		return draft03Headers(ratelimitTrio, qs, over, retry)
	case policy.HeaderStyleXRateLimit:
		return draft03Headers(xRatelimitTrio, qs, over, retry)
	case policy.HeaderStyleNone:
		return rateLimitHeaders(nil, over, retry)
	}
	return rateLimitHeaders(qs, over, retry)
}

// draft03Headers renders the three fields of
// draft-ietf-httpapi-ratelimit-headers-03, the shape Envoy's
// DRAFT_VERSION_03 option gives them, under a prefix (keys are the three
// names with it):
//
//	<prefix>limit: 10, 10;w=60;name="per-tenant", 1000;w=86400;name="daily"
//	<prefix>remaining: 3
//	<prefix>reset: 17
//
// limit, remaining and reset describe the limit closest to denying (the
// fewest remaining; among those the longest wait), followed in limit by a
// quota policy per limit. Every value is a Structured Field (a List, then
// two Integers).
func draft03Headers(keys [3]string, qs []Quota, over bool, retry time.Duration) []*corev3.HeaderValue {
	var f fields
	if len(qs) > 0 {
		t := qs[0]
		for _, q := range qs[1:] {
			if q.Remaining < t.Remaining || (q.Remaining == t.Remaining && q.Reset > t.Reset) {
				t = q
			}
		}
		f.begin(1, qs) // limit's items; remaining and reset fit in the slack
		f.item()
		f.buf = appendInt(f.buf, t.Quota)
		f.end()
		for _, q := range qs {
			f.item()
			f.buf = appendInt(f.buf, q.Quota)
			f.buf = appendParam(f.buf, ";w=", max(CeilSeconds(q.Window), 1))
			f.buf = appendSFString(append(f.buf, ";name="...), q.Name)
			f.end()
		}
		f.field(keys[0])
		f.buf = appendInt(f.buf, t.Remaining)
		f.field(keys[1])
		f.buf = appendInt(f.buf, CeilSeconds(t.Reset))
		f.field(keys[2])
	}
	f.retryAfter(over, retry)
	return f.headers()
}

// The draft-03 trio's names under each prefix.
var (
	ratelimitTrio  = [3]string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}
	xRatelimitTrio = [3]string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
)
