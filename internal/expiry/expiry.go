// Package expiry holds what every in-process map of expiring entries needs
// (the quota demand store, the in-flight memory store, the RLQS allocation
// cache): a schedule that says when a write should also sweep the whole
// map, and the sweep itself. Time is a parameter, so callers inject their
// clock.
package expiry

import "time"

// Schedule says when a sweep is due: at most once per Every, on a call that
// happens anyway (a write), so that no goroutine is needed and a map nobody
// touches costs nothing. The zero value with Every set is ready: its first
// Due is true. Not safe for concurrent use: callers hold their map's lock.
type Schedule struct {
	// Every is the least time between two sweeps.
	Every time.Duration
	last  time.Time
	swept bool
}

// Due reports whether a sweep should run at now, and if so records now as
// the last sweep. A clock that stepped back behind the last sweep makes one
// due, so that a step back cannot postpone sweeps by the size of the step.
func (s *Schedule) Due(now time.Time) bool {
	if s.swept && now.Sub(s.last) < s.Every && !now.Before(s.last) {
		return false
	}
	s.last, s.swept = now, true
	return true
}

// Prune deletes the entries of m for which live is false and returns how
// many remain.
func Prune[K comparable, V any](m map[K]V, live func(V) bool) int {
	for k, v := range m {
		if !live(v) {
			delete(m, k)
		}
	}
	return len(m)
}

// PruneGroups prunes every group of m and deletes the groups left empty.
func PruneGroups[G, K comparable, V any](m map[G]map[K]V, live func(V) bool) {
	for g, entries := range m {
		if Prune(entries, live) == 0 {
			delete(m, g)
		}
	}
}
