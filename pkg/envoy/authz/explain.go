package authz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// Explanation is what Check would decide about the rate limits and the
// max_in_flight slots of a request right now, worked out without charging
// or taking anything (for operators: the admin API). Idempotency is not
// decided: that would take a lease.
type Explanation struct {
	// Route is the matched route; nil when none matched (Check admits).
	Route *policy.Route
	// Identity is the caller's scope as the identity chain named it (what
	// scopes the limits and the Idempotency-Key records), and Source the
	// chain entry that named it ("" when none did).
	Identity string
	Source   policy.IdentityKind
	// Tier is the caller's tier on a route with tier_limits (the set's
	// default for a missing or unknown value); "" on other routes.
	Tier string
	// Exempt reports a request the exemptions keep from the route's limits
	// and its in-flight slots.
	Exempt bool
	// Request is the rate-limit request Check would send (Hits 1); nil
	// when the route has no limits or the request is exempt. Names names
	// each of its limits, Results holds each limit's current state.
	Request *ratelimit.Request
	Names   []string
	Results []ratelimit.Result
	// Allowed is whether the limits and the free slots would admit the
	// request.
	Allowed bool
	// RecordScope is the scope of the request's Idempotency-Key records
	// (see RecordScope); empty when the route does not use Idempotency-Key.
	RecordScope string
	// InFlight is the caller's max_in_flight slots on the route; nil when
	// the route has no max_in_flight.
	InFlight *InFlightState
	// Charged is the state of the route's charged limits (the caller's
	// tier's), in policy order; nil when the route has none or the request
	// is exempt.
	Charged []ChargedState
}

// ChargedState is one charged limit of a request, read as its check would
// read it (without charging) and without its lockout tripping.
type ChargedState struct {
	// Limit is the policy's: its name and budget, what its responses are
	// charged (Charge.OnStatus or Charge.Cost, Charge.Reserve), the key's
	// source (Charge.Key) and the lockout (Charge.Lockout).
	Limit *policy.ChargedLimit
	// Key is the counting key, and the lockout's; "" when the request does
	// not name it (no such header, or a key from the request body, which
	// explain is not given): the limit does not apply to the request.
	Key string
	// Result is the budget's state under Key; zero when Key is "".
	Result ratelimit.Result
	// LockedFor is how long Key stays locked out (limits with a lockout).
	LockedFor time.Duration
}

// InFlightState is a caller's max_in_flight slots on a route, read
// without taking one.
type InFlightState struct {
	// Key is the caller's slot key on the route (before the store names
	// it: Held.Where).
	Key   string
	Limit int
	TTL   time.Duration
	// Held is the store's answer: the live slots and the soonest expiry.
	Held inflight.Held
}

// HTTPRequest is the part of an ext_authz Check the decision reads, in
// plain values, for callers that do not speak Envoy's protos (the admin API).
type HTTPRequest struct {
	Method, Path, Host string
	// Headers by name; names are lower-cased as Envoy's header map has them.
	Headers map[string]string
	// SourceAddress is Envoy's peer, "ip" or "ip:port"; Principal the mTLS
	// peer principal.
	SourceAddress, Principal string
}

// proto is r as Envoy's ext_authz filter would send it.
func (r HTTPRequest) proto() *authv3.CheckRequest {
	hs := make(map[string]string, len(r.Headers)+1)
	for k, v := range r.Headers {
		hs[strings.ToLower(k)] = v
	}
	if r.Host != "" {
		hs[":authority"] = r.Host
	}
	src := &authv3.AttributeContext_Peer{Principal: r.Principal}
	if r.SourceAddress != "" {
		host, port, err := net.SplitHostPort(r.SourceAddress)
		if err != nil {
			host, port = r.SourceAddress, "0"
		}
		p, _ := strconv.ParseUint(port, 10, 16)
		src.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: strings.Trim(host, "[]"), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: src, Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: r.Method, Path: r.Path, Host: r.Host, Headers: hs}}}}
}

// Explain is explain for an HTTPRequest.
func (s *Authz) Explain(ctx context.Context, r HTTPRequest) (Explanation, error) {
	return s.explain(ctx, r.proto())
}

// explain matches req's route and identity as Check does, reads the
// route's limits with a 0-hit decision, which charges and writes nothing,
// and counts the caller's max_in_flight slots without taking one. The only
// errors are the stores'.
func (s *Authz) explain(ctx context.Context, req *authv3.CheckRequest) (Explanation, error) {
	var ex Explanation
	hr := req.GetAttributes().GetRequest().GetHttp()
	h := httpPolicy(s.policies.Current())
	if ex.Route = h.Route(hr.GetHost(), hr.GetMethod(), hr.GetPath()); ex.Route == nil {
		return ex, nil
	}
	r := newCheckRequest(req)
	caller := callerInput{headers: r.headers, principal: r.principal, extensions: r.extensions,
		metadata: req.GetAttributes().GetMetadataContext(), address: req.GetAttributes().GetSource().GetAddress().GetSocketAddress().GetAddress()}
	for _, src := range h.Identity.Sources { // callerScope, remembering which source
		if ex.Identity = sourceScope(src, caller); ex.Identity != "" {
			ex.Source = src.Kind
			break
		}
	}
	if ex.Route.Idempotency != nil {
		ex.RecordScope = RecordScope(ex.Identity, ex.Route)
	}
	ex.Exempt = h.IsExempt(r.path, r.headers.joined(), r.principal)
	scope := limitScope(ex.Identity, caller)
	if ex.Exempt { // no rate limit and no in-flight slot, as in Check
		return ex, nil
	}
	if err := s.explainInFlight(ctx, &ex, scope); err != nil {
		return ex, err
	}
	if err := s.explainCharged(ctx, &ex, scope, caller); err != nil {
		return ex, err
	}
	if !ex.Route.HasLimits() {
		return ex, nil
	}
	p := planLimits(scope, ex.Route, caller)
	ex.Tier = p.tier
	if len(p.limits) == 0 { // a tier with charged limits only (read above)
		return ex, nil
	}
	ex.Request = &ratelimit.Request{Key: p.key, Limits: p.limits, Hits: 1}
	decs, err := s.limits.AllowBatch(ctx, []ratelimit.Request{{Key: p.key, Limits: p.limits}})
	if err != nil {
		return ex, err
	}
	if len(decs) != 1 || len(decs[0].Results) != len(p.limits) {
		return ex, fmt.Errorf("rate-limit store answered %d decisions for 1 request", len(decs))
	}
	ex.Results = decs[0].Results
	for i, res := range ex.Results {
		// Every algorithm admits h hits exactly when h <= Remaining.
		ex.Allowed = ex.Allowed && res.Remaining >= 1
		ex.Names = append(ex.Names, envoy.LimitName(p.owner, p.limits, i))
	}
	return ex, nil
}

// explainInFlight reads the caller's slots on ex.Route, if it has
// max_in_flight, and sets ex.Allowed by them (true without the limit).
func (s *Authz) explainInFlight(ctx context.Context, ex *Explanation, scope string) error {
	ex.Allowed = true
	r := ex.Route
	if r.MaxInFlight <= 0 {
		return nil
	}
	in, ok := s.inFlight.(inflight.Inspector)
	if !ok {
		return errNoInFlightInspector
	}
	st := &InFlightState{Key: inFlightKey(scope, r), Limit: r.MaxInFlight, TTL: r.InFlightTTL}
	held, err := in.Held(ctx, st.Key)
	if err != nil {
		return err
	}
	st.Held = held
	ex.InFlight, ex.Allowed = st, held.Slots < r.MaxInFlight
	return nil
}

var errNoInFlightInspector = errors.New("route sets max_in_flight but the in-flight store cannot be inspected")

// RecordScope is the scope under which the Idempotency-Key records of a
// caller on route are kept (idempotency.StorageKey's scope): the caller's
// identity, as Explanation.Identity shows it, prefixed with the route for
// routes whose key_scope is route.
func RecordScope(identity string, route *policy.Route) string { return keyScope(identity, route) }
