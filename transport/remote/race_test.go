//go:build race

package remote_test

// raceBuild: see needProcessPerHost.
const raceBuild = true
