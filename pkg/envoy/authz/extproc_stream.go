package authz

import (
	"context"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// procStream is the state of one ext_proc stream (one HTTP request).
// Messages of a stream arrive one at a time, so only the renewer goroutine
// runs concurrently with it, and it touches nothing here but its own fields.
type procStream struct {
	s     *ExtProc
	ctx   context.Context
	pol   *policy.HTTP
	attrs map[string]*structpb.Value // request and response attributes seen so far

	bodyMode  filterv3.ProcessingMode_BodySendMode
	respMode  filterv3.ProcessingMode_BodySendMode
	modeKnown bool // protocol_config said which body modes apply

	pending *pendingBegin // wiring (a): key checked, waiting for the body
	route   string        // the policy route's name, for metrics; "" until known

	lease   *idempotency.Lease  // held by this request (either wiring)
	id      *policy.Idempotency // settings of the lease's route; nil if it vanished
	renew   *renewer
	heldAt  time.Time // when the lease was taken or handed over (RouteLatency's clock)
	capture *capture  // buffering a response to store
	settled bool      // the lease was completed, released or left to expire

	mark      replayMark // a replay ticket and scope proof to put on the request (extproc_replay.go)
	replaying bool       // the response is a replay from extauthz: never stored

	slot     *heldSlot // the request's max_in_flight slot, until released
	slotDone bool      // the slot was released: never taken over again

	chargeWait *chargeWait // ext_proc alone: charged limits waiting for the request body
	charging   *chargeRun  // charged limits waiting for the response
}

// pendingBegin is a wiring (a) request whose body is still arriving.
type pendingBegin struct {
	id   *policy.Idempotency
	req  idemRequest
	key  string
	body []byte
}

func newProcStream(ctx context.Context, s *ExtProc) *procStream {
	pol := httpPolicy(s.policies.Current())
	s.gate.events.syncRoutes(pol)
	s.charges.metrics.syncPolicy(pol)
	return &procStream{s: s, ctx: ctx, pol: pol, attrs: map[string]*structpb.Value{}}
}

// event counts one idempotency event of the stream under its route.
func (st *procStream) event(e idempotency.Event) {
	st.s.gate.count(st.site(), e)
}

func (st *procStream) site() eventSite {
	return eventSite{api: apiExtProc, route: st.route}
}

const apiExtProc = envoy.APIExtProc

// handle answers one message.
func (st *procStream) handle(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	st.observe(req)
	if st.responseEnds(req) {
		defer st.releaseSlot()
	}
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if r, err := st.chargeRequestHeaders(req, v.RequestHeaders); r != nil || err != nil {
			return st.chargeRefused(r, err)
		}
		return st.refundUnlessRun(st.requestHeaders(req, v.RequestHeaders)), nil
	case *extprocv3.ProcessingRequest_RequestBody:
		if r, err := st.chargeRequestBody(v.RequestBody.GetBody(), st.wholeRequestBody(v.RequestBody)); r != nil || err != nil {
			return st.chargeRefused(r, err)
		}
		return st.refundUnlessRun(st.requestBody(v.RequestBody)), nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if r, err := st.chargeRequestBody(nil, true); r != nil || err != nil {
			return st.chargeRefused(r, err)
		}
		return st.refundUnlessRun(st.requestTrailers()), nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		st.chargeResponseHeaders(v.ResponseHeaders)
		return st.responseHeaders(v.ResponseHeaders), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		st.chargeResponseBody(v.ResponseBody)
		return st.responseBody(v.ResponseBody), nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		st.chargeResponseTrailers(v.ResponseTrailers)
		return st.responseTrailers(), nil
	}
	st.s.metrics.Invalid(envoy.APIExtProc, "unknown_phase")
	return nil, status.Error(codes.InvalidArgument, "ProcessingRequest without a known phase")
}

// observe records what any message may carry: the protocol configuration
// (first message) and attributes (first message of each direction).
func (st *procStream) observe(req *extprocv3.ProcessingRequest) {
	if pc := req.GetProtocolConfig(); pc != nil && !st.modeKnown {
		st.bodyMode, st.respMode, st.modeKnown = pc.GetRequestBodyMode(), pc.GetResponseBodyMode(), true
	}
	for _, s := range req.GetAttributes() {
		for k, v := range s.GetFields() {
			st.attrs[k] = v
		}
	}
}

// requestHeaders: wiring (b) acts on ext_authz's handoff; wiring (a)
// checks the key and, for a bodiless request, decides at once.
func (st *procStream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	st.holdSlot(req.GetMetadataContext())
	hand, ok, err := handoffFrom(req.GetMetadataContext())
	switch {
	case err != nil:
		// Not ours to fix, and no lease can be trusted: let it through.
		st.s.metrics.Invalid(envoy.APIExtProc, "bad_metadata")
		return continueRequestHeaders()
	case ok:
		return st.requestHeadersReply(st.fromHandoff(hand))
	case st.modeKnown && st.bodyMode != filterv3.ProcessingMode_BUFFERED:
		// Not wiring (a): nothing to decide here. A ticket ext_authz
		// signed marks the request for replay: its response is not ours
		// to read, nor to charge. A client's copy (the shipped configs
		// strip it, a hand-written one may not) fails verification and
		// marks nothing: it would otherwise refund the charged limits.
		st.replaying = st.ticketVerified(h)
		return continueRequestHeaders()
	}
	hs := protoHeaders(h.GetHeaders())
	method, _ := hs.get(":method")
	path, _ := hs.get(":path")
	route := st.pol.Route(requestHost(hs), method, path)
	id := applies(route, method)
	if id == nil {
		return continueRequestHeaders()
	}
	st.route = route.Name
	key, bad := st.s.gate.key(st.site(), id, hs)
	switch {
	case bad != nil:
		return immediate(bad, "extauthz_idempotency_key")
	case key == "":
		return continueRequestHeaders()
	}
	scope := st.callerScope(hs)
	if scope == "" { // never one scope shared by every unnamed caller
		return immediate(problemIdentityMissing(st.pol.Identity.MissingStatus), "extauthz_identity_missing")
	}
	p := &pendingBegin{id: id, key: key, req: idemRequest{method: method, path: path, headers: hs, tenant: keyScope(scope, route)}}
	if h.GetEndOfStream() {
		return st.requestHeadersReply(st.begin(p))
	}
	st.pending = p
	return continueRequestHeaders()
}

// requestHost is the request's host as ext_authz sees it: :authority
// (Envoy sets it for HTTP/1.1 too, from Host), else a host header.
func requestHost(hs headerList) string {
	if v, _ := hs.get(":authority"); v != "" {
		return v
	}
	v, _ := hs.get("host")
	return v
}

// requestBody collects a wiring (a) body and decides at its end. In
// BUFFERED mode Envoy sends the body in one message, with end_of_stream
// false when trailers follow (and no trailers message when the trailer mode
// is SKIP): that message is the whole body.
func (st *procStream) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	p := st.pending
	if p == nil {
		return continueRequestBody()
	}
	p.body = append(p.body, b.GetBody()...)
	if len(p.body) > st.s.opts.maxReqBody {
		st.pending = nil
		st.event(idempotency.EventBodyTooBig)
		return immediate(problemBodyTooLarge(), "extauthz_idempotency_body")
	}
	if !st.wholeRequestBody(b) {
		return continueRequestBody()
	}
	st.pending = nil
	return st.requestBodyReply(st.begin(p))
}

// wholeRequestBody reports whether b ends the request body: end_of_stream,
// or BUFFERED mode's one message.
func (st *procStream) wholeRequestBody(b *extprocv3.HttpBody) bool {
	return b.GetEndOfStream() || (st.modeKnown && st.bodyMode == filterv3.ProcessingMode_BUFFERED)
}

// chargeRefused answers a request the charged limits refused (r), or
// fails the stream on their store's failure.
func (st *procStream) chargeRefused(r *reply, err error) (*extprocv3.ProcessingResponse, error) {
	if err != nil {
		return nil, st.chargeFailed(err)
	}
	st.s.metrics.Decision(envoy.APIExtProc, envoy.HTTPDomain, envoy.OutcomeOverLimit)
	return immediate(r, "extauthz_charge"), nil
}

// requestTrailers end a body that did not say end_of_stream.
func (st *procStream) requestTrailers() *extprocv3.ProcessingResponse {
	if p := st.pending; p != nil {
		st.pending = nil
		r := st.begin(p)
		if r == nil && st.mark.ticket != "" {
			// A trailers reply cannot re-route the request.
			st.mark = replayMark{}
			r = problemReplayUnavailableDetail("The request already ran; its stored reply cannot be replayed to a request with trailers. Resend it without trailers and the same Idempotency-Key: it will not run again.")
		}
		if r != nil {
			return immediate(r, "extauthz_idempotency")
		}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
}

// begin takes the wiring (a) decision on the whole request; nil means
// continue (holding a lease, or failing open).
func (st *procStream) begin(p *pendingBegin) *reply {
	p.req.body = p.body
	res := st.s.gate.begin(st.ctx, st.site(), p.req.tenant, p.key, fingerprint(p.id, p.req), ttlsOf(p.id), p.id.FailClosed)
	return st.apply(res, p.id)
}

// fromHandoff acts on ext_authz's metadata (wiring b); nil means continue.
// Its route name counts as a label only if the policy has that route.
func (st *procStream) fromHandoff(h handoff) *reply {
	var id *policy.Idempotency
	if r := st.routeNamed(h.route); r != nil {
		st.route, id = r.Name, r.Idempotency
	}
	if h.action == envoy.ActionLease {
		st.hold(h.lease, id)
		return nil
	}
	// ActionReplay: Begin again with ext_authz's fingerprint. The record
	// is normally still COMPLETED; if it expired meanwhile the request
	// simply runs, holding the lease taken now.
	failClosed := id != nil && id.FailClosed
	res := st.s.gate.begin(st.ctx, st.site(), h.lease.Scope, h.lease.Key, h.fp, h.lease.TTLs, failClosed)
	return st.apply(res, id)
}

// apply turns a gate result into a reply (nil: continue).
func (st *procStream) apply(res gateResult, id *policy.Idempotency) *reply {
	switch res.kind {
	case gateReply:
		return res.reply
	case gateReplay:
		if res.stored.BodyRef != nil {
			t, bad := st.s.gate.replayTicket(st.route, id, res)
			if bad != nil {
				st.event(idempotency.EventUnavailable)
				return bad
			}
			st.mark = t
		}
		st.event(idempotency.EventReplayed)
		if st.mark.ticket != "" {
			return nil
		}
		return replayReply(id, res.stored)
	case gateLease:
		st.hold(res.lease, id)
	}
	return nil
}

// routeNamed finds a route by name in the stream's policy; nil when a
// reload removed it (its Idempotency is nil when only that went).
func (st *procStream) routeNamed(name string) *policy.Route {
	if st.pol == nil {
		return nil
	}
	for _, r := range st.pol.Routes {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// hold makes the stream the lease's keeper: it renews it until settled.
func (st *procStream) hold(l idempotency.Lease, id *policy.Idempotency) {
	st.lease, st.id = &l, id
	st.heldAt = st.s.gate.latency.now()
	st.renew = st.s.startRenew(st.ctx, l, st.site())
}

// finish runs when the stream ends: it releases the request's in-flight
// slot if the response's end did not. An unsettled lease (client reset,
// ext_proc timeout, a reply cut short, a stream that never saw the
// response) may have let the upstream act: it is completed as not
// replayable, with the reply's status when one was seen.
func (st *procStream) finish() {
	st.releaseSlot()
	st.settleCharges(false)
	if st.lease == nil || st.settled {
		return
	}
	status := 0
	if st.capture != nil {
		status = st.capture.status
	}
	st.notKept(status, idempotency.EventNotKept)
}
