// Package idempotency implements the Idempotency-Key lifecycle behind
// Envoy: a request takes a lease on (scope, key), runs once upstream, and its
// response is stored so that retries with the same key get it back.
//
// The lifecycle of one key:
//
//	Begin ──▶ Acquired(lease) ──▶ Complete  → COMPLETED: later Begins replay it
//	                          ├─▶ Release   → gone: a retry runs again
//	                          └─▶ (nothing) → the lease expires after its TTL
//	                          ├─▶ Complete(NotReplayable) → COMPLETED_NOT_REPLAYABLE:
//	                          │     the write ran but its reply was not kept;
//	                          │     later Begins answer Unreplayable, never run
//	Begin while IN_PROGRESS   → InProgress (answer 409, retry later)
//	Begin with another body   → Mismatch   (answer 422)
//
// Every write after Begin is a compare-and-set on the lease's owner token
// (fencing): a holder whose lease expired and was taken over by another
// request gets ErrLeaseLost instead of overwriting the newer owner's state.
//
// The package knows nothing of Envoy or gRPC. Stores live in subpackages
// (memstore, redisstore); this package holds the types they share, key
// validation, fingerprints, the replay-header allow-list and the names of
// the outcomes (Event) that pkg/envoy counts in metrics; it registers none.
package idempotency

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/internal/randtoken"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// Header is one HTTP header field. A name may appear more than once.
type Header struct {
	// Name is the field name, lower-cased.
	Name string
	// Value is the field value as received (may hold obs-text bytes).
	Value string
}

// Response is an upstream's answer: stored by Complete, returned on replay.
type Response struct {
	// Status is the HTTP status code, 100 to 599.
	Status int
	// Headers are the replayable headers (see ReplayHeaders), in order.
	Headers []Header
	// Body is the response body, any bytes. Empty when BodyRef is set.
	Body []byte
	// BodyRef, when set, names a body kept in object storage (see
	// pkg/idempotency/blob) instead of inline in the record.
	BodyRef *blob.Ref
	// NotReplayable marks a reply that ran upstream but could not be kept
	// (too large, cut short, unknown): the record only says the operation
	// happened, with Status when known (0 otherwise) and no headers or
	// body. A retry is told so and never runs again.
	NotReplayable bool
}

// TTLs bounds how long a key lives in each state.
type TTLs struct {
	// Lease is how long a request may hold the key IN_PROGRESS without
	// renewing it (e.g. 30s).
	Lease time.Duration
	// Record is how long a COMPLETED response is replayed (e.g. 24h).
	Record time.Duration
}

// Validate reports whether both TTLs are whole, positive milliseconds.
func (t TTLs) Validate() error {
	if t.Lease < time.Millisecond || t.Record < time.Millisecond {
		return fmt.Errorf("%w: lease %s and record %s must be at least 1ms", ErrInvalidTTL, t.Lease, t.Record)
	}
	return nil
}

// Lease is the right to run the request of one key and store its response.
// It is a plain value so that it can travel between processes (ext_authz
// takes it, ext_proc completes it, possibly on another replica).
type Lease struct {
	// Scope isolates keys (the tenant); keys never collide across scopes.
	Scope string
	// Key is the validated Idempotency-Key (see ParseKey).
	Key string
	// Token is the owner token: random, 128 bits, hex. Complete, Release
	// and Renew succeed only while the stored token equals it.
	Token string
	// TTLs are the lease and record lifetimes chosen at Begin.
	TTLs TTLs
}

// OutcomeKind says what Begin found.
type OutcomeKind int

// The outcomes of Begin.
const (
	// Acquired: the key was free; the caller holds Outcome.Lease.
	Acquired OutcomeKind = iota + 1
	// Replay: the key is COMPLETED with the same fingerprint; Outcome.Response holds it.
	Replay
	// InProgress: another request holds the key; retry after Outcome.RetryAfter.
	InProgress
	// Mismatch: the key was used with a different fingerprint.
	Mismatch
	// Unreplayable: the key is COMPLETED with the same fingerprint but its
	// reply was not kept; Outcome.Response holds the status (0 if unknown).
	Unreplayable
)

// String returns the outcome's metric-friendly name.
func (k OutcomeKind) String() string {
	switch k {
	case Acquired:
		return "acquired"
	case Replay:
		return "replay"
	case InProgress:
		return "in_progress"
	case Mismatch:
		return "mismatch"
	case Unreplayable:
		return "unreplayable"
	}
	return "unknown"
}

// Outcome is the result of Begin.
type Outcome struct {
	// Kind says which of the other fields is set.
	Kind OutcomeKind
	// Lease is set when Kind is Acquired.
	Lease Lease
	// Response is set when Kind is Replay or Unreplayable.
	Response Response
	// RetryAfter is, when Kind is InProgress, the time left on the
	// current holder's lease (at least 1ms).
	RetryAfter time.Duration
}

// Store keeps idempotency records. Implementations are safe for concurrent
// use; each method is atomic with respect to the others on the same key.
// Errors are backend failures or misuse, never "key in use" (an Outcome).
type Store interface {
	// Begin takes the lease of (scope, key) if the key is free, or reports
	// what holds it. fp is compared with the stored fingerprint: any
	// difference is a Mismatch, whatever the state.
	Begin(ctx context.Context, scope, key string, fp Fingerprint, ttls TTLs) (Outcome, error)
	// Complete stores resp as the key's COMPLETED record for
	// lease.TTLs.Record (resp.NotReplayable: a record that only says the
	// operation ran). ErrLeaseLost when the lease is no longer held;
	// ErrTooLarge when the body exceeds the store's cap (the lease is kept:
	// complete it NotReplayable). Completing again with the same lease
	// succeeds and changes nothing (a re-sent command is harmless).
	Complete(ctx context.Context, lease Lease, resp Response) error
	// Release deletes the key so that a retry runs again. Only for a
	// request that certainly never reached the upstream. ErrLeaseLost when
	// another owner holds the key or it is completed; a free key is
	// already released (nil), so a re-sent Release is harmless.
	Release(ctx context.Context, lease Lease) error
	// Renew extends the lease by lease.TTLs.Lease from now; ErrLeaseLost
	// when the lease is no longer held.
	Renew(ctx context.Context, lease Lease) error
	// Close releases the store's resources; it is safe to call twice.
	Close() error
}

// Errors callers branch on.
var (
	// ErrLeaseLost means the lease expired, was released or was taken over:
	// the caller must not act as the key's owner any more.
	ErrLeaseLost = errors.New("idempotency lease lost")
	// ErrInvalidKey means an Idempotency-Key failed validation.
	ErrInvalidKey = errors.New("invalid idempotency key")
	// ErrInvalidTTL means a TTL was missing or below one millisecond.
	ErrInvalidTTL = errors.New("invalid idempotency ttl")
	// ErrInvalidResponse means a Response cannot be stored (bad status or header).
	ErrInvalidResponse = errors.New("invalid idempotency response")
	// ErrTooLarge means a response body exceeds the store's cap.
	ErrTooLarge = errors.New("idempotency response too large")
	// ErrClosed means the store was used after Close.
	ErrClosed = errors.New("idempotency store closed")
	// ErrUnavailable means the store was not asked: its backend kept
	// failing and a circuit breaker refuses calls for a while (see
	// pkg/idempotency/guard). Callers treat it as a store failure.
	ErrUnavailable = errors.New("idempotency store unavailable")
)

// NewToken returns a fresh owner token: 128 random bits in hex.
func NewToken() string { return randtoken.Hex(16) }

// CheckBegin validates Begin's arguments; stores call it first.
func CheckBegin(key string, ttls TTLs) error {
	if !ValidKey(key) {
		return fmt.Errorf("%w: must be 1 to %d printable ASCII characters", ErrInvalidKey, MaxKeyLen)
	}
	return ttls.Validate()
}

// CheckLease validates a lease passed to Complete, Release or Renew.
func CheckLease(l Lease) error {
	if !ValidKey(l.Key) {
		return fmt.Errorf("%w: lease key", ErrInvalidKey)
	}
	if l.Token == "" {
		return fmt.Errorf("%w: lease has no token", ErrLeaseLost)
	}
	return l.TTLs.Validate()
}

// CheckResponse validates a response for Complete against a body cap
// (maxBody <= 0 means no cap): status, at most MaxReplayHeaders valid
// header fields, body size.
func CheckResponse(r Response, maxBody int64) error {
	if r.NotReplayable {
		return checkNotReplayable(r)
	}
	if r.Status < 100 || r.Status > 599 {
		return fmt.Errorf("%w: status %d", ErrInvalidResponse, r.Status)
	}
	if err := checkRef(r); err != nil {
		return err
	}
	if maxBody > 0 && int64(len(r.Body)) > maxBody {
		return fmt.Errorf("%w: %d bytes, cap %d", ErrTooLarge, len(r.Body), maxBody)
	}
	// A record holds at most MaxReplayHeaders fields (the Redis codec
	// refuses to decode more): a longer list is refused here rather than
	// stored and then never replayable.
	if len(r.Headers) > MaxReplayHeaders {
		return fmt.Errorf("%w: %d header fields, at most %d", ErrInvalidResponse, len(r.Headers), MaxReplayHeaders)
	}
	for _, h := range r.Headers {
		if !ValidHeaderName(h.Name) || !ValidHeaderValue(h.Value) {
			return fmt.Errorf("%w: header %q", ErrInvalidResponse, h.Name)
		}
	}
	return nil
}

// checkNotReplayable: a not-replayable record keeps a status (0 = unknown)
// and nothing else.
func checkNotReplayable(r Response) error {
	switch {
	case r.Status != 0 && (r.Status < 100 || r.Status > 599):
		return fmt.Errorf("%w: status %d", ErrInvalidResponse, r.Status)
	case len(r.Headers) != 0 || len(r.Body) != 0 || r.BodyRef != nil:
		return fmt.Errorf("%w: a not-replayable response carries no headers or body", ErrInvalidResponse)
	}
	return nil
}

// checkRef: a body in object storage leaves Body empty and names an object
// by a non-empty name, a size and a hex SHA-256.
func checkRef(r Response) error {
	ref := r.BodyRef
	if ref == nil {
		return nil
	}
	if len(r.Body) != 0 || ref.Name == "" || ref.Size < 0 || len(ref.SHA256) != 64 {
		return fmt.Errorf("%w: body reference %+v with %d inline bytes", ErrInvalidResponse, *ref, len(r.Body))
	}
	if _, err := hex.DecodeString(ref.SHA256); err != nil {
		return fmt.Errorf("%w: body reference sha256 %q", ErrInvalidResponse, ref.SHA256)
	}
	return nil
}

// Equal reports whether r and o are the same response (header order
// included).
func (r Response) Equal(o Response) bool {
	if r.Status != o.Status || r.NotReplayable != o.NotReplayable || string(r.Body) != string(o.Body) ||
		len(r.Headers) != len(o.Headers) || (r.BodyRef == nil) != (o.BodyRef == nil) {
		return false
	}
	if r.BodyRef != nil && *r.BodyRef != *o.BodyRef {
		return false
	}
	for i := range r.Headers {
		if r.Headers[i] != o.Headers[i] {
			return false
		}
	}
	return true
}

// Clone returns a deep copy of r, so that stores never alias caller memory.
func (r Response) Clone() Response {
	c := Response{Status: r.Status, NotReplayable: r.NotReplayable}
	if r.Headers != nil {
		c.Headers = append([]Header(nil), r.Headers...)
	}
	if r.Body != nil {
		c.Body = append([]byte(nil), r.Body...)
	}
	if r.BodyRef != nil {
		ref := *r.BodyRef
		c.BodyRef = &ref
	}
	return c
}
