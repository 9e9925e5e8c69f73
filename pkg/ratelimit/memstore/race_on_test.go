//go:build race

package memstore

// raceEnabled shortens the heaviest tests under the race detector, which
// slows them tenfold without making them any more searching.
const raceEnabled = true
