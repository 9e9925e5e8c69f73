package authz

import (
	"strconv"
	"strings"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
)

// chargeRun is a stream's charged limits waiting for their response.
type chargeRun struct {
	route   string
	pending []*pendingCharge
	status  int // the response's status, 0 until seen
}

// pendingCharge is one charged limit of the request, until it is charged.
type pendingCharge struct {
	entry chargeEntry
	json  *jsonCostScan // a JSON reply's cost, read as it streams by
	sse   *sseCost      // set for a text/event-stream reply, in place of json
	read  bool          // the cost is read from the body, which is arriving
}

// chargeWait is a request whose charged limits need its body for a key
// (ext_proc alone): the check waits for the body's end.
type chargeWait struct {
	route  *policy.Route
	caller callerInput
	scope  string
	body   []byte
	over   bool // the body outgrew maxChargeKeyBody: no key is read from it
}

// chargeRequestHeaders takes over ext_authz's charge handoff, or, when
// there is none and the route has charged limits, checks them here
// (ext_proc alone): a reply ends the request; err is a store failure.
func (st *procStream) chargeRequestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (*reply, error) {
	if p, found := chargePlanFrom(req.GetMetadataContext(), st.pol); found {
		st.startCharges(p)
		return nil, nil
	}
	if !anyCharged(st.pol) {
		return nil, nil
	}
	hs := protoHeaders(h.GetHeaders())
	method, _ := hs.get(":method")
	path, _ := hs.get(":path")
	route := st.pol.Route(requestHost(hs), method, path)
	if !route.HasCharged() || st.pol.IsExempt(path, hs.joined(), st.attrs["source.principal"].GetStringValue()) {
		return nil, nil
	}
	in := callerInput{headers: hs, principal: st.attrs["source.principal"].GetStringValue(), address: st.attrs["source.address"].GetStringValue()}
	w := &chargeWait{route: route, caller: in, scope: limitScope(callerScope(st.pol.Identity, in), in)}
	if needsBody(route) && !h.GetEndOfStream() {
		st.chargeWait = w
		return nil, nil
	}
	return st.checkCharges(w)
}

// anyCharged reports whether a route of h has charged limits: without one
// a stream skips reading the request for them.
func anyCharged(h *policy.HTTP) bool {
	if h == nil {
		return false
	}
	for _, r := range h.Routes {
		if r.HasCharged() {
			return true
		}
	}
	return false
}

// chargeRequestBody collects the body a waiting check needs; at its end
// (whole) the check runs.
func (st *procStream) chargeRequestBody(b []byte, whole bool) (*reply, error) {
	w := st.chargeWait
	if w == nil {
		return nil, nil
	}
	if !w.over {
		w.body = append(w.body, b...)
		if len(w.body) > maxChargeKeyBody {
			w.body, w.over = nil, true
		}
	}
	if !whole {
		return nil, nil
	}
	return st.checkCharges(w)
}

// checkCharges runs the request path of w's charged limits here.
func (st *procStream) checkCharges(w *chargeWait) (*reply, error) {
	st.chargeWait = nil
	p, refused := st.s.charges.plan(w.scope, w.route, w.caller, keyBody{data: w.body, cut: w.over})
	if refused != nil {
		return refused, nil
	}
	r, err := st.s.charges.check(st.ctx, p, w.route.HeaderStyle)
	if r == nil && err == nil {
		st.startCharges(p)
	}
	return r, err
}

func (st *procStream) startCharges(p chargePlan) {
	if len(p.entries) == 0 {
		return
	}
	run := &chargeRun{route: p.route}
	for _, e := range p.entries {
		run.pending = append(run.pending, &pendingCharge{entry: e})
	}
	st.charging = run
}

// chargeResponseHeaders charges what the status and headers decide: each
// outcome limit (a counted status keeps the hit its check reserved), each cost limit read
// from a header; a cost limit read from the body starts collecting it. A
// replayed reply (the upstream did not run) refunds the reservations.
func (st *procStream) chargeResponseHeaders(h *extprocv3.HttpHeaders) {
	run := st.charging
	if run == nil || run.status != 0 {
		return
	}
	hs := protoHeaders(h.GetHeaders())
	code, _ := hs.get(":status")
	run.status, _ = strconv.Atoi(code)
	if _, replayed := hs.get(HeaderIdempotentReplayed); replayed || st.replaying {
		st.s.charges.refund(st.ctx, chargePlan{route: run.route, entries: run.entries()})
		st.charging = nil
		return
	}
	ct, _ := hs.get("content-type")
	for _, pc := range run.pending {
		c := pc.entry.limit.Charge
		switch {
		case c.Cost == nil:
			st.chargeOutcome(run.route, pc, c.Counts(run.status))
		case c.Cost.Header != "":
			n, ok := headerCost(hs, c.Cost.Header)
			st.chargeCost(run.route, pc, n, ok)
		case c.Cost.JSONField != "" && encoded(hs):
			// A compressed body cannot be scanned, and a client chooses
			// it (Accept-Encoding): charged as a reply cut short.
			st.chargeCut(run.route, pc)
		case c.Cost.JSONField != "" && !h.GetEndOfStream():
			pc.read = true
			if isEventStream(ct) {
				pc.sse = &sseCost{path: c.Cost.JSONField}
			} else {
				pc.json = newJSONCostScan(c.Cost.JSONField)
			}
		}
	}
	run.prune()
	if h.GetEndOfStream() {
		st.settleCharges(true)
	}
}

// encoded reports whether a reply's body has a content-encoding other
// than identity (in any of its headers and list items).
func encoded(hs headerList) bool {
	for _, v := range hs.values("content-encoding") {
		for _, ce := range strings.Split(v, ",") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				return true
			}
		}
	}
	return false
}

// chargeOutcome settles an outcome limit at its status: a counted one
// keeps the hit reserved with the check (charging it when the plan came
// from a replica that reserved none), and the state after it may trip the
// lockout; any other status refunds it.
func (st *procStream) chargeOutcome(route string, pc *pendingCharge, counted bool) {
	e := pc.entry
	pc.entry.limit = nil // done
	switch {
	case counted:
		st.s.charges.charge(st.ctx, route, e, 1-e.reserved)
	case e.reserved > 0:
		st.s.charges.charge(st.ctx, route, e, -e.reserved)
	}
}

// refundUnlessRun refunds the reservations of a request that will not
// reach its upstream: answered locally (resp is an immediate response: a
// refusal, a replay, any local reply) or sent to the replay endpoint. It
// returns resp.
func (st *procStream) refundUnlessRun(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	run := st.charging
	if run == nil || resp.GetImmediateResponse() == nil && !st.replaying {
		return resp
	}
	st.charging = nil
	st.s.charges.refund(st.ctx, chargePlan{route: run.route, entries: run.entries()})
	return resp
}

func headerCost(hs headerList, name string) (int64, bool) {
	v, ok := hs.get(name)
	if !ok {
		return 0, false
	}
	return parseCost(v)
}

// chargeResponseBody feeds the body to the cost limits reading it; at its
// end they are charged.
func (st *procStream) chargeResponseBody(b *extprocv3.HttpBody) {
	run := st.charging
	if run == nil {
		return
	}
	for _, pc := range run.pending {
		if pc.read {
			pc.feed(b.GetBody())
		}
	}
	if b.GetEndOfStream() || (st.modeKnown && st.respMode == filterv3.ProcessingMode_BUFFERED) {
		st.endChargeBody()
	}
	if b.GetEndOfStream() {
		st.settleCharges(true) // no trailers follow
	}
}

func (pc *pendingCharge) feed(p []byte) {
	if pc.sse != nil {
		pc.sse.write(p)
		return
	}
	pc.json.write(p)
}

// endChargeBody charges the cost limits read from the body, now whole.
func (st *procStream) endChargeBody() {
	run := st.charging
	for _, pc := range run.pending {
		if !pc.read {
			continue
		}
		if pc.sse != nil {
			pc.sse.end()
			st.chargeCost(run.route, pc, pc.sse.cost, pc.sse.found)
			continue
		}
		pc.json.end()
		st.chargeCost(run.route, pc, pc.json.cost, pc.json.found)
	}
	run.prune()
}

// chargeResponseTrailers charges the cost limits read from a trailer,
// and ends a body that did not say end_of_stream.
func (st *procStream) chargeResponseTrailers(t *extprocv3.HttpTrailers) {
	run := st.charging
	if run == nil {
		return
	}
	st.endChargeBody()
	hs := protoHeaders(t.GetTrailers())
	for _, pc := range run.pending {
		if c := pc.entry.limit.Charge.Cost; c != nil && c.Trailer != "" {
			n, ok := headerCost(hs, c.Trailer)
			st.chargeCost(run.route, pc, n, ok)
		}
	}
	st.settleCharges(true)
}

// settleCharges ends the stream's charges. A cost never found charges the
// limit's default: a complete response (the upstream's reply ended
// without saying it: no such header or trailer) the default alone, a
// response that never completed (a client gone, an upstream reset, a
// body cut short, a stream that ended before the reply) at least its
// reservation too, which the upstream may well have spent. An outcome limit
// whose status was never seen keeps its reserved hit (the upstream may
// have run: the conservative side).
func (st *procStream) settleCharges(complete bool) {
	run := st.charging
	if run == nil {
		return
	}
	st.charging = nil
	for _, pc := range run.pending {
		if pc.entry.limit == nil || pc.entry.limit.Charge.Cost == nil {
			continue
		}
		if complete {
			st.chargeCost(run.route, pc, 0, false)
			continue
		}
		st.chargeCut(run.route, pc)
	}
}

// chargeCost charges a cost limit the cost found (ok), less its
// reservation; a missing cost charges the default less the reservation.
func (st *procStream) chargeCost(route string, pc *pendingCharge, cost int64, ok bool) {
	e := pc.entry
	pc.entry.limit, pc.read = nil, false // done
	if !ok {
		st.s.charges.metrics.charged(route, e.limit.Limit.Name, ChargeKindCost, ChargeMissing, 0)
		cost = e.limit.Charge.Cost.Default
	}
	st.s.charges.charge(st.ctx, route, e, cost-e.reserved)
}

// chargeCut charges a cost limit whose response never completed
// max(default, reservation) in all, or the cost read before the end (a
// usage event, then a client gone) when that is larger: what was read may
// not be the last word. The reservation was charged at the check, so only
// what is due above it is charged here, never a refund.
func (st *procStream) chargeCut(route string, pc *pendingCharge) {
	e := pc.entry
	due := max(e.limit.Charge.Cost.Default, e.reserved)
	if cost, ok := pc.costSoFar(); ok {
		due = max(due, cost)
	} else {
		st.s.charges.metrics.charged(route, e.limit.Limit.Name, ChargeKindCost, ChargeMissing, 0)
	}
	pc.entry.limit, pc.read = nil, false // done
	st.s.charges.charge(st.ctx, route, e, due-e.reserved)
}

// costSoFar is the cost read from a body that never ended: an event or a
// field already received counts.
func (pc *pendingCharge) costSoFar() (int64, bool) {
	switch {
	case !pc.read:
		return 0, false
	case pc.sse != nil:
		pc.sse.end()
		return pc.sse.cost, pc.sse.found
	}
	pc.json.end()
	return pc.json.cost, pc.json.found
}

// prune drops the limits already charged.
func (r *chargeRun) prune() {
	kept := r.pending[:0]
	for _, pc := range r.pending {
		if pc.entry.limit != nil {
			kept = append(kept, pc)
		}
	}
	r.pending = kept
}

func (r *chargeRun) entries() []chargeEntry {
	out := make([]chargeEntry, len(r.pending))
	for i, pc := range r.pending {
		out[i] = pc.entry
	}
	return out
}

// chargeFailed is the answer to a store failure of an ext_proc check: the
// stream fails, and Envoy's failure_mode_allow decides, as ext_authz's
// status_on_error does for an error there.
func (st *procStream) chargeFailed(err error) error {
	st.s.metrics.Decision(envoy.APIExtProc, envoy.HTTPDomain, envoy.OutcomeError)
	return envoy.StoreStatus(st.ctx, err)
}
