package idempotency

import "slices"

// Event names an idempotency outcome; pkg/envoy counts them in metrics.
type Event string

// The counted events (label values of extauthz_idempotency_events_total).
const (
	EventAcquired    Event = "acquired"     // a lease was taken; the request goes upstream
	EventReplayed    Event = "replayed"     // a stored response was replayed
	EventConflict    Event = "conflict"     // 409: the key is in flight
	EventMismatch    Event = "mismatch"     // 422: the key was used with another request
	EventMissing     Event = "missing"      // 400: a required key is absent
	EventMalformed   Event = "malformed"    // 400: the key is not valid
	EventStored      Event = "stored"       // the upstream's response was stored
	EventReleased    Event = "released"     // the lease was released: a retry runs again
	EventKept        Event = "kept"         // no longer counted: unknown outcomes are not_kept
	EventTooLarge    Event = "too_large"    // the response exceeded the cap: not kept
	EventLeaseLost   Event = "lease_lost"   // fencing refused a stale owner
	EventStoreError  Event = "store_error"  // the store failed
	EventFailOpen    Event = "fail_open"    // store failed; admitted without a lease
	EventUnavailable Event = "unavailable"  // store failed; answered 503 (fail-closed)
	EventSkipped     Event = "skipped"      // a local reply was not stored
	EventBodyTooBig  Event = "request_body" // the request body could not be fingerprinted
)

// Events of replies that ran but were not kept (completed, not replayable).
const (
	// EventNotKept: a reply ran but could not be kept; its key is
	// completed as not replayable.
	EventNotKept Event = "not_kept"
	// EventUnreplayable: 409, a retry of a key whose reply was not kept.
	EventUnreplayable Event = "unreplayable"
)

var allEvents = []Event{
	EventAcquired, EventReplayed, EventConflict, EventMismatch, EventMissing, EventMalformed,
	EventStored, EventReleased, EventKept, EventTooLarge, EventLeaseLost, EventStoreError,
	EventFailOpen, EventUnavailable, EventSkipped, EventBodyTooBig, EventNotKept, EventUnreplayable,
}

// Events returns every event, in a fixed order (so that a metrics adapter
// can create each series before the first is counted).
func Events() []Event { return slices.Clone(allEvents) }
