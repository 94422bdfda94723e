package tcp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"time"

	"github.com/berthrt/berth/payload"
)

// The connections' loops (link): what goes on the wire to a peer and what
// comes off it.
//
// Owns: the write queue (frames coalesced, large items' data not copied,
// an item over partSize in parts); each peer's writer (writeLoop, a
// goroutine from AddPeerRun), which dials when it has something to write
// and no connection — after a failure, again after a backoff (its clock:
// time.After) — and writes what is queued, many frames in one write; the
// goroutine that watches the connection this host writes on (watchOut);
// the reader of the connection the peer writes on (readLoop, on its serve
// goroutine, accept.go); and the end of either connection (linkDown).
// Lock: peer.mu, never held across a read, a write or a dial; the reader
// waits for room in the inbox (the inbound marks) without it.
// May call: frame.go (appendFrame, appendHeader, decodeHeader, the
// assembler), the session (between, connDown; under peer.mu), dial.go
// (dial), driver.go (flushLocked, receive), close.go (wakeClose), the
// inbox (waitRoom).
// Invariants: one batch is written to a peer at a time (peer.writing,
// shared with Send's inline write); between two parts of an item goes
// only a hello; a connection that ends drops what waited to be written on
// it, and if numbered envelopes went on it or waited, the link is Down
// until the peer is heard from again (the session then sends them again).

// writeQueue is the bytes waiting for a peer's writer: frames coalesced
// into buffers, an item's data of bigData or more kept where it lies (it
// is the session's, never changed) rather than copied.
type writeQueue struct {
	segs  [][]byte // written in order, then buf
	parts []int    // the segments that begin a part: a hello goes before each
	buf   []byte
	n     int // bytes queued
	items int // numbered envelopes (items, bye) queued: losing them needs a go-back
}

func (w *writeQueue) push(e *Envelope) {
	switch {
	case len(e.Data) < bigData:
		w.buf = appendFrame(w.buf, e)
	case len(e.Data) <= partSize:
		w.segs = append(w.segs, appendHeader(w.buf, e), e.Data)
		w.buf = nil
	default:
		// In parts (see partSize): the item's frame with the first, then
		// a part frame for each further partSize bytes, their headers in
		// one buffer.
		first := *e
		first.Flags |= flagMore
		first.Data = e.Data[:partSize]
		w.segs = append(w.segs, appendHeader(w.buf, &first), first.Data)
		w.buf = nil
		rest := e.Data[partSize:]
		hdrs := make([]byte, 0, (len(rest)+partSize-1)/partSize*headerLen)
		for len(rest) > 0 {
			k := min(len(rest), partSize)
			part := Envelope{Op: opPart, FromInc: e.FromInc, ToInc: e.ToInc, Seq: e.Seq, Data: rest[:k]}
			if k < len(rest) {
				part.Flags = flagMore
			}
			at := len(hdrs)
			hdrs = appendHeader(hdrs, &part)
			w.parts = append(w.parts, len(w.segs))
			w.segs = append(w.segs, hdrs[at:], part.Data)
			w.n += headerLen
			rest = rest[k:]
		}
	}
	w.n += headerLen + len(e.Data)
	if e.Op == opItem || e.Op == opBye {
		w.items++
	}
}

// reset empties w, keeping its buffer.
func (w *writeQueue) reset() {
	clear(w.segs)
	w.segs, w.parts, w.buf, w.n, w.items = w.segs[:0], w.parts[:0], w.buf[:0], 0, 0
}

// linkDown reports that conn, one of the peer's connections, ended. The
// one this host writes on: what waited to be written on it is dropped,
// and if numbered envelopes went on it or waited, the link is Down (they
// may be lost) until the peer is heard from again, when the session sends
// them again. The one the peer writes on: the peer's own session sees to
// what was on it.
func (t *Transport) linkDown(p *peer, conn net.Conn) {
	_ = conn.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch conn {
	case p.out:
		lost := p.carried || p.wq.items > 0
		p.out, p.carried = nil, false
		p.wq.reset()
		if lost {
			p.s.connDown(&p.o)
			t.flushLocked(p)
		}
	case p.in:
		p.in = nil
	}
}

// writeLoop is the peer's writer: it connects when there is something to
// write and no connection, and writes what is queued, many frames in one
// write.
func (t *Transport) writeLoop(p *peer) {
	defer t.wg.Done()
	var spare writeQueue
	backoff := time.Duration(0)
	between := func(b []byte) []byte {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.removed || p.cut.Load() {
			return b
		}
		e, ok := p.s.between()
		if !ok {
			return b
		}
		return appendFrame(b, &e)
	}
	for {
		select {
		case <-p.wake:
		case <-t.stop:
			return
		}
		for {
			p.mu.Lock()
			if p.removed {
				p.mu.Unlock()
				return
			}
			conn := p.out
			if p.wq.n == 0 || p.cut.Load() || p.writing {
				// (A Send writing pokes again when it is done.)
				if p.cut.Load() {
					p.wq.reset()
				}
				p.mu.Unlock()
				break
			}
			if conn == nil {
				addr := p.addr
				p.mu.Unlock()
				c, peerMax, err := t.dial(p.name, addr)
				p.mu.Lock()
				switch {
				case err == nil && !p.removed && !p.cut.Load() && p.addr == addr:
					p.out, p.carried, backoff = c, false, 0
					p.maxItem.Store(int64(peerMax))
					t.wg.Add(1)
					go t.watchOut(p, c)
					p.mu.Unlock()
					continue
				case err == nil:
					_ = c.Close()
				}
				// What waited is dropped, as on a broken connection: the
				// session sends the items again once the link is up.
				lost := p.wq.items > 0
				p.wq.reset()
				if lost {
					p.s.connDown(&p.o)
					t.flushLocked(p)
				}
				p.mu.Unlock()
				backoff = min(max(2*backoff, minBackoff), maxBackoff)
				select {
				case <-time.After(backoff):
				case <-t.stop:
					return
				}
				continue
			}
			batch := p.wq
			p.wq, spare = spare, writeQueue{}
			p.carried = p.carried || batch.items > 0
			p.writing = true
			p.mu.Unlock()
			err := writeBatch(conn, &batch, between)
			batch.reset()
			spare = batch
			p.mu.Lock()
			p.writing = false
			closing := p.s.closing
			p.mu.Unlock()
			if err != nil {
				t.linkDown(p, conn)
			}
			if closing {
				t.wakeClose() // a Close waits for the queue to drain
			}
		}
	}
}

// writeBatch writes what w holds to conn: its segments in order, then its
// buffer. Before each part of a large item it writes what between
// appends (a hello; nothing when nil).
func writeBatch(conn net.Conn, w *writeQueue, between func([]byte) []byte) error {
	var hello []byte
	parts := w.parts
	for i, s := range w.segs {
		if len(parts) > 0 && parts[0] == i {
			parts = parts[1:]
			if between != nil {
				if hello = between(hello[:0]); len(hello) > 0 {
					if _, err := conn.Write(hello); err != nil {
						return err
					}
				}
			}
		}
		if _, err := conn.Write(s); err != nil {
			return err
		}
	}
	if len(w.buf) > 0 {
		if _, err := conn.Write(w.buf); err != nil {
			return err
		}
	}
	return nil
}

// watchOut reads the connection this host writes on: the peer never
// writes on it, so anything (its end, an error, a byte) ends it.
func (t *Transport) watchOut(p *peer, c net.Conn) {
	defer t.wg.Done()
	var b [1]byte
	_, _ = c.Read(b[:])
	t.linkDown(p, c)
}

// readLoop reads the peer's frames from conn until it ends, pausing while
// the peer's items wait for the handler past the inbound marks.
func (t *Transport) readLoop(p *peer, conn net.Conn) {
	defer t.linkDown(p, conn)
	br := bufio.NewReaderSize(conn, 64<<10)
	var hdr [headerLen]byte
	asm := assembler{maxData: t.opts.MaxItem}
	for {
		if !p.q.waitRoom(t.opts.InboundItems, t.opts.InboundBytes) {
			return
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		e, n, err := decodeHeader(&hdr, t.opts.MaxItem)
		over := errors.Is(err, payload.CapacityExceeded)
		if err == nil || over {
			var ok bool
			e, ok, err = asm.next(br, e, n, over)
			if !ok && err == nil {
				continue // a part of an item still coming
			}
		}
		switch {
		case errors.Is(err, errFrame):
			t.malformed.Add(1)
			t.logs.malformed.Warn(t.log, "tcp: closed a peer's connection for a malformed frame", "peer", p.name, "err", err)
			return
		case err != nil:
			return
		case e.refused:
			// An item past the limit: its bytes were read and not kept,
			// and it takes its turn without reaching the handler, so that
			// the peer does not send it again (Stats.Oversized).
			t.logs.oversized.Warn(t.log, "tcp: refused an item past the limit", "peer", p.name,
				"limit", t.opts.MaxItem, "setting", "tcp.Options.MaxItem")
		}
		if p.cut.Load() {
			return
		}
		t.receive(p, &e)
	}
}
