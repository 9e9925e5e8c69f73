package authz

import (
	"context"
	"crypto/hmac"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// ReplayHandler is extauthz's replay endpoint: Envoy routes a request that
// ext_authz or ext_proc marked with a replay ticket here, and the handler
// streams the stored status, allow-listed headers and body from object
// storage, with Idempotent-Replayed: true. The body is copied in small
// buffers, verified (size and SHA-256) as it goes; memory does not grow
// with its size.
type ReplayHandler struct {
	replay *Replayer
	blobs  blob.Store
	events *IdempotencyMetrics
}

// NewReplayHandler serves replays of tickets signed by r, reading bodies
// from blobs.
func NewReplayHandler(r *Replayer, blobs blob.Store, events *IdempotencyMetrics) (*ReplayHandler, error) {
	switch {
	case r == nil:
		return nil, errors.New("envoy: NewReplayHandler: nil replayer")
	case envoy.IsNil(blobs):
		return nil, errors.New("envoy: NewReplayHandler: nil blob store")
	case events == nil:
		return nil, errors.New("envoy: NewReplayHandler: nil metrics")
	}
	return &ReplayHandler{replay: r, blobs: blobs, events: events}, nil
}

// apiReplay labels the endpoint's idempotency events.
const apiReplay = "replay"

// Events of the replay endpoint only (api "replay"), beside replayed and
// store_error.
const (
	// EventReplayForbidden: 403, no valid ticket for the request's key
	// (missing, forged, expired or another key's).
	EventReplayForbidden idempotency.Event = "forbidden"
	// EventReplayIdentity: 403, a valid ticket for the key without the
	// proof of the scope it was issued to: presented for another caller,
	// or leaked. Never expected from the shipped configs: worth an alert.
	EventReplayIdentity idempotency.Event = "identity_mismatch"
)

// ServeHTTP answers one replay. A missing, forged, expired or foreign
// ticket, or one presented for another caller, is 403 (the endpoint never
// says which, but counts it); a body that is gone is 503
// idempotency-replay-unavailable (the request already ran: it must not run
// again). A body that turns out corrupt after the status was sent aborts
// the connection, so the client sees a truncated reply (shorter than its
// Content-Length), never wrong bytes presented as complete.
func (h *ReplayHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	t, refused := h.ticket(req)
	if refused != "" {
		h.events.Count(apiReplay, t.Route, refused)
		writeReply(w, problemReply(Problem{Type: ProblemReplayForbidden,
			Title: "Not a valid replay", Status: http.StatusForbidden}))
		return
	}
	body, err := h.blobs.Open(req.Context(), t.Ref)
	if err != nil {
		h.events.Count(apiReplay, t.Route, idempotency.EventStoreError)
		writeReply(w, problemReplayUnavailable())
		return
	}
	defer body.Close()
	for _, hv := range t.Headers {
		w.Header().Add(hv.Name, hv.Value)
	}
	w.Header().Set(HeaderIdempotentReplayed, "true")
	w.Header().Set("Content-Length", strconv.FormatInt(t.Ref.Size, 10))
	w.WriteHeader(t.Status)
	if _, err := io.Copy(w, body); err != nil && !errors.Is(err, context.Canceled) {
		h.events.Count(apiReplay, t.Route, idempotency.EventStoreError)
		panic(http.ErrAbortHandler) // net/http closes the connection, quietly
	}
	h.events.Count(apiReplay, t.Route, idempotency.EventReplayed)
}

// ticket verifies the request's ticket, that it names the request's own
// Idempotency-Key and that the request carries the proof of the scope the
// ticket was issued to (the identity the decision that routed the request
// here computed; defence in depth: the ticket is already unforgeable). It
// returns the event to count when it refuses the request, "" when not; the
// ticket's route is set once its signature holds.
func (h *ReplayHandler) ticket(req *http.Request) (ticket, idempotency.Event) {
	vs := req.Header.Values(HeaderReplayTicket)
	if len(vs) != 1 {
		return ticket{}, EventReplayForbidden
	}
	t, err := h.replay.verify(vs[0])
	if err != nil {
		return ticket{}, EventReplayForbidden
	}
	keys := req.Header.Values(t.keyHeader())
	if len(keys) != 1 {
		return t, EventReplayForbidden
	}
	k, err := idempotency.ParseKey(keys[0])
	if err != nil || k != t.Key || t.Status < 200 || t.Status > 999 {
		return t, EventReplayForbidden
	}
	proofs := req.Header.Values(HeaderReplayScope)
	if len(proofs) != 1 || !hmac.Equal([]byte(proofs[0]), []byte(h.replay.scopeProof(t.Scope))) {
		return t, EventReplayIdentity
	}
	return t, ""
}

// writeReply sends a problem reply over plain HTTP.
func writeReply(w http.ResponseWriter, r *reply) {
	for _, hv := range r.headers {
		w.Header().Add(hv[0], hv[1])
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(r.body)))
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}
