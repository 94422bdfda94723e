//go:build !race

package tests

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
