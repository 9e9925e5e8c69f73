package authz

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
)

// heldSlot is the max_in_flight slot a stream keeps for its request.
type heldSlot struct {
	hold  *slotHold
	renew *renewer // nil without an in-flight store
}

// holdSlot takes over the slot ext_authz handed on in md, if any, and
// renews it every ttl/3 until releaseSlot. Without an in-flight store the
// slot is left to expire after its ttl.
func (st *procStream) holdSlot(md *corev3.Metadata) {
	if st.slot != nil || st.slotDone {
		return
	}
	h, ok := slotFrom(md)
	switch {
	case !ok:
		st.s.metrics.Invalid(envoy.APIExtProc, "bad_metadata")
		return
	case h == nil:
		return
	}
	st.slot = &heldSlot{hold: h}
	store := st.s.opts.inFlight
	if store == nil {
		return
	}
	st.slot.renew = st.s.startTicking(st.ctx, h.ttl/3, func(ctx context.Context) bool {
		cctx, cancel := context.WithTimeout(ctx, st.s.opts.storeTimeout)
		defer cancel()
		held, err := store.Renew(cctx, h.key, h.slot, h.ttl)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				// Keep trying: the next tick may reach the store.
				st.s.metrics.InFlight(envoy.APIExtProc, envoy.InFlightRenewError)
			}
			return true
		case !held:
			return false // expired: counted at release
		}
		return true
	})
}

// releaseSlot gives the stream's slot back, once: at the response's end,
// or when the stream ends any other way (finish). The stream's context may
// be over (client gone): the release must still reach the store.
func (st *procStream) releaseSlot() {
	sl := st.slot
	if sl == nil {
		return
	}
	st.slot, st.slotDone = nil, true
	if sl.renew != nil {
		sl.renew.stop()
	}
	store := st.s.opts.inFlight
	if store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(st.ctx), st.s.opts.storeTimeout)
	defer cancel()
	released, err := store.Release(ctx, sl.hold.key, sl.hold.slot)
	switch {
	case err != nil:
		// The slot frees after its ttl.
		st.s.metrics.InFlight(envoy.APIExtProc, envoy.InFlightError)
	case !released:
		st.s.metrics.InFlight(envoy.APIExtProc, envoy.InFlightExpired)
	default:
		st.s.metrics.InFlight(envoy.APIExtProc, envoy.InFlightReleased)
	}
}

// responseEnds reports whether req is the last message of the response:
// the upstream is done with the request.
func (st *procStream) responseEnds(req *extprocv3.ProcessingRequest) bool {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return v.ResponseHeaders.GetEndOfStream()
	case *extprocv3.ProcessingRequest_ResponseBody:
		return v.ResponseBody.GetEndOfStream() || (st.modeKnown && st.respMode == filterv3.ProcessingMode_BUFFERED)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return true
	}
	return false
}
