package tcp

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/berthrt/berth/transport"
)

// The listener part (accept): the connections peers open to this host.
//
// Owns: the accept loop (a goroutine from Listen), which gives each
// connection a handshake slot (door.go: a full door makes room by closing
// its victim) and starts its serve goroutine; serve and identify — the
// TLS handshake, the preamble and the check that the certificate names
// the member the preamble claims, within Options.HandshakeTimeout (a
// deadline from time.Now), then the answer with Options.MaxItem — after
// which serve reads the connection (readLoop, link.go) as the one the
// peer writes on; refuse, which counts and logs a refused connection.
// Lock: Transport.mu for the slots (handshakes, accepted, shut), never
// during a handshake; identify takes peer.mu under Transport.mu (read)
// and releases Transport.mu once it holds peer.mu.
// May call: door.go (slot, victim, heardConn, remoteHost), bytesWaiting
// (rtt_*.go), tls.go (identity, the server config), frame.go
// (readPreamble, appendAccept), link.go (readLoop).
// Invariants: at most Options.MaxHandshakes connections hold a slot; no
// frame of a connection reaches a session before the connection is
// attributed to its peer; a connection refused, evicted, or from a member
// that is not a peer is closed; once the links end (shut) none is taken;
// a newer connection from a peer replaces the older one before the peer
// hears it was accepted.

// acceptLoop takes the connections peers open.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-t.stop:
				return
			case <-time.After(minBackoff): // out of descriptors, say: try again
			}
			continue
		}
		s := &slot{conn: c, addr: remoteHost(c)}
		t.mu.Lock()
		if t.shut {
			t.mu.Unlock()
			_ = c.Close()
			continue
		}
		var out *slot
		if len(t.handshakes) >= t.opts.MaxHandshakes {
			out = t.makeRoomLocked(s.addr)
		}
		t.accepted++
		s.seq = t.accepted
		t.handshakes[c] = s
		t.wg.Add(1)
		t.mu.Unlock()
		if out != nil {
			// Its serve sees the connection fail and counts nothing more.
			t.refuse("closed to make room for a new connection (too many in their handshake)", out.conn, nil)
			_ = out.conn.Close()
		}
		go t.serve(s)
	}
}

// makeRoomLocked takes the door's victim (door.go) out of the handshakes
// for a newcomer from addr, marked evicted; the caller closes it after
// the lock. Under t.mu.
func (t *Transport) makeRoomLocked(addr string) *slot {
	all := make([]*slot, 0, len(t.handshakes))
	info := make([]slotInfo, 0, len(t.handshakes))
	for _, s := range t.handshakes {
		all = append(all, s)
		info = append(info, slotInfo{addr: s.addr, seq: s.seq, heard: s.heard.Load()})
	}
	// A slot not marked heard may have bytes waiting that its goroutine
	// has not read yet (a starved host reads late): heard, then.
	i := victim(info, addr)
	for n := 0; n < len(all) && !info[i].heard && bytesWaiting(all[i].conn); n++ {
		all[i].heard.Store(true)
		info[i].heard = true
		i = victim(info, addr)
	}
	out := all[i]
	out.evicted.Store(true)
	delete(t.handshakes, out.conn)
	return out
}

// refuse counts and logs (rate-limited) a refused connection.
func (t *Transport) refuse(why string, c net.Conn, err error) {
	t.refused.Add(1)
	t.logs.refused.Warn(t.log, "tcp: refused a connection: "+why, "remote", c.RemoteAddr().String(), "err", err)
}

// serve runs one accepted connection: its handshake and preamble, within
// Options.HandshakeTimeout, then its frames, attributed to the peer it was
// authenticated as.
func (t *Transport) serve(s *slot) {
	defer t.wg.Done()
	raw := s.conn
	conn, p, ok := t.identify(s)
	t.mu.Lock()
	if t.handshakes[raw] == s {
		delete(t.handshakes, raw)
	}
	t.mu.Unlock()
	if !ok {
		_ = raw.Close()
		return
	}
	t.readLoop(p, conn)
}

// identify runs the handshake and preamble of an accepted connection and
// attaches it to its peer as the connection the peer writes on.
func (t *Transport) identify(s *slot) (net.Conn, *peer, bool) {
	raw := s.conn
	_ = raw.SetDeadline(time.Now().Add(t.opts.HandshakeTimeout))
	refuse := func(why string, err error) {
		if !s.evicted.Load() { // else counted when it was closed
			t.refuse(why, raw, err)
		}
	}
	conn := net.Conn(&heardConn{Conn: raw, s: s})
	var cert *tls.ConnectionState
	if st := t.tlsNow.Load(); st != nil {
		tc := tls.Server(conn, st.server)
		if err := tc.HandshakeContext(t.dialCtx); err != nil {
			refuse("TLS handshake", err)
			return nil, nil, false
		}
		cs := tc.ConnectionState()
		cert, conn = &cs, tc
	}
	br := bufio.NewReaderSize(conn, len(preambleMagic)+2+2*maxName)
	from, to, err := readPreamble(br)
	if err != nil {
		refuse("preamble", err)
		return nil, nil, false
	}
	if to != t.name {
		refuse("meant for "+strconv.Quote(to), nil)
		return nil, nil, false
	}
	role := transport.RoleNode
	if cert != nil {
		named := false
		if len(cert.PeerCertificates) > 0 {
			role, named = identity(cert.PeerCertificates[0], from)
		}
		if !named {
			refuse("the certificate does not name "+strconv.Quote(from), nil)
			return nil, nil, false
		}
	}
	if br.Buffered() > 0 {
		// Frames that came with the preamble: read them first.
		conn = &bufferedConn{Conn: conn, r: br}
	}
	// A closing host still takes connections: its peers' byes and acks
	// come on them. Only once its links end (shut) does it refuse. The
	// connection leaves the door's slots here (unless the door closed it
	// to make room: then it is over).
	t.mu.Lock()
	p, shut := t.peers[from], t.shut
	evicted := s.evicted.Load()
	if !evicted {
		delete(t.handshakes, raw)
	}
	t.mu.Unlock()
	if evicted {
		return nil, nil, false
	}
	if p == nil || shut || p.cut.Load() {
		if p == nil {
			t.unknown.Add(1)
		}
		return nil, nil, false
	}
	// The connection replaces the peer's older one before the peer hears
	// it was accepted: a peer that dials again only after that (as a
	// reconnecting peer does) never has its newer connection closed by an
	// older one whose acceptance was slower.
	t.mu.RLock()
	if t.shut {
		t.mu.RUnlock()
		return nil, nil, false
	}
	p.mu.Lock()
	t.mu.RUnlock()
	if p.removed || p.cut.Load() {
		p.mu.Unlock()
		return nil, nil, false
	}
	old := p.in
	p.in = conn
	p.role.Store(uint32(role)) // before its first item is delivered
	p.mu.Unlock()
	if old != nil {
		_ = old.Close() // the peer connected again: the old connection is over
	}
	if _, err := conn.Write(appendAccept(nil, t.opts.MaxItem)); err != nil {
		p.mu.Lock()
		if p.in == conn {
			p.in = nil
		}
		p.mu.Unlock()
		return nil, nil, false
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, p, true
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
