//go:build !race

package main

// raceBuild reports whether the tests run under the race detector.
const raceBuild = false
