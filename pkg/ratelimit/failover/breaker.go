package failover

import (
	"sync"
	"time"
)

// breaker is a consecutive-failure circuit breaker. Closed, calls pass;
// after threshold failures in a row it opens and refuses calls for coolDown;
// then it lets exactly one call through as a probe (half-open): success
// closes it, failure opens it for another coolDown.
type breaker struct {
	threshold int
	coolDown  time.Duration

	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero while closed
	probing   bool
	lastErr   error
}

// acquire reports whether a call may go to the primary now. A call that
// acquired must end with exactly one of success, failure or release.
func (b *breaker) acquire(now time.Time) bool {
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

func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures, b.openUntil, b.probing, b.lastErr = 0, time.Time{}, false, nil
}

// failure records a failed call; it reports whether the circuit is open now.
func (b *breaker) failure(now time.Time, err error) bool {
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

// release ends a call whose outcome says nothing about the primary (the
// caller went away), freeing the probe slot.
func (b *breaker) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// coolingDown reports whether the circuit is open and its cool-down not over.
func (b *breaker) coolingDown(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero() && now.Before(b.openUntil)
}

// state describes an open circuit: whether it is open, the failures in a
// row and the last error.
func (b *breaker) state() (open bool, failures int, lastErr error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero(), b.failures, b.lastErr
}
