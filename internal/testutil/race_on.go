//go:build race

package testutil

// Race reports whether the tests run under the race detector (they make
// their loads smaller there).
const Race = true
