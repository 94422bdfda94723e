//go:build linux

package tcp

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// connRTT returns the kernel's smoothed round-trip time of the TCP
// connection under c (TCP_INFO), and whether it could be read.
func connRTT(c net.Conn) (time.Duration, bool) {
	tc := tcpConnOf(c)
	if tc == nil {
		return 0, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil || info.Rtt == 0 {
		return 0, false
	}
	return time.Duration(info.Rtt) * time.Microsecond, true
}

// bytesWaiting reports whether bytes received on the TCP connection under
// c wait to be read (SIOCINQ): a client that sent its first bytes, which
// the host has not read yet.
func bytesWaiting(c net.Conn) bool {
	tc := tcpConnOf(c)
	if tc == nil {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n > 0
}
