package tcp

import (
	"net"
	"sync/atomic"
)

// The door: accepted connections in their handshake hold one of
// Options.MaxHandshakes slots. A full door does not refuse the newcomer —
// that would let a stranger with a few dozen idle sockets shut out every
// restarted peer, new node and broken link. It makes room instead, by a
// rule that costs a flooder its own slots first:
//
//   - the victim's address is the one holding the most slots (the
//     newcomer's own counts), so an address with one handshake under way
//     keeps it while another holds more;
//   - of that address's connections, one that has sent nothing yet goes
//     before one that has (a client starts its handshake the moment it
//     connects; an idle socket never does), and the oldest first.
//
// On Linux the listener sets TCP_DEFER_ACCEPT (listenDeferred): the kernel
// hands a connection over only once its first bytes arrived, or after a
// second of silence. A legitimate dialer speaks first (its ClientHello or
// preamble), so it reaches a slot heard, however late its process got to
// send, and an idle socket reaches one only after its silence: a full
// door of idle sockets never closes a dialer that has spoken. Elsewhere a
// legitimate handshake, which takes milliseconds, is neither silent nor
// old, and loses its slot only if the door fills with newer connections
// that send bytes faster than it completes.

// slot is a connection in its handshake.
type slot struct {
	conn    net.Conn
	addr    string      // the remote host, without the port
	seq     uint64      // the order of acceptance
	heard   atomic.Bool // its first bytes arrived
	evicted atomic.Bool // closed to make room (counted when it was)
}

// slotInfo is what the door's rule reads of a slot.
type slotInfo struct {
	addr  string
	seq   uint64
	heard bool
}

// victim returns the index of the slot to close to make room for a
// newcomer from addr, among slots (at least one): the door's rule above.
// A pure function of its arguments. Every slot's address holds at least
// one slot, so some slot's address holds the most: the index is valid.
func victim(slots []slotInfo, addr string) int {
	count := map[string]int{addr: 1}
	for _, s := range slots {
		count[s.addr]++
	}
	most := 0
	for _, n := range count {
		most = max(most, n)
	}
	best := -1
	for i, s := range slots {
		if count[s.addr] != most {
			continue
		}
		if best < 0 || better(s, slots[best]) {
			best = i
		}
	}
	return best
}

// better reports whether a should be closed before b: silent before
// heard, then older first.
func better(a, b slotInfo) bool {
	if a.heard != b.heard {
		return !a.heard
	}
	return a.seq < b.seq
}

// remoteHost returns the host part of a connection's remote address.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// heardConn marks its slot heard at its first bytes.
type heardConn struct {
	net.Conn
	s *slot
}

func (c *heardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.s.heard.Load() {
		c.s.heard.Store(true)
	}
	return n, err
}
