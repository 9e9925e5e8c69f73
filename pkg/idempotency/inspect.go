package idempotency

import (
	"context"
	"errors"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// RecordState is the state of a stored key, as an operator reads it.
type RecordState string

// The states of a stored key.
const (
	// StateInProgress: a request holds the lease and runs upstream.
	StateInProgress RecordState = "in_progress"
	// StateCompleted: the response is stored and replayed.
	StateCompleted RecordState = "completed"
	// StateNotReplayable: the request ran; its response was not kept.
	StateNotReplayable RecordState = "completed_not_replayable"
)

// Record is what an operator sees of one stored key (see Inspector).
type Record struct {
	// State of the key.
	State RecordState
	// Owner is the owner token of the lease that took (and, once
	// completed, completed) the key.
	Owner string
	// Fingerprint is the hex fingerprint of the request that took the key.
	Fingerprint string
	// ExpiresIn is the time left before the key is forgotten (the lease
	// while in progress, the record TTL once completed).
	ExpiresIn time.Duration
	// Status and Headers are the stored response's status and header
	// count; zero while in progress.
	Status, Headers int
	// BodyBytes is the size of the stored body, decoded; BodyRef is set
	// when the body lives in object storage instead of in the record.
	BodyBytes int64
	BodyRef   *blob.Ref
	// Location names where the record lives (the Redis key, or "memory").
	Location string
}

// Inspector is a Store that operators can look into (the admin API). Its
// methods take no lease: they are for people, not for the request path.
type Inspector interface {
	// Inspect returns the record of (scope, key); false when there is none.
	Inspect(ctx context.Context, scope, key string) (Record, bool, error)
	// Delete removes the record of (scope, key) and returns what it was;
	// false when there was none. A record in progress is deleted only when
	// force is set, ErrInFlight otherwise: its request may still complete,
	// and a retry would then run a second time.
	Delete(ctx context.Context, scope, key string, force bool) (Record, bool, error)
}

// ErrInFlight means Delete was refused for a record in progress.
var ErrInFlight = errors.New("idempotency record in flight")
