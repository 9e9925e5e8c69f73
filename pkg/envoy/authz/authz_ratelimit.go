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

// rateLimit decides the route's limits for tenant in one all-or-nothing
// request. It returns a 429 reply when over, and the RateLimit headers to
// add to the response when within.
func (s *Authz) rateLimit(ctx context.Context, tenant string, route *policy.Route) (*reply, []*corev3.HeaderValue, error) {
	key := ratelimit.Key(tenant, httpLimitDomain, []ratelimit.Entry{{Key: "route", Value: route.Name}})
	decs, err := s.limits.AllowBatch(ctx, []ratelimit.Request{{Key: key, Limits: route.Limits, Hits: 1}})
	if err != nil {
		return nil, nil, err
	}
	if len(decs) != 1 || len(decs[0].Results) != len(route.Limits) {
		return nil, nil, fmt.Errorf("rate-limit store answered %d decisions for 1 request", len(decs))
	}
	dec := decs[0]
	s.metrics.CountRule(envoy.APIExtAuthz, httpLimitDomain+"."+route.Name, 1, dec, false)
	qs, violated, retry := routeQuotas(route, dec)
	hs := envoy.StyledHeaders(route.HeaderStyle, qs, !dec.Allowed, retry)
	if dec.Allowed {
		return nil, hs, nil
	}
	r := problemQuotaExceeded(violated)
	return withHeaders(r, hs), nil, nil
}

// routeQuotas describes each limit for the RateLimit headers, the names of
// the limits that denied, and the longest wait among them.
func routeQuotas(route *policy.Route, dec ratelimit.Decision) ([]envoy.Quota, []string, time.Duration) {
	qs := make([]envoy.Quota, len(route.Limits))
	var violated []string
	var retry time.Duration
	for i, l := range route.Limits {
		r := dec.Results[i]
		q := envoy.Quota{Name: envoy.LimitName(route.Name, route.Limits, i), Quota: r.Limit, Window: l.Period, Remaining: r.Remaining, Reset: r.ResetAfter}
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
