// Package testclock is a manual clock for tests: time moves only when the
// test says so, so algorithm and expiry tests run at fixed instants without
// sleeping.
package testclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use. Pass its Now method
// where a component takes `func() time.Time`.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock standing at t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's current instant.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
