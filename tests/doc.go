// Package tests holds berth's cross-package integration, randomized and
// spec-verification suites. It has no code of its own; run it with
// go test ./tests (add -long for the long randomized runs).
package tests
