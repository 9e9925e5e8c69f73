package rls

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// respond builds the response from the plan and the store's decisions, and
// sets the outcome of every counted descriptor. mode adds the global
// shadow and quota modes.
func respond(items []planned, decisions []ratelimit.Decision, mode rlsMode) *rlsv3.RateLimitResponse {
	resp, room := newResponse(len(items))
	var quotaRoom [4]envoy.Quota // the header quotas of a few limits, on the stack
	quotas := quotaRoom[:0]
	var v verdict
	for i := range items {
		it := &items[i]
		if !it.counted() {
			resp.Statuses[i] = uncountedStatus(it.outcome)
			// Globally, every descriptor but an unlimited one is a quota
			// descriptor, matched or not (envoyproxy/ratelimit counts them so).
			if mode.quota && it.outcome != envoy.OutcomeUnlimited && it.outcome != OutcomeRefunded {
				v.quotaTotal++
			}
			continue
		}
		var dec ratelimit.Decision
		if it.blocked {
			dec = blockedDecision(it.limits[0])
		} else {
			dec = decisions[it.batch]
		}
		resp.Statuses[i] = v.add(it, dec, mode.quota || it.quota, room)
		room = nil // it holds one status
		if !it.shadow && !it.refund {
			quotas = appendQuotas(quotas, it, dec)
		}
	}
	over := v.over()
	if over && mode.shadow {
		// Global shadow mode: counted and reported per descriptor as usual,
		// but the request is admitted (as envoyproxy/ratelimit's SHADOW_MODE).
		over = false
		for i := range items {
			if items[i].outcome == envoy.OutcomeOverLimit {
				items[i].outcome = envoy.OutcomeShadow
			}
		}
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	resp.ResponseHeadersToAdd = envoy.StyledHeaders(mode.style, quotas, over, v.retryAfter())
	return resp
}

// countedStatus is a counted descriptor's status and its two sub-messages, which
// go together: one allocation.
type countedStatus struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// oneResponse is the response to a one-descriptor request, the common
// case, with its status list and the status of a counted descriptor: one
// allocation where three would be.
type oneResponse struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status   countedStatus
}

// newResponse returns a response with room for n statuses, and for a
// one-descriptor request the room of its counted status (nil otherwise).
func newResponse(n int) (*rlsv3.RateLimitResponse, *countedStatus) {
	if n == 1 {
		o := new(oneResponse)
		o.resp.OverallCode, o.resp.Statuses = rlsv3.RateLimitResponse_OK, o.statuses[:]
		return &o.resp, &o.status
	}
	return &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}, nil
}

// verdict gathers the overall answer across the counted descriptors.
type verdict struct {
	denied bool          // a descriptor not in quota mode is over its limit
	retry  time.Duration // the longest wait among those
	// quotaTotal counts the quota-mode descriptors, quotaOver those over
	// their limit, quotaRetry the shortest wait among those (when all are
	// over, the first to free up admits the request).
	quotaTotal, quotaOver int
	quotaRetry            time.Duration
}

// add decides one counted descriptor's status and outcome and tallies it.
// The status is built in room when given, else in a countedStatus of its own.
func (v *verdict) add(it *planned, dec ratelimit.Decision, quotaMode bool, room *countedStatus) *rlsv3.RateLimitResponse_DescriptorStatus {
	t := envoy.Tightest(dec)
	res := dec.Results[t]
	a := room
	if a == nil {
		a = new(countedStatus)
	}
	setCurrentLimit(&a.limit, statusName(it, t), it.limits[t])
	a.reset.Seconds, a.reset.Nanos = splitDuration(res.ResetAfter)
	st := &a.st
	st.Code, st.CurrentLimit, st.DurationUntilReset = rlsv3.RateLimitResponse_OK, &a.limit, &a.reset
	st.LimitRemaining = clampUint32(res.Remaining)
	if it.refund { // never denies, nor counts towards a quota verdict
		it.outcome = OutcomeRefunded
		return st
	}
	if quotaMode {
		v.quotaTotal++
	}
	switch {
	case dec.Allowed:
		it.outcome = envoy.OutcomeOK
	case it.shadow:
		it.outcome = envoy.OutcomeShadow
	default:
		it.outcome = envoy.OutcomeOverLimit
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		// Over the limit, the wait until the descriptor admits again:
		// Envoy's enable_retry_after_header makes Retry-After of it, which
		// must agree with ours (for a fixed window both are its end, as
		// the peer's; a token bucket refills sooner than it empties).
		if res.RetryAfter > 0 {
			a.reset.Seconds, a.reset.Nanos = splitDuration(res.RetryAfter)
		}
		if !quotaMode {
			v.denied, v.retry = true, max(v.retry, res.RetryAfter)
		} else if v.quotaOver++; v.quotaOver == 1 || res.RetryAfter < v.quotaRetry {
			v.quotaRetry = res.RetryAfter
		}
	}
	return st
}

// over reports whether the request is denied: a descriptor not in quota
// mode is over its limit, or every quota-mode descriptor is.
func (v *verdict) over() bool {
	return v.denied || (v.quotaTotal > 0 && v.quotaOver == v.quotaTotal)
}

// retryAfter is the wait Retry-After reports when the request is denied.
func (v *verdict) retryAfter() time.Duration {
	if v.quotaTotal > 0 && v.quotaOver == v.quotaTotal {
		return max(v.retry, v.quotaRetry)
	}
	return v.retry
}

// statusName is the name current_limit reports: the limit's name as the
// policy writes it, empty when it names none and for an override, as
// envoyproxy/ratelimit leaves it (Envoy appends a non-empty name to
// X-RateLimit-Limit, so a made-up one would change that header). The
// RateLimit header fields need a name and use it.name instead.
func statusName(it *planned, i int) string {
	if it.override {
		return ""
	}
	return it.limits[i].Name
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
	if outcome == envoy.OutcomeUnlimited {
		st.LimitRemaining = math.MaxUint32
	}
	return st
}

// appendQuotas adds one header quota per limit of a counted descriptor.
func appendQuotas(qs []envoy.Quota, it *planned, dec ratelimit.Decision) []envoy.Quota {
	for j, l := range it.limits {
		r := dec.Results[j]
		q := envoy.Quota{Name: it.name(j), Quota: r.Limit, Window: l.Period, Remaining: r.Remaining, Reset: r.ResetAfter}
		if q.Quota <= 0 {
			q.Quota = l.Requests
		}
		switch {
		case !r.Allowed:
			// The wait before this limit admits the request again; for a
			// token bucket that is sooner than a full refill, and
			// Retry-After must not point earlier than t.
			q.Reset = r.RetryAfter
		case !dec.Allowed:
			// This limit admitted but another denied, so nothing was
			// charged: its Remaining assumed the hits were.
			q.Remaining = min(r.Remaining+it.hits, max(q.Quota, r.Remaining))
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

// setCurrentLimit fills a zero rl with a limit as Envoy's RateLimit: the
// longest unit that divides the period, times unit_multiplier when that is
// not 1 (10s is SECOND x 10, 2h is HOUR x 2). Periods are whole seconds here; a
// sub-second or fractional period is rounded up to whole seconds, since the
// proto cannot say less than one second.
func setCurrentLimit(rl *rlsv3.RateLimitResponse_RateLimit, name string, l ratelimit.Limit) {
	secs := max(envoy.CeilSeconds(l.Period), 1)
	rl.Name, rl.RequestsPerUnit = name, clampUint32(l.Requests)
	for _, u := range units {
		if secs%u.seconds == 0 {
			rl.Unit = u.unit
			if n := secs / u.seconds; n != 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(clampUint32(n))
			}
			return
		}
	}
}

// splitDuration is d as google.protobuf.Duration's fields (what
// durationpb.New computes, without allocating the message).
func splitDuration(d time.Duration) (int64, int32) {
	return int64(d / time.Second), int32(d % time.Second)
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
