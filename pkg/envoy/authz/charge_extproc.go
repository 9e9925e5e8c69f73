package authz

import (
	"strconv"

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
	body  []byte   // a JSON reply collected for the cost, up to maxChargeCostBody
	over  bool     // the reply outgrew maxChargeCostBody: its cost is missing
	sse   *sseCost // set for a text/event-stream reply
	read  bool     // the cost is read from the body, which is arriving
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
// outcome limit (a counted status charges one hit), each cost limit read
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
			if c.Counts(run.status) {
				st.s.charges.charge(st.ctx, run.route, pc.entry, 1)
			}
			pc.entry.limit = nil // done
		case c.Cost.Header != "":
			n, ok := headerCost(hs, c.Cost.Header)
			st.chargeCost(run.route, pc, n, ok)
		case c.Cost.JSONField != "" && !h.GetEndOfStream():
			pc.read = true
			if isEventStream(ct) {
				pc.sse = &sseCost{path: c.Cost.JSONField}
			}
		}
	}
	run.prune()
	if h.GetEndOfStream() {
		st.settleCharges()
	}
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
}

func (pc *pendingCharge) feed(p []byte) {
	switch {
	case pc.sse != nil:
		pc.sse.write(p)
	case !pc.over:
		pc.body = append(pc.body, p...)
		if len(pc.body) > maxChargeCostBody {
			pc.body, pc.over = nil, true
		}
	}
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
		n, ok := int64(0), false
		if !pc.over {
			n, ok = jsonCost(pc.body, pc.entry.limit.Charge.Cost.JSONField)
		}
		st.chargeCost(run.route, pc, n, ok)
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
	st.settleCharges()
}

// settleCharges ends the stream's charges: a cost never found (no
// trailer, a reply cut short, a client gone) charges the limit's default in
// place of the reservation, or keeps the reservation without one; an
// outcome limit whose status was never seen charges nothing.
func (st *procStream) settleCharges() {
	run := st.charging
	if run == nil {
		return
	}
	st.charging = nil
	for _, pc := range run.pending {
		if pc.entry.limit != nil && pc.entry.limit.Charge.Cost != nil {
			st.chargeCost(run.route, pc, 0, false)
		}
	}
}

// chargeCost charges a cost limit the cost found (ok), less its
// reservation; a missing cost charges the default less the reservation,
// or nothing.
func (st *procStream) chargeCost(route string, pc *pendingCharge, cost int64, ok bool) {
	e := pc.entry
	src := e.limit.Charge.Cost
	pc.entry.limit, pc.read = nil, false // done
	if !ok {
		st.s.charges.metrics.charged(route, e.limit.Limit.Name, ChargeKindCost, ChargeMissing, 0)
		if !src.HasDefault {
			return
		}
		cost = src.Default
	}
	st.s.charges.charge(st.ctx, route, e, cost-e.reserved)
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
