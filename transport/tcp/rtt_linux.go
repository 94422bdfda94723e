//go:build linux

package tcp

import (
	"context"
	"net"
	"syscall"
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

// deferAcceptSeconds is how long the kernel holds a new connection that
// has sent nothing before it hands it to Accept anyway (TCP_DEFER_ACCEPT).
const deferAcceptSeconds = 1

// listenDeferred listens on addr with TCP_DEFER_ACCEPT: the kernel hands
// a connection to Accept only once its first bytes arrived (a dialer's
// ClientHello or preamble, sent the moment it connects), or after about
// deferAcceptSeconds of silence. So a legitimate dialer reaches the
// door's slots with its first bytes waiting — heard, never the victim
// while a silent slot exists — however late its own process gets to
// send them, and an idle socket reaches them only after its silence.
// Where the option cannot be set the listener works without it.
func listenDeferred(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		_ = c.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, deferAcceptSeconds)
		})
		return nil
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
