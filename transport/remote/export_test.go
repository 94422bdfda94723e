package remote

// SetCut cuts (or restores) the link between t and its peer name, as a
// broken network would: envelopes to and from the peer are lost, and the
// link is Down at once (the connection ended) until the peer is heard
// from again after the cut ends.
func (t *Transport) SetCut(name string, cut bool) {
	p, _ := t.peer(name)
	if p == nil {
		return
	}
	p.cut.Store(cut)
	if cut {
		p.mu.Lock()
		p.s.connDown(&p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
}
