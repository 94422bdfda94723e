package tcp

import "net"

// tcpConnOf returns the TCP connection under c — through TLS (anything
// with NetConn) — or nil if there is none (a test's pipe).
func tcpConnOf(c net.Conn) *net.TCPConn {
	for range 8 { // wrappers nest a few deep at most
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}
