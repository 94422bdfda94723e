package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// The dialer part (dial): the connection this host opens to a peer and
// writes on.
//
// Owns: dial — TCP, then TLS (the listener's certificate must name the
// peer), then the preamble and the listener's answer, within
// Options.HandshakeTimeout (its clock: the context's deadline) — run by
// the peer's writer (link.go); the backoff between failed attempts
// (minBackoff, maxBackoff; the accept loop waits minBackoff after an
// error); errRefused.
// Lock: Transport.mu (read) only to find the peer and store the role the
// listener's certificate names (an atomic); none during the handshake.
// May call: tls.go (clientConfig, identity), frame.go (appendPreamble,
// readAccept), the dial log (rate-limited).
// Invariants: a connection is returned only once the listener took it as
// this host's (its answer read), with the largest item the peer takes and
// no deadline; on a failure it is closed; Close cancels the dials under
// way (dialCtx).

// The dial backoff after a failed connection attempt: from minBackoff,
// doubling, to maxBackoff.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// dial connects to the peer named name at addr: TCP, then TLS (the
// listener's certificate must name the peer), then the preamble and the
// listener's answer, within Options.HandshakeTimeout. It returns the
// largest item the peer takes.
func (t *Transport) dial(name, addr string) (net.Conn, int, error) {
	ctx, cancel := context.WithTimeout(t.dialCtx, t.opts.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if st := t.tlsNow.Load(); st != nil {
		tc := tls.Client(c, st.clientConfig(name))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			t.logs.dial.Warn(t.log, "tcp: connecting to a peer failed its TLS handshake", "peer", name, "err", err)
			return nil, 0, err
		}
		c = tc
		if cs := tc.ConnectionState(); len(cs.PeerCertificates) > 0 {
			role, _ := identity(cs.PeerCertificates[0], name)
			t.mu.RLock()
			if p := t.peers[name]; p != nil {
				p.role.Store(uint32(role))
			}
			t.mu.RUnlock()
		}
	}
	if _, err := c.Write(appendPreamble(nil, t.name, name)); err != nil {
		_ = c.Close()
		return nil, 0, err
	}
	// The listener answers once it took the connection as the peer's (it
	// closes it otherwise: it does not know this host yet, or refused it).
	var ans [acceptLen]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		_ = c.Close()
		return nil, 0, errRefused
	}
	maxItem, err := readAccept(&ans)
	if err != nil {
		_ = c.Close()
		return nil, 0, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, maxItem, nil
}

// errRefused: the listener closed a connection instead of accepting it.
var errRefused = errors.New("tcp: the peer refused the connection")
