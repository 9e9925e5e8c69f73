package envoy

import (
	"errors"
	"strconv"
	"strings"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// capture is a response being buffered to be stored.
type capture struct {
	status  int
	headers headerList
	body    []byte
}

// settlement is what becomes of a held lease once the response is known.
type settlement int

const (
	settleStore   settlement = iota // a real reply with a stored status: Complete
	settleRelease                   // nothing ran, or a real reply not stored: Release
	settleKeep                      // the upstream may have run: keep until the TTL
)

// viaUpstream is response.code_details of a reply that came from the upstream.
const viaUpstream = "via_upstream"

// settle decides a lease's fate from the response headers (DESIGN §4).
//
//   - No settings (the route left the policy): keep, nothing to judge by.
//   - A local reply (code_details other than via_upstream, or our own
//     Idempotent-Replayed marker) is never stored: Release when the flags
//     say the request never reached the upstream, else keep.
//   - Without code_details (response_attributes not configured) a 504 is
//     taken for the router's timeout: keep.
//   - A real reply: stored statuses are stored, everything else (5xx
//     included) is Released so that a retry runs again.
func settle(id *policy.Idempotency, status int, hs headerList, details string, detailsKnown bool, flags responseFlags) settlement {
	_, marker := hs.get(HeaderIdempotentReplayed)
	switch {
	case id == nil:
		return settleKeep
	case marker || (detailsKnown && details != viaUpstream):
		if flags.neverForwarded() {
			return settleRelease
		}
		return settleKeep
	case !detailsKnown && status == 504:
		return settleKeep
	case id.StoresStatus(status):
		return settleStore
	}
	return settleRelease
}

// responseHeaders settles the lease, or starts buffering the response.
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
		st.release(idempotency.EventReleased)
	case settleKeep:
		st.keep()
	default:
		if cl, _ := hs.get("content-length"); declaredOver(cl, st.id.MaxBodyBytes) {
			st.release(idempotency.EventTooLarge)
			break
		}
		st.capture = &capture{status: status, headers: hs}
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

// responseBody buffers the body; its end completes the record. In
// BUFFERED mode the one body message is the whole body, end_of_stream
// false when trailers follow (Envoy sends none with the trailer mode SKIP);
// a reply reset mid-body sends no body message at all.
func (st *procStream) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if c := st.capture; c != nil && !st.settled {
		c.body = append(c.body, b.GetBody()...)
		switch {
		case int64(len(c.body)) > st.id.MaxBodyBytes:
			st.release(idempotency.EventTooLarge)
		case b.GetEndOfStream(), st.modeKnown && st.respMode == filterv3.ProcessingMode_BUFFERED:
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

// complete stores the captured response under the lease.
func (st *procStream) complete() {
	c := st.capture
	st.capture, st.settled = nil, true
	if st.stopRenew() {
		return
	}
	resp := idempotency.Response{Status: c.status, Headers: idempotency.ReplayHeaders(c.headers, st.id.ReplayHeader), Body: c.body}
	err := st.s.gate.complete(st.ctx, *st.lease, resp)
	switch {
	case err == nil:
		st.s.gate.events.Count(apiExtProc, idempotency.EventStored)
	case errors.Is(err, idempotency.ErrTooLarge):
		st.settled = false
		st.release(idempotency.EventTooLarge)
	default:
		st.count(err)
	}
}

// release deletes the lease so that a retry runs; ev says why.
func (st *procStream) release(ev idempotency.Event) {
	st.capture, st.settled = nil, true
	if st.stopRenew() {
		return
	}
	if ev == idempotency.EventTooLarge {
		st.s.gate.events.Count(apiExtProc, ev)
	}
	if err := st.s.gate.release(st.ctx, *st.lease); err != nil {
		st.count(err)
		return
	}
	st.s.gate.events.Count(apiExtProc, idempotency.EventReleased)
}

// keep leaves the lease to expire at its TTL.
func (st *procStream) keep() {
	st.capture, st.settled = nil, true
	if !st.stopRenew() {
		st.s.gate.events.Count(apiExtProc, idempotency.EventKept)
	}
}

// stopRenew stops the renewer and reports whether it found the lease lost
// (then nothing more may be written under it).
func (st *procStream) stopRenew() bool {
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
		st.s.gate.events.Count(apiExtProc, idempotency.EventLeaseLost)
		return
	}
	st.s.gate.events.Count(apiExtProc, idempotency.EventStoreError)
}
