// Package blob keeps large idempotent response bodies outside the record
// store, in object storage, so that a reply of any size up to a route's
// max_stored_body_bytes can be replayed. A record refers to its body by Ref
// (name, size, SHA-256); the body is written before the record commits and
// expires with it.
//
// The package knows nothing of Envoy, gRPC or a particular object store:
// adapters (S3-compatible storage) live in subpackages, like the record
// stores.
package blob

import (
	"context"
	"errors"
	"io"
	"time"
)

// Ref names a committed body.
type Ref struct {
	// Name is the object's name within the store (derived from the
	// record's key hash, never from raw client input).
	Name string
	// Size is the body's length in bytes.
	Size int64
	// SHA256 is the lowercase hex SHA-256 of the body.
	SHA256 string
}

// Store keeps bodies. Implementations are safe for concurrent use. Errors
// are backend failures, or ErrNotFound for a body that is gone.
type Store interface {
	// Create starts a body under name that expires after ttl (the record's
	// TTL). Nothing is readable under name until the Writer commits.
	Create(ctx context.Context, name string, ttl time.Duration) (Writer, error)
	// Open streams a committed body. The reader fails if the bytes read do
	// not match ref's size and SHA-256.
	Open(ctx context.Context, ref Ref) (io.ReadCloser, error)
	// Delete removes a body; a missing one is not an error.
	Delete(ctx context.Context, name string) error
	// Close releases the store's resources; safe to call twice.
	Close() error
}

// Writer receives one body, in order.
type Writer interface {
	io.Writer
	// Commit makes the body readable and returns its reference.
	Commit(ctx context.Context) (Ref, error)
	// Abort discards what was written. Safe after a failed Commit and
	// safe to call twice.
	Abort(ctx context.Context) error
}

// Errors callers branch on.
var (
	// ErrNotFound means the body is gone (expired or deleted).
	ErrNotFound = errors.New("blob not found")
	// ErrCorrupt means the bytes read did not match the reference.
	ErrCorrupt = errors.New("blob does not match its reference")
)
