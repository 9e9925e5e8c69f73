package authz

import (
	"context"
	"errors"
	"fmt"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// ProblemLockedOut is the 429 problem type of a charged limit's key locked out after it
// spent its budget (charge.lockout); Retry-After says for how long.
const ProblemLockedOut = "https://github.com/extauthz/extauthz/blob/main/docs/policy.md#lockout"

func problemLockedOut(limit string) *reply {
	return problemReply(Problem{Type: ProblemLockedOut, Title: "Locked out", Status: 429,
		Detail:           "Too many counted responses; this key is locked out until the Retry-After delay has passed.",
		ViolatedPolicies: []string{limit}})
}

var errNoLockoutStore = errors.New("a charged limit sets a lockout but no lockout store is configured")

// charger checks and charges the charged limits (policy.ChargedLimit):
// shared by ext_authz (request path) and ext_proc (both paths).
type charger struct {
	limits   ratelimit.Store // nil: charged limits cannot be served
	lockouts lockout.Store   // nil: a limit with a lockout cannot be served
	metrics  *ChargeMetrics
	timeout  time.Duration
	keys     *chargeKeys // hashes and reads the keys
}

// check is the request path: a locked-out key is refused (429
// locked-out), then every limit's reservation is taken with its check in
// one atomic store step (ratelimit.ChargeReserve: admitted while one hit
// is left, then charged its whole reservation; refused, charged nothing),
// so no request in flight passes a check another has already spent. A
// spent limit refuses (429 quota-exceeded, with the route's RateLimit
// headers) and the reservations the others took in this call are refunded.
// err is a store failure.
func (c *charger) check(ctx context.Context, p chargePlan, style policy.HeaderStyle) (*reply, error) {
	if len(p.entries) == 0 {
		return nil, nil
	}
	if c.limits == nil {
		return nil, errors.New("route has charged limits but no rate-limit store is configured")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if r, err := c.checkLockouts(ctx, p); r != nil || err != nil {
		return r, err
	}
	decs, err := c.decide(ctx, p.entries, func(e chargeEntry) (int64, ratelimit.ChargeMode) { return e.reserved, ratelimit.ChargeReserve })
	if err != nil {
		c.countChecks(p, ChargeCheckError)
		return nil, err
	}
	if refused(decs) {
		c.refundAdmitted(ctx, p, decs)
		return c.overReply(p, decs, style), nil
	}
	c.countChecks(p, ChargeCheckOK)
	c.reserved(ctx, p, decs)
	return nil, nil
}

// checkLockouts refuses the request when one of its keys is locked out.
func (c *charger) checkLockouts(ctx context.Context, p chargePlan) (*reply, error) {
	for _, e := range p.entries {
		if e.limit.Charge.Lockout == nil {
			continue
		}
		name := e.limit.Limit.Name
		if c.lockouts == nil {
			c.metrics.lockout(p.route, name, LockoutError)
			return nil, errNoLockoutStore
		}
		left, err := c.lockouts.Locked(ctx, e.key)
		switch {
		case err != nil:
			c.metrics.lockout(p.route, name, LockoutError)
			return nil, err
		case left > 0:
			c.metrics.lockout(p.route, name, LockoutRefused)
			c.metrics.check(p.route, name, ChargeCheckLocked)
			r := problemLockedOut(name)
			r.headers = append(r.headers, retryAfter(left))
			return r, nil
		}
	}
	return nil, nil
}

// overReply is the 429 of a check that found a spent budget, nil when
// every limit has something left.
func (c *charger) overReply(p chargePlan, decs []ratelimit.Decision, style policy.HeaderStyle) *reply {
	var qs []envoy.Quota
	var violated []string
	var retry time.Duration
	for i, e := range p.entries {
		r, l := decs[i].Results[0], e.limit.Limit
		q := envoy.Quota{Name: l.Name, Quota: r.Limit, Window: l.Period, Remaining: r.Remaining, Reset: r.ResetAfter}
		if q.Quota <= 0 {
			q.Quota = l.Requests
		}
		if !r.Allowed {
			q.Reset = r.RetryAfter
			violated = append(violated, l.Name)
			retry = max(retry, r.RetryAfter)
			c.metrics.check(p.route, l.Name, ChargeCheckOverLimit)
		}
		qs = append(qs, q)
	}
	if violated == nil {
		return nil
	}
	return withHeaders(problemQuotaExceeded(violated), envoy.StyledHeaders(style, qs, true, retry))
}

func (c *charger) countChecks(p chargePlan, outcome string) {
	for _, e := range p.entries {
		c.metrics.check(p.route, e.limit.Limit.Name, outcome)
	}
}

// reserved counts the reservations an admitted request took, and trips
// the lockout of a cost limit whose reservation spent its budget. An
// outcome limit's reserved hit is provisional (its status decides): it is
// counted in the hits charged, and its charge is counted at the status.
func (c *charger) reserved(ctx context.Context, p chargePlan, decs []ratelimit.Decision) {
	for i, e := range p.entries {
		name := e.limit.Limit.Name
		if e.limit.Charge.Cost == nil {
			c.metrics.reservedHits(p.route, name, e.reserved)
			continue
		}
		result := spentOr(decs[i].Results[0])
		c.metrics.charged(p.route, name, ChargeKindCost, result, e.reserved)
		if result == ChargeSpent && e.limit.Charge.Lockout != nil {
			c.trip(ctx, p.route, e)
		}
	}
}

func refused(decs []ratelimit.Decision) bool {
	for _, d := range decs {
		if !d.Results[0].Allowed {
			return true
		}
	}
	return false
}

// refundAdmitted gives back the reservations taken by the limits that
// admitted a request another limit refused in the same check, and puts
// each one's state after the refund in decs (for the 429's headers).
// Between the two store steps those hits were held: another request may
// have been refused for them (over-refusal), never admitted.
func (c *charger) refundAdmitted(ctx context.Context, p chargePlan, decs []ratelimit.Decision) {
	for i, e := range p.entries {
		if !decs[i].Results[0].Allowed {
			continue
		}
		if r, ok := c.charge(ctx, p.route, e, -e.reserved); ok {
			decs[i].Results[0] = r
		}
	}
}

// decide asks the store about each entry, one request per entry (each its
// own key), with the hits and mode hits gives it.
func (c *charger) decide(ctx context.Context, es []chargeEntry, hits func(chargeEntry) (int64, ratelimit.ChargeMode)) ([]ratelimit.Decision, error) {
	reqs := make([]ratelimit.Request, len(es))
	for i, e := range es {
		n, mode := hits(e)
		reqs[i] = ratelimit.Request{Key: e.key, Limits: []ratelimit.Limit{e.limit.Limit}, Hits: n, Charge: mode}
	}
	decs, err := c.limits.AllowBatch(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if len(decs) != len(reqs) {
		return nil, fmt.Errorf("rate-limit store answered %d decisions for %d requests", len(decs), len(reqs))
	}
	for _, d := range decs {
		if len(d.Results) != 1 {
			return nil, fmt.Errorf("rate-limit store answered %d results for 1 limit", len(d.Results))
		}
	}
	return decs, nil
}

func spentOr(r ratelimit.Result) string {
	if !r.Allowed || r.Remaining == 0 {
		return ChargeSpent
	}
	return ChargeWithin
}

// charge is the response path: hits (negative: a refund) charged to e
// whatever the budget says. A charge (of 0 too: a counted status keeping
// its reserved hit, a cost equal to its reservation) that leaves the
// budget spent trips e's lockout: the state after it is read in the same
// store step. The stream may be over (client gone): the charge must still
// reach the store. Failures are counted, never returned: the response is
// on its way. ok reports that the store answered r, the state after.
func (c *charger) charge(ctx context.Context, route string, e chargeEntry, hits int64) (r ratelimit.Result, ok bool) {
	kind, name := chargeKind(e.limit), e.limit.Limit.Name
	if c.limits == nil || hits == 0 && kind == ChargeKindCost && e.limit.Charge.Lockout == nil {
		return r, false // nothing to charge, count or trip
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	decs, err := c.decide(ctx, []chargeEntry{e}, func(chargeEntry) (int64, ratelimit.ChargeMode) { return hits, ratelimit.ChargeAlways })
	if err != nil {
		c.metrics.charged(route, name, kind, ChargeError, hits)
		return r, false
	}
	r = decs[0].Results[0]
	result := spentOr(r)
	if hits < 0 {
		result = ChargeRefund
	}
	c.metrics.charged(route, name, kind, result, hits)
	if result == ChargeSpent && e.limit.Charge.Lockout != nil {
		c.trip(ctx, route, e)
	}
	return r, true
}

// trip locks e's key out for its lockout's next duration.
func (c *charger) trip(ctx context.Context, route string, e chargeEntry) {
	name := e.limit.Limit.Name
	if c.lockouts == nil {
		c.metrics.lockout(route, name, LockoutError)
		return
	}
	if _, _, err := c.lockouts.Trip(ctx, e.key, *e.limit.Charge.Lockout); err != nil {
		c.metrics.lockout(route, name, LockoutError)
		return
	}
	c.metrics.lockout(route, name, LockoutTrip)
}

func chargeKind(c *policy.ChargedLimit) string {
	if c.Charge.Cost != nil {
		return ChargeKindCost
	}
	return ChargeKindOutcome
}

// checkCharges runs the request path of route's charged limits (unless
// the request is exempt): the plan to hand to ext_proc (nil when the route
// has none), or the 429 (or store error) that ends the request. An exempt
// request hands an empty plan, so that ext_proc knows it was decided.
func (s *Authz) checkCharges(ctx context.Context, route *policy.Route, r checkRequest, caller callerInput, exempt bool) (*chargePlan, *authv3.CheckResponse, error) {
	if !route.HasCharged() {
		return nil, nil, nil
	}
	p := chargePlan{route: route.Name}
	if exempt {
		return &p, nil, nil
	}
	// A cut body could name another account: it is unreadable.
	p, refused := s.charges.plan(limitScope(r.tenant, caller), route, caller, keyBody{data: r.body, cut: r.partialBody})
	if refused != nil {
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeRejected)
		return nil, deniedResponse(refusedCode(refused), refused), nil
	}
	over, err := s.charges.check(ctx, p, route.HeaderStyle)
	switch {
	case err != nil:
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeError)
		return nil, nil, envoy.StoreStatus(ctx, err)
	case over != nil:
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeOverLimit)
		return nil, deniedResponse(codes.ResourceExhausted, over), nil
	}
	return &p, nil, nil
}

// handCharges gives p to ext_proc in the response's dynamic metadata when
// the request proceeds; otherwise it will not run, and its reservations
// are refunded.
func (s *Authz) handCharges(ctx context.Context, a answer, p *chargePlan) {
	if p == nil {
		return
	}
	if !a.proceeds {
		s.charges.refund(ctx, *p)
		return
	}
	resp := a.resp
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	resp.DynamicMetadata.Fields[MetadataCharge] = p.toValue()
}

// refund gives back the reservations of a request that will not run.
func (c *charger) refund(ctx context.Context, p chargePlan) {
	for _, e := range p.entries {
		if e.reserved > 0 {
			c.charge(ctx, p.route, e, -e.reserved)
		}
	}
}
