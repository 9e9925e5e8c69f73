//go:build !race

package overlimit_test

const raceEnabled = false
