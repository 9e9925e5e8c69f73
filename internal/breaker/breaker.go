// Package breaker is a consecutive-failure circuit breaker shared by the
// stores that sit in front of Redis (rate limits, idempotency, in-flight
// slots), with a Set of one breaker per node and a Guard that runs a
// store's calls through it. Closed,
// calls pass; after Threshold failures in a row it opens and refuses calls
// for the cool-down; then it lets exactly one call through as a probe
// (half-open): success closes it, failure opens it for another cool-down.
//
// Time is a parameter (now), so callers inject their clock and tests run at
// fixed instants. The breaker does not classify errors: the caller decides
// which outcomes say something about the backend (Success, Failure) and
// which do not (Release).
package breaker

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrInvalid means New was given a threshold below 1 or a cool-down of zero
// or less.
var ErrInvalid = errors.New("invalid circuit breaker settings")

// Breaker is safe for concurrent use.
type Breaker struct {
	threshold int
	coolDown  time.Duration

	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero while closed
	probing   bool
	lastErr   error
}

// State describes the breaker at one instant.
type State struct {
	// Open is true from the failure that opened the circuit until a
	// success closes it (cooling down or half-open).
	Open bool
	// Failures is the number of failures in a row.
	Failures int
	// LastErr is the last failure's error; nil after a success.
	LastErr error
}

// New returns a closed breaker that opens after threshold failures in a row
// and skips the backend for coolDown before each probe.
func New(threshold int, coolDown time.Duration) (*Breaker, error) {
	if threshold < 1 || coolDown <= 0 {
		return nil, fmt.Errorf("%w: threshold %d (want >= 1), cool-down %s (want > 0)", ErrInvalid, threshold, coolDown)
	}
	return &Breaker{threshold: threshold, coolDown: coolDown}, nil
}

// Acquire reports whether a call may go to the backend now: always while
// closed, never while cooling down, and for one caller at a time (the
// probe) once the cool-down is over. A call that acquired must end with
// exactly one of Success, Failure or Release.
func (b *Breaker) Acquire(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

// Success records a call the backend answered; it closes the circuit.
// Callers may also use it to close the circuit after an out-of-band health
// check succeeded.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures, b.openUntil, b.probing, b.lastErr = 0, time.Time{}, false, nil
}

// Failure records a failed call at now; it reports whether the circuit is
// open afterwards. A failed probe, or the threshold-th failure in a row,
// (re)starts the cool-down.
func (b *Breaker) Failure(now time.Time, err error) (open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	b.lastErr = err
	if b.probing || b.failures >= b.threshold {
		b.openUntil = now.Add(b.coolDown)
	}
	b.probing = false
	return !b.openUntil.IsZero()
}

// Release ends a call whose outcome says nothing about the backend (bad
// input, a caller that went away), freeing the probe slot without changing
// the failure count.
func (b *Breaker) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// CoolingDown reports whether the circuit is open and its cool-down not
// over at now.
func (b *Breaker) CoolingDown(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero() && now.Before(b.openUntil)
}

// State returns whether the circuit is open, the failures in a row and the
// last error.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return State{Open: !b.openUntil.IsZero(), Failures: b.failures, LastErr: b.lastErr}
}
