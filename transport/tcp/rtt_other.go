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

// listenDeferred listens on addr: TCP_DEFER_ACCEPT is set on Linux only.
func listenDeferred(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
