package envoy

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// respond builds the response from the plan and the store's decisions, and
// sets the outcome of every counted descriptor.
func respond(items []planned, decisions []ratelimit.Decision) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items)),
	}
	var quotas []quota
	var retry time.Duration
	for i := range items {
		it := &items[i]
		if !it.counted() {
			resp.Statuses[i] = uncountedStatus(it.outcome)
			continue
		}
		var dec ratelimit.Decision
		if it.blocked {
			dec = blockedDecision(it.limits[0])
		} else {
			dec = decisions[it.batch]
		}
		t := tightest(dec)
		res := dec.Results[t]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       currentLimit(it.names[t], it.limits[t]),
			LimitRemaining:     clampUint32(res.Remaining),
			DurationUntilReset: durationpb.New(res.ResetAfter),
		}
		resp.Statuses[i] = st
		switch {
		case dec.Allowed:
			it.outcome = OutcomeOK
		case it.shadow:
			it.outcome = OutcomeShadow
		default:
			it.outcome = OutcomeOverLimit
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			retry = max(retry, res.RetryAfter)
		}
		if !it.shadow {
			quotas = appendQuotas(quotas, it, dec)
		}
	}
	resp.ResponseHeadersToAdd = rateLimitHeaders(quotas, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, retry)
	return resp
}

// blockedDecision answers a block-all rule (requests_per_unit: 0): denied,
// nothing remaining. Nothing ever frees up, so clients are told to come back
// after one unit rather than at once.
func blockedDecision(l ratelimit.Limit) ratelimit.Decision {
	return ratelimit.Decision{Results: []ratelimit.Result{{RetryAfter: l.Period, ResetAfter: l.Period}}}
}

// uncountedStatus answers a descriptor that was not counted. Unlimited ones
// report the most remaining a uint32 holds, as envoyproxy/ratelimit does.
func uncountedStatus(outcome string) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if outcome == OutcomeUnlimited {
		st.LimitRemaining = math.MaxUint32
	}
	return st
}

// tightest picks the result a descriptor's status reports: when denied, the
// denying limit that frees up last (its wait is the real one); when
// admitted, the limit with the fewest remaining hits.
func tightest(dec ratelimit.Decision) int {
	best := 0
	for i, r := range dec.Results {
		b := dec.Results[best]
		if dec.Allowed {
			if r.Remaining < b.Remaining {
				best = i
			}
			continue
		}
		if !r.Allowed && (b.Allowed || r.RetryAfter > b.RetryAfter) {
			best = i
		}
	}
	return best
}

// appendQuotas adds one header quota per limit of a counted descriptor.
func appendQuotas(qs []quota, it *planned, dec ratelimit.Decision) []quota {
	for j, l := range it.limits {
		r := dec.Results[j]
		q := quota{name: it.names[j], quota: r.Limit, window: l.Period, remaining: r.Remaining, reset: r.ResetAfter}
		if q.quota <= 0 {
			q.quota = l.Requests
		}
		switch {
		case !r.Allowed:
			// The wait before this limit admits the request again; for a
			// token bucket that is sooner than a full refill, and
			// Retry-After must not point earlier than t.
			q.reset = r.RetryAfter
		case !dec.Allowed:
			// This limit admitted but another denied, so nothing was
			// charged: its Remaining assumed the hits were.
			q.remaining = min(r.Remaining+it.hits, max(q.quota, r.Remaining))
		}
		qs = append(qs, q)
	}
	return qs
}

// units are the response's units, longest first, in seconds.
var units = []struct {
	unit    rlsv3.RateLimitResponse_RateLimit_Unit
	seconds int64
}{
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 86400},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 86400},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 86400},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 86400},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, 1},
}

// currentLimit reports a limit as Envoy's RateLimit: the longest unit that
// divides the period, times unit_multiplier when that is not 1 (10s is
// SECOND x 10, 2h is HOUR x 2). Periods are whole seconds here; a
// sub-second or fractional period is rounded up to whole seconds, since the
// proto cannot say less than one second.
func currentLimit(name string, l ratelimit.Limit) *rlsv3.RateLimitResponse_RateLimit {
	secs := ceilSeconds(l.Period)
	if secs < 1 {
		secs = 1
	}
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampUint32(l.Requests)}
	for _, u := range units {
		if secs%u.seconds == 0 {
			rl.Unit = u.unit
			if n := secs / u.seconds; n != 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(clampUint32(n))
			}
			break
		}
	}
	return rl
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func clampUint32(n int64) uint32 {
	switch {
	case n < 0:
		return 0
	case n > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
