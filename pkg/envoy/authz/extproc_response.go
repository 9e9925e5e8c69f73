package authz

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// settlement is what becomes of a held lease once the response is known.
type settlement int

const (
	settleStore   settlement = iota // a real reply with a stored status: Complete
	settleRelease                   // the upstream certainly did not act, or the route releases the status
	settleNotKept                   // the upstream may have acted: complete as not replayable
)

// viaUpstream is response.code_details of a reply that came from the upstream.
const viaUpstream = "via_upstream"

// settle decides a lease's fate from the response headers (the settle
// table of docs/idempotency.md). Exactly once: a lease is released only
// when the upstream certainly did not act, or when a real upstream reply
// has a status the route does not store (the route says a retry may run).
//
//   - A local reply (code_details other than via_upstream, or our own
//     Idempotent-Replayed marker): Release when the flags say the request
//     never reached an upstream, else not kept (e.g. an upstream timeout:
//     the write may have run).
//   - Without code_details (response_attributes not configured) a 504 is
//     taken for the router's timeout: not kept.
//   - No settings (the route left the policy): not kept, nothing to judge by.
//   - A real reply: stored statuses are stored, others Released.
func settle(id *policy.Idempotency, status int, hs headerList, details string, detailsKnown bool, flags responseFlags) settlement {
	_, marker := hs.get(HeaderIdempotentReplayed)
	switch {
	case marker || (detailsKnown && details != viaUpstream):
		if flags.neverForwarded() {
			return settleRelease
		}
		return settleNotKept
	case !detailsKnown && status == 504, id == nil:
		return settleNotKept
	case id.StoresStatus(status):
		return settleStore
	}
	return settleRelease
}

// responseHeaders settles the lease, or starts capturing the response.
func (st *procStream) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if st.replaying {
		return skipResponseBody()
	}
	if st.lease == nil || st.settled {
		return continueResponseHeaders()
	}
	hs := protoHeaders(h.GetHeaders())
	code, _ := hs.get(":status")
	status, _ := strconv.Atoi(code)
	details, known := st.attrs["response.code_details"], false
	if details != nil {
		known = true
	}
	switch settle(st.id, status, hs, details.GetStringValue(), known, flagsOf(st.attrs["response.flags"])) {
	case settleRelease:
		st.release()
	case settleNotKept:
		st.notKept(status, idempotency.EventNotKept)
	default:
		st.capture = &capture{status: status, headers: hs}
		if cl, _ := hs.get("content-length"); declaredOver(cl, st.keepable()) {
			st.notKept(status, idempotency.EventTooLarge)
			break
		}
		if h.GetEndOfStream() {
			st.complete()
		}
	}
	return continueResponseHeaders()
}

func declaredOver(contentLength string, limit int64) bool {
	n, err := strconv.ParseInt(strings.TrimSpace(contentLength), 10, 64)
	return err == nil && n > limit
}

// responseBody captures the body; its end completes the record. STREAMED
// mode sends the body in chunks, the last with end_of_stream (or trailers
// follow); BUFFERED mode sends one message, the whole body, end_of_stream
// false when trailers follow (Envoy sends none with the trailer mode SKIP).
// A reply reset mid-body ends the stream without its end: finish.
func (st *procStream) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if c := st.capture; c != nil && !st.settled && st.add(b.GetBody()) {
		if b.GetEndOfStream() || (st.modeKnown && st.respMode == filterv3.ProcessingMode_BUFFERED) {
			st.complete()
		}
	}
	return continueResponseBody()
}

// responseTrailers end a body that did not say end_of_stream.
func (st *procStream) responseTrailers() *extprocv3.ProcessingResponse {
	if st.capture != nil && !st.settled {
		st.complete()
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// complete stores the captured response under the lease: inline, or as a
// reference to the body committed to the blob store first.
func (st *procStream) complete() {
	c := st.capture
	st.capture, st.settled = nil, true
	if st.stopRenew() {
		c.abort(st.ctx)
		return
	}
	resp := idempotency.Response{Status: c.status, Headers: idempotency.ReplayHeaders(c.headers, st.id.ReplayHeader), Body: c.body}
	if c.w != nil {
		ref, err := c.w.Commit(st.ctx)
		if err != nil {
			c.abort(st.ctx)
			st.event(idempotency.EventStoreError)
			st.writeNotKept(c.status, idempotency.EventNotKept)
			return
		}
		c.w, resp.BodyRef = nil, &ref
	}
	err := st.s.gate.complete(st.ctx, *st.lease, resp)
	switch {
	case err == nil:
		st.event(idempotency.EventStored)
		return
	case errors.Is(err, idempotency.ErrTooLarge), errors.Is(err, idempotency.ErrInvalidResponse):
		// Refused before anything was written: the lease is still ours.
		st.writeNotKept(c.status, idempotency.EventTooLarge)
	default:
		st.count(err)
	}
	if resp.BodyRef != nil {
		st.deleteBlob(resp.BodyRef.Name)
	}
}

// release deletes the lease so that a retry runs.
func (st *procStream) release() {
	st.capture, st.settled = nil, true
	if st.stopRenew() {
		return
	}
	if err := st.s.gate.release(st.ctx, *st.lease); err != nil {
		st.count(err)
		return
	}
	st.event(idempotency.EventReleased)
}

// notKept settles the lease as completed but not replayable: the upstream
// may have acted, so a retry must never run again. status is the reply's
// status, 0 when none is known; ev says why (EventNotKept, EventTooLarge).
func (st *procStream) notKept(status int, ev idempotency.Event) {
	if c := st.capture; c != nil {
		c.abort(st.ctx)
	}
	st.capture, st.settled = nil, true
	if st.stopRenew() {
		return
	}
	st.writeNotKept(status, ev)
}

func (st *procStream) writeNotKept(status int, ev idempotency.Event) {
	// The stream may be over (finish): the write must still happen.
	ctx := context.WithoutCancel(st.ctx)
	if err := st.s.gate.complete(ctx, *st.lease, idempotency.Response{Status: status, NotReplayable: true}); err != nil {
		st.count(err)
		return
	}
	if ev != idempotency.EventNotKept {
		st.event(ev)
	}
	st.event(idempotency.EventNotKept)
}

// stopRenew stops the renewer and reports whether it found the lease lost
// (then nothing more may be written under it). Every settlement passes
// here once: the time the lease was held is the route's latency sample.
func (st *procStream) stopRenew() bool {
	if !st.heldAt.IsZero() {
		st.s.gate.latency.Observe(st.route, st.s.gate.latency.since(st.heldAt))
		st.heldAt = time.Time{}
	}
	if st.renew == nil {
		return false
	}
	lost := st.renew.stop()
	st.renew = nil
	return lost
}

// count records a failed write under the lease.
func (st *procStream) count(err error) {
	if errors.Is(err, idempotency.ErrLeaseLost) {
		st.event(idempotency.EventLeaseLost)
		return
	}
	st.event(idempotency.EventStoreError)
}
