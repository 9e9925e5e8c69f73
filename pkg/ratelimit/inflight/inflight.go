// Package inflight limits how many requests for one key may run at once (a
// concurrency limit, "at most 10 requests of tenant acme in flight"), the
// limit a rate limit cannot express: slow requests pile up within any
// per-second budget. It knows nothing of Envoy; pkg/envoy takes a slot when
// it admits a request and releases it when the request ends.
//
// A slot is a lease: Acquire takes one of limit slots for a key and names it
// by an opaque Slot token; Renew extends it while the request runs; Release
// frees it, exactly once. Every slot expires after its ttl, so a release
// that never comes (a crashed replica, a lost stream) cannot leak a slot
// forever.
//
// Guarantees of every Store:
//   - Never more than limit live (unexpired, unreleased) slots per key in
//     the store: Acquire counts and adds in one atomic step.
//   - Release and Renew act only on the slot their token names: a released
//     or expired token never frees or extends another holder's slot, and
//     releasing twice frees once.
//   - After a holder crashes its slot stays held until its ttl runs out.
//     That is the bound on over-conservatism: for at most one ttl (renewed
//     slots: one ttl after the last renewal) the key admits one request
//     fewer per lost slot. Renewing often with a short ttl keeps it small.
//   - The clock is the store's own: Redis TIME for the Redis store, so the
//     replicas' clocks never disagree about expiry; the injected clock for
//     the memory store.
//
// Errors are backend failures only; being over the limit is a Result.
package inflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/keypart"
	"github.com/extauthz/extauthz/internal/randtoken"
)

// Slot names one held slot: an opaque, unguessable token.
type Slot string

// Result is the outcome of one Acquire.
type Result struct {
	// Acquired reports whether a slot was taken.
	Acquired bool
	// InFlight is the number of live slots for the key after the call
	// (including the one taken, when Acquired).
	InFlight int
	// Limit is the limit the call was made with.
	Limit int
	// RetryAfter, when not Acquired, is the time until the soonest slot
	// expires: an upper bound on the wait, as a release may come sooner.
	// Zero when Acquired.
	RetryAfter time.Duration
}

// Store holds the slots of every key. Implementations are safe for
// concurrent use.
type Store interface {
	// Acquire atomically takes one of limit slots for key if fewer than
	// limit live slots are held; the slot expires after ttl. Not acquiring
	// is a Result, not an error.
	Acquire(ctx context.Context, key string, limit int, ttl time.Duration) (Slot, Result, error)
	// Renew makes the held slot expire ttl from now. It reports false when
	// the slot has expired or was released.
	Renew(ctx context.Context, key string, slot Slot, ttl time.Duration) (bool, error)
	// Release frees the slot. It reports false when the slot was already
	// released or has expired; it never frees another slot.
	Release(ctx context.Context, key string, slot Slot) (bool, error)
}

// Held is a key's live slots at one instant (Inspector).
type Held struct {
	// Slots is the number of live (unexpired, unreleased) slots.
	Slots int
	// NextExpiry is the time until the soonest of them expires (an upper
	// bound on the wait for one to free); 0 without slots.
	NextExpiry time.Duration
	// Where names the slots in the backend (the Redis key); empty for the
	// memory store.
	Where string
}

// Inspector reads a key's slots without taking, renewing or releasing
// any (for operators: the admin API's explain). The stores of this module
// implement it.
type Inspector interface {
	Held(ctx context.Context, key string) (Held, error)
}

// ErrUnavailable means the store refused a call without trying its
// backend (a circuit breaker open after consecutive failures; see package
// guard): a backend failure like any other.
var ErrUnavailable = errors.New("inflight: store unavailable")

// ErrInvalid means Acquire or Renew was called with a limit below 1 or a
// ttl below one millisecond: a configuration error, never request input.
var ErrInvalid = errors.New("inflight: invalid argument")

// CheckAcquire validates Acquire's arguments; stores call it first.
func CheckAcquire(limit int, ttl time.Duration) error {
	if limit < 1 {
		return fmt.Errorf("%w: limit %d below 1", ErrInvalid, limit)
	}
	return CheckTTL(ttl)
}

// CheckTTL validates a slot ttl: at least one millisecond, the resolution
// of the Redis store.
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl %v below 1ms", ErrInvalid, ttl)
	}
	return nil
}

// NewSlot returns a fresh random slot token.
func NewSlot() Slot { return Slot(randtoken.Hex(16)) }

// StorageKey returns key escaped for use inside a Redis hash tag: it never
// holds '{', '}' or ':', and distinct keys never share a result; a key
// longer than 128 bytes after escaping becomes "#" + its hex SHA-256.
func StorageKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	keypart.Write(&b, key, "%{}:#")
	return b.String()
}
