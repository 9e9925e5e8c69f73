//go:build race

package overlimit_test

// raceEnabled: the race detector's build keeps some small slices off the
// stack, so allocation counts are exact only without it.
const raceEnabled = true
