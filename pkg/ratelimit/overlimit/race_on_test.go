//go:build race

package overlimit_test

// raceEnabled: the race detector's build moves some small slices from the
// stack to the heap, so allocation counts are exact only without it.
const raceEnabled = true
