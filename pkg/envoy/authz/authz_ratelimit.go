package authz

import (
	"context"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// httpLimitDomain is the domain part of the rate-limit keys of the HTTP
// policy's routes: ratelimit.Key(tenant, "http", [route=<name>]). RLS
// domains are separate: a descriptor domain named "http" has its own
// entries and so its own keys.
const httpLimitDomain = "http"

// limitPlan is what one request is limited by.
type limitPlan struct {
	// owner names the limits in RateLimit-Policy (LimitName) and the metric
	// rule: the route's name, or "<route>.<tier>" for a tiered route.
	owner  string
	tier   string // "" for a route without tier_limits
	limits []ratelimit.Limit
	key    string
}

// planLimits picks the limits of a caller under scope on route: the
// route's own, or those of the caller's tier. A tier's counters are keyed
// by the tier the value resolved to (never the raw value: an unknown value
// shares the default tier's counter), so a caller whose plan changes starts
// on the new tier's full budget at once.
func planLimits(scope string, route *policy.Route, in callerInput) limitPlan {
	limits, tier := route.LimitsFor(tierValue(route.Tiers, in))
	entries := []ratelimit.Entry{{Key: "route", Value: route.Name}}
	owner := route.Name
	if tier != "" {
		entries = append(entries, ratelimit.Entry{Key: "tier", Value: tier})
		owner += "." + tier
	}
	return limitPlan{owner: owner, tier: tier, limits: limits, key: ratelimit.Key(scope, httpLimitDomain, entries)}
}

// tierValue reads the caller's tier attribute as the identity chain reads
// a source of the same kind; "" when t is nil or the attribute is absent.
func tierValue(t *policy.TierSet, in callerInput) string {
	if t == nil {
		return ""
	}
	switch a := t.Attribute; {
	case a.Header != "":
		return headerValue(in.headers, a.Header)
	case a.Claim != "":
		return jwtClaim(in.metadata, a.MetadataKey, a.Claim)
	case a.Extension != "":
		return in.extensions[a.Extension]
	}
	return ""
}

// rateLimit decides the plan's limits in one all-or-nothing request. It
// returns a 429 reply when over, and the RateLimit headers to add to the
// response when within.
func (s *Authz) rateLimit(ctx context.Context, p limitPlan, style policy.HeaderStyle) (*reply, []*corev3.HeaderValue, error) {
	decs, err := s.limits.AllowBatch(ctx, []ratelimit.Request{{Key: p.key, Limits: p.limits, Hits: 1}})
	if err != nil {
		return nil, nil, err
	}
	if len(decs) != 1 || len(decs[0].Results) != len(p.limits) {
		return nil, nil, fmt.Errorf("rate-limit store answered %d decisions for 1 request", len(decs))
	}
	dec := decs[0]
	s.metrics.CountRule(envoy.APIExtAuthz, httpLimitDomain+"."+p.owner, 1, dec, false)
	qs, violated, retry := planQuotas(p, dec)
	hs := envoy.StyledHeaders(style, qs, !dec.Allowed, retry)
	if dec.Allowed {
		return nil, hs, nil
	}
	r := problemQuotaExceeded(violated)
	return withHeaders(r, hs), nil, nil
}

// planQuotas describes each limit for the RateLimit headers, the names of
// the limits that denied, and the longest wait among them.
func planQuotas(p limitPlan, dec ratelimit.Decision) ([]envoy.Quota, []string, time.Duration) {
	qs := make([]envoy.Quota, len(p.limits))
	var violated []string
	var retry time.Duration
	for i, l := range p.limits {
		r := dec.Results[i]
		q := envoy.Quota{Name: envoy.LimitName(p.owner, p.limits, i), Quota: r.Limit, Window: l.Period, Remaining: r.Remaining, Reset: r.ResetAfter}
		if q.Quota <= 0 {
			q.Quota = l.Requests
		}
		if !r.Allowed {
			// Retry-After must not point earlier than t.
			q.Reset = r.RetryAfter
			violated = append(violated, q.Name)
			retry = max(retry, r.RetryAfter)
		}
		qs[i] = q
	}
	return qs, violated, retry
}
