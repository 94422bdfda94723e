//go:build !race

package payload

const raceEnabled = false
