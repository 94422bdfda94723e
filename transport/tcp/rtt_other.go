//go:build !linux

package tcp

import (
	"net"
	"time"
)

// connRTT reports no round-trip time: it is read from the kernel on
// Linux only.
func connRTT(net.Conn) (time.Duration, bool) { return 0, false }

// bytesWaiting reports false: it is read from the kernel on Linux only
// (elsewhere a slot is heard once the host read its first bytes).
func bytesWaiting(net.Conn) bool { return false }
