package tcp

import (
	"crypto/tls"
	"crypto/x509"
	"net"

	"github.com/berthrt/berth/payload"
)

// The reload part (SetTLS): a running transport's identity and trust —
// certificate, CA and deny list — swapped.
//
// Owns: Transport.SetTLS and Attacher.SetTLS (every transport attached
// there, and those attached later); peerCert, the certificate a
// connection's far end presented.
// Lock: Attacher.mu, then Transport.mu (read, to list the peers); then
// peer.mu per peer, not nested in Transport.mu, to read its connections;
// a denied connection is closed after peer.mu is released.
// May call: tls.go (identity, newTLSState, denied), accept.go (refuse).
// Invariants: SetTLS changes nothing unless the certificate names this
// host in the role the first one did, and a transport without TLS takes
// none; new handshakes, both ways, use the new state (tlsNow, swapped
// whole); links on other certificates go on.

// SetTLS makes c the transport's identity and trust from now on: new
// handshakes, both ways, present c's certificate and verify peers against
// c's CA and deny list; links on a certificate c denies are closed at
// once (counted in Stats.Refused), and their peer's handshakes refused
// from then on. Links on other certificates go on as they are. c's
// certificate must name this host, in the role the first one did.
// Errors are payload.InvalidOperation, changing nothing.
func (t *Transport) SetTLS(c *TLS) error {
	const op = "tcp.Transport.SetTLS"
	if t.tlsNow.Load() == nil {
		return payload.NewError(payload.InvalidOperation, op, "the transport runs without TLS")
	}
	if c == nil || c.Certificate.Leaf == nil {
		return payload.NewError(payload.InvalidOperation, op, "the TLS certificate has no parsed leaf")
	}
	role, named := identity(c.Certificate.Leaf, t.name)
	switch {
	case !named:
		return payload.NewError(payload.InvalidOperation, op, "the TLS certificate does not name "+t.name)
	case role != t.role:
		return payload.NewError(payload.InvalidOperation, op, "the TLS certificate names "+t.name+" a "+role.String()+", not a "+t.role.String()+" as the first one did")
	}
	st := newTLSState(c)
	t.tlsNow.Store(st)
	t.mu.RLock()
	peers := make([]*peer, 0, len(t.peers))
	for _, p := range t.peers {
		peers = append(peers, p)
	}
	t.mu.RUnlock()
	for _, p := range peers {
		p.mu.Lock()
		conns := [2]net.Conn{p.in, p.out}
		p.mu.Unlock()
		for _, c := range conns {
			if c != nil && st.denied(peerCert(c)) {
				t.refuse("the peer's certificate is on the deny list", c, nil)
				_ = c.Close()
			}
		}
	}
	return nil
}

// peerCert returns the certificate the far end of c presented, if c runs
// over TLS.
func peerCert(c net.Conn) *x509.Certificate {
	for {
		switch v := c.(type) {
		case *tls.Conn:
			if cs := v.ConnectionState(); len(cs.PeerCertificates) > 0 {
				return cs.PeerCertificates[0]
			}
			return nil
		case *bufferedConn:
			c = v.Conn
		case *heardConn:
			c = v.Conn
		default:
			return nil
		}
	}
}

// SetTLS makes c the identity and trust of every transport attached here
// and of those attached later (a host's new run): Transport.SetTLS on
// each. It returns the first error, having tried them all.
func (a *Attacher) SetTLS(c *TLS) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	for _, t := range a.attached {
		if t.isClosing() {
			continue
		}
		if err := t.SetTLS(c); err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		a.opts.TLS = c
	}
	return first
}
