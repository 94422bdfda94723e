//go:build !linux

package tcp

import (
	"net"
	"time"
)

// connRTT reports no round-trip time: it is read from the kernel on
// Linux only.
func connRTT(net.Conn) (time.Duration, bool) { return 0, false }
