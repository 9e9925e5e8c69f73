package authz

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// Authz serves envoy.service.auth.v3.Authorization for the policy's HTTP
// section. For the first route that matches a request it applies, in order:
//
//  1. the route's rate limits (or, for tier_limits, those of the caller's
//     tier), per tenant, unless the request is exempt:
//     429 problem+json with RateLimit-Policy, RateLimit and Retry-After;
//  2. the route's Idempotency-Key settings: 400 (key missing or
//     malformed), 409 + Retry-After (in flight), 422 (used with another
//     request), the stored response with Idempotent-Replayed: true, 503
//     (store down, route fails closed), or OK holding a lease that is handed
//     to ext_proc in dynamic_metadata (see envoy.MetadataField).
//
// Between the two, a route with max_in_flight takes one of the caller's
// slots (429 problem+json with RateLimit-Policy in the unit
// concurrent-requests and Retry-After when all are taken); a request that
// goes upstream hands its slot to ext_proc (envoy.MetadataInFlight), which
// releases it when the request ends, and any other answer releases it here.
//
// A stored response whose body is not valid UTF-8 (ext_authz bodies are
// proto strings) is not replayed here: the request is admitted without a
// lease and marked with action "replay", and ext_proc, which sees the
// request headers of wiring (b), answers with the stored bytes before the
// upstream is called.
type Authz struct {
	authv3.UnimplementedAuthorizationServer

	limits   ratelimit.Store
	inFlight inflight.Store // nil unless WithInFlight
	charges  *charger
	gate     gate
	policies envoy.PolicySource
	metrics  *envoy.Metrics
}

// NewAuthz returns an Authz deciding rate limits with limits and
// idempotency with idem, under the policies' current snapshot. events
// counts idempotency outcomes; metrics the decisions and their latency.
// Of the options, WithStoreTimeout, WithInFlight and WithCharges apply.
func NewAuthz(limits ratelimit.Store, idem idempotency.Store, policies envoy.PolicySource, metrics *envoy.Metrics, events *IdempotencyMetrics, opts ...IdempotencyOption) (*Authz, error) {
	switch {
	case envoy.IsNil(limits):
		return nil, errors.New("envoy: NewAuthz: nil rate-limit store")
	case envoy.IsNil(idem):
		return nil, errors.New("envoy: NewAuthz: nil idempotency store")
	case envoy.IsNil(policies):
		return nil, errors.New("envoy: NewAuthz: nil policy source")
	case metrics == nil || events == nil:
		return nil, errors.New("envoy: NewAuthz: nil metrics")
	}
	o := newIdemOptions(opts)
	events.syncRoutes(httpPolicy(policies.Current()))
	charges := o.charger(limits)
	charges.metrics.syncPolicy(httpPolicy(policies.Current()))
	return &Authz{limits: limits, inFlight: o.inFlight, charges: charges, gate: gate{store: idem, events: events, timeout: o.storeTimeout, replay: o.replay, latency: o.latency}, policies: policies, metrics: metrics}, nil
}

// Register registers the server on r (a *grpc.Server).
func (s *Authz) Register(r grpc.ServiceRegistrar) {
	authv3.RegisterAuthorizationServer(r, s)
}

// Check answers one ext_authz call. A request without HTTP attributes is
// denied with a 400 problem (a decision: see docs/envoy.md, "Error paths");
// the only errors are a failing rate-limit store, codes.Unavailable (Envoy
// then applies failure_mode_allow / status_on_error), and the caller's own
// cancellation or deadline (see envoy.StoreStatus).
func (s *Authz) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	start := time.Now()
	defer func() { s.metrics.Latency(envoy.APIExtAuthz, time.Since(start)) }()

	hr := req.GetAttributes().GetRequest().GetHttp()
	if hr == nil || hr.GetMethod() == "" || hr.GetPath() == "" {
		s.metrics.Invalid(envoy.APIExtAuthz, "no_http_request")
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeRejected)
		return deniedResponse(codes.InvalidArgument, problemRequestMalformed()), nil
	}
	h := httpPolicy(s.policies.Current())
	s.gate.events.syncRoutes(h)
	s.charges.metrics.syncPolicy(h)
	route := h.Route(hr.GetHost(), hr.GetMethod(), hr.GetPath())
	if route == nil {
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeNoMatch)
		return okResponse(nil, nil), nil
	}
	r := newCheckRequest(req)
	caller := callerInput{headers: r.headers, principal: r.principal, extensions: r.extensions,
		metadata: req.GetAttributes().GetMetadataContext(), address: req.GetAttributes().GetSource().GetAddress().GetSocketAddress().GetAddress()}
	r.tenant = callerScope(h.Identity, caller)
	r.missingStatus = h.Identity.MissingStatus

	exempt := h.IsExempt(r.path, r.headers.joined(), r.principal)
	rlHeaders, resp, err := s.countLimits(ctx, route, limitScope(r.tenant, caller), caller, exempt)
	if resp != nil || err != nil {
		return resp, err
	}
	plan, resp, err := s.checkCharges(ctx, route, r, caller, exempt)
	if resp != nil || err != nil {
		return resp, err
	}
	return s.admit(ctx, route, r, limitScope(r.tenant, caller), exempt, rlHeaders, plan)
}

// countLimits decides the route's counted limits (unless exempt): the
// RateLimit headers of an admitted request, or the 429 (or store error)
// that ends it.
func (s *Authz) countLimits(ctx context.Context, route *policy.Route, scope string, caller callerInput, exempt bool) ([]*corev3.HeaderValue, *authv3.CheckResponse, error) {
	if !route.HasLimits() || exempt {
		return nil, nil, nil
	}
	plan := planLimits(scope, route, caller)
	if len(plan.limits) == 0 { // a tier with only charged limits
		return nil, nil, nil
	}
	over, hs, err := s.rateLimit(ctx, plan, route.HeaderStyle)
	switch {
	case err != nil:
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeError)
		return nil, nil, envoy.StoreStatus(ctx, err)
	case over != nil:
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeOverLimit)
		return nil, deniedResponse(codes.ResourceExhausted, over), nil
	}
	return hs, nil, nil
}

// answer is ext_authz's response to a Check and where it sends the
// request, which decides what becomes of an in-flight slot (handSlot).
type answer struct {
	resp *authv3.CheckResponse
	// proceeds: the request goes on down Envoy's filter chain to the route
	// it asked for (the upstream, or ext_proc replaying stored bytes), and
	// ext_proc holds its slot until the response ends. False when nothing
	// the slot limits will run: ext_authz answered it (denied, replayed), or
	// re-routed it to extauthz's own replay endpoint (an OK response that
	// sets request headers, which is why this is not read off resp).
	proceeds bool
}

// answered is a response that ends the request at ext_authz.
func answered(resp *authv3.CheckResponse) answer { return answer{resp: resp} }

// proceeding is a response that sends the request on to its route.
func proceeding(resp *authv3.CheckResponse) answer { return answer{resp: resp, proceeds: true} }

// idempotency takes the Idempotency-Key decision and renders it.
func (s *Authz) idempotency(ctx context.Context, route *policy.Route, r checkRequest, rl []*corev3.HeaderValue) answer {
	res := s.gate.decide(ctx, envoy.APIExtAuthz, route, r.idemRequest)
	switch res.kind {
	case gateReply:
		return answered(deniedResponse(codes.PermissionDenied, withHeaders(res.reply, rl)))
	case gateReplay:
		if res.stored.BodyRef != nil {
			return answered(s.replayElsewhere(route, res, rl))
		}
		rep := replayReply(route.Idempotency, res.stored)
		if !replayableHere(rep) {
			// Admit without a lease; ext_proc replays the bytes.
			h := handoff{action: envoy.ActionReplay, route: route.Name, fp: res.fp,
				lease: idempotency.Lease{Scope: keyScope(r.tenant, route), Key: res.key, TTLs: ttlsOf(route.Idempotency)}}
			return proceeding(okResponse(rl, h.toStruct()))
		}
		s.gate.events.Count(envoy.APIExtAuthz, route.Name, idempotency.EventReplayed)
		return answered(deniedResponse(codes.PermissionDenied, withHeaders(rep, rl)))
	case gateLease:
		h := handoff{action: envoy.ActionLease, lease: res.lease, route: route.Name, fp: res.fp}
		return proceeding(okResponse(rl, h.toStruct()))
	}
	return proceeding(okResponse(rl, nil))
}

// replayableHere reports whether ext_authz can send rep: its body and
// header values must be valid UTF-8 (proto strings) and its status one of
// the codes type.v3.StatusCode defines.
func replayableHere(rep *reply) bool {
	if _, ok := typev3.StatusCode_name[int32(rep.status)]; !ok || !utf8.Valid(rep.body) {
		return false
	}
	for _, h := range rep.headers {
		if !utf8.ValidString(h[1]) {
			return false
		}
	}
	return true
}

// withHeaders adds the rate-limit headers to a reply.
func withHeaders(r *reply, hs []*corev3.HeaderValue) *reply {
	for _, h := range hs {
		r.headers = append(r.headers, [2]string{h.GetKey(), h.GetValue()})
	}
	return r
}

// okResponse admits the request, adding hs to the eventual response and
// md to the request's dynamic metadata.
func okResponse(hs []*corev3.HeaderValue, md *structpb.Struct) *authv3.CheckResponse {
	// The response's fixed messages in one allocation, its header options
	// in another.
	a := &struct {
		resp   authv3.CheckResponse
		status rpcstatus.Status
		oneof  authv3.CheckResponse_OkResponse
		ok     authv3.OkHttpResponse
	}{}
	if len(hs) > 0 {
		opts := make([]corev3.HeaderValueOption, len(hs))
		a.ok.ResponseHeadersToAdd = make([]*corev3.HeaderValueOption, len(hs))
		for i, h := range hs {
			opts[i].Header, opts[i].AppendAction = h, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
			a.ok.ResponseHeadersToAdd[i] = &opts[i]
		}
	}
	a.status.Code = int32(codes.OK)
	a.oneof.OkResponse = &a.ok
	a.resp.Status, a.resp.HttpResponse, a.resp.DynamicMetadata = &a.status, &a.oneof, md
	return &a.resp
}

// deniedResponse answers the client with r instead of the upstream.
func deniedResponse(code codes.Code, r *reply) *authv3.CheckResponse {
	d := &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode(r.status)}, Body: string(r.body)}
	for _, h := range r.headers {
		d.Headers = append(d.Headers, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h[0], Value: h[1]},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(code)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: d},
	}
}

// replayElsewhere admits a replay whose body is in object storage with a
// replay ticket header and the caller's scope proof: Envoy
// (clear_route_cache) routes the request to extauthz's replay endpoint,
// which streams the body. The headers replace any copy the client sent.
func (s *Authz) replayElsewhere(route *policy.Route, res gateResult, rl []*corev3.HeaderValue) *authv3.CheckResponse {
	t, bad := s.gate.replayTicket(route.Name, route.Idempotency, res)
	if bad != nil {
		s.gate.events.Count(envoy.APIExtAuthz, route.Name, idempotency.EventUnavailable)
		return deniedResponse(codes.Unavailable, withHeaders(bad, rl))
	}
	s.gate.events.Count(envoy.APIExtAuthz, route.Name, idempotency.EventReplayed)
	resp := okResponse(rl, nil)
	ok := resp.GetOkResponse()
	for _, h := range t.headers() {
		ok.Headers = append(ok.Headers, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h[0], Value: h[1]},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return resp
}
