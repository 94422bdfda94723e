package tcp

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The session driver (peer): it feeds each peer's pure session
// (session.go) its inputs — Send's items, the envelopes read off the
// peer's connection (receive), ticks (ticker), the handler's progress
// (deliverLoop) — and carries out its outputs (flush): envelopes to the
// peer's write queue, handler calls to its inbox.
//
// Owns: the peer type (its session, inbox, connections and write queue);
// the ticker goroutine (the transport's one periodic clock, Options.Tick);
// each peer's delivery goroutine (deliverLoop), which hands its queued
// calls to the Handler; Send, which writes a small batch itself when the
// peer is caught up and its writer idle; receive, which hands an item to
// the Handler on the reader when the handler has nothing to do.
// Lock: peer.mu around every call into the session, then the inbox lock
// (flush pushes to, or takes from, the inbox under it). peer.mu is
// released before a Handler call and before Send writes on the
// connection.
// May call: the session, the inbox, the Handler, link.go (writeBatch,
// linkDown, the write queue), close.go (wakeClose), stats.go (delivered).
// Invariants: once the peer is in the peer map its session is touched
// only under peer.mu, and its outputs are carried out, in order, before
// peer.mu is released; a peer's Handler calls are one at a time and in
// order (an inline delivery and the delivery goroutine take turns,
// inbox.go); deliverLoop and receive tell the session an item was taken
// only after its Deliver returned (a refused item, without one).

// peer is one peer: its session, its delivery queue, its connections and
// what waits to be written to it.
type peer struct {
	name string
	q    *inbox
	wake chan struct{} // one slot: the writer has something to do

	blocked atomic.Bool   // the session is over its high mark (WaitRoom's fast path)
	full    atomic.Bool   // the session is at its hard bound (Backlogged)
	maxItem atomic.Int64  // the largest item the peer takes, from its answer to the last connection (0: not known yet)
	state   atomic.Uint32 // the session's linkState, for Peers
	cut     atomic.Bool   // a test fault: no connection to or from the peer
	role    atomic.Uint32 // the transport.Role its certificate names, on its latest connection

	// The link's traffic (Links): items Send accepted for the peer and
	// their bytes; items delivered from it to the handler and theirs.
	sentItems, sentBytes atomic.Uint64
	recvItems, recvBytes atomic.Uint64

	mu          sync.Mutex
	addr        string        // guarded by mu
	s           *session      // guarded by mu
	o           output        // scratch for the session's outputs; guarded by mu
	room        chan struct{} // closed when the session is no longer blocked; guarded by mu
	wq          writeQueue    // encoded envelopes for the writer, in order; guarded by mu
	out         net.Conn      // the connection this host writes on (nil: none); guarded by mu
	in          net.Conn      // the connection the peer writes on (nil: none); guarded by mu
	carried     bool          // numbered envelopes went on out (its loss needs a go-back); guarded by mu
	writing     bool          // a batch is being written (by the writer, or by Send); guarded by mu
	inlineSpare writeQueue    // Send's spare buffer for the writes it makes; guarded by mu
	removed     bool          // the peer was removed: its writer ends; guarded by mu
}

// closeConnsLocked closes the peer's connections (p.mu held).
func (p *peer) closeConnsLocked() {
	if p.out != nil {
		_ = p.out.Close()
		p.out = nil
	}
	if p.in != nil {
		_ = p.in.Close()
		p.in = nil
	}
	p.wq.reset()
}

// poke wakes the peer's writer.
func (p *peer) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Send queues it for the peer named to; see transport.Transport.Send. It
// never blocks on the link (WaitRoom is the flow control); Data is copied
// unless it.Owned. An item larger than Options.MaxItem fails with
// payload.CapacityExceeded.
func (t *Transport) Send(to string, it transport.Item) error {
	if len(it.Data) > t.opts.MaxItem {
		return tooLarge(len(it.Data), t.opts.MaxItem, "")
	}
	p, closing := t.peer(to)
	switch {
	case closing:
		return transport.ErrClosed
	case p == nil:
		return transport.ErrUnknownPeer
	}
	if m := p.maxItem.Load(); m > 0 && int64(len(it.Data)) > m {
		// The peer would close the connection on it, and the session
		// would send it again on the next: refused here instead.
		return tooLarge(len(it.Data), int(m), " of "+to)
	}
	p.mu.Lock()
	err := p.s.send(it, &p.o)
	if err == nil {
		p.sentItems.Add(1)
		p.sentBytes.Add(uint64(len(it.Data)))
	}
	t.flush(p, false, false)
	if err != nil || p.out == nil || p.writing || p.wq.n == 0 || p.wq.n > inlineWrite || !p.s.caughtUp() {
		queued := p.wq.n > 0
		p.mu.Unlock()
		if queued {
			p.poke() // the writer's turn
		}
		return err
	}
	// The peer has read everything before this item and the writer is
	// idle: write it here, one goroutine switch less on a round trip.
	// So little is unread on the connection that the write cannot block.
	conn, batch := p.out, p.wq
	p.wq, p.inlineSpare = p.inlineSpare, writeQueue{}
	p.carried = p.carried || batch.items > 0
	p.writing = true
	p.mu.Unlock()
	werr := writeBatch(conn, &batch, nil) // small: no parts
	batch.reset()
	p.mu.Lock()
	p.writing, p.inlineSpare = false, batch
	more, closing := p.wq.n > 0, p.s.closing
	p.mu.Unlock()
	if werr != nil {
		t.linkDown(p, conn)
	}
	if more {
		p.poke()
	}
	if closing {
		t.wakeClose() // a Close waits for the queue to drain
	}
	return nil
}

// tooLarge is Send's error for an item of n bytes past the limit max
// (whose is said).
func tooLarge(n, max int, whose string) error {
	return payload.NewError(payload.CapacityExceeded, "tcp.Transport.Send",
		"an item of "+strconv.Itoa(n)+" bytes exceeds the limit"+whose+" of "+strconv.Itoa(max))
}

// inlineWrite is the most Send writes on its caller's goroutine (see
// Send): well under the smallest socket buffers, so that with the peer
// caught up the write never waits for the peer.
const inlineWrite = 2 << 10

// flushLocked carries out the session's outputs: envelopes to the write
// queue, in order, and handler calls to the delivery queue (p.mu held).
func (t *Transport) flushLocked(p *peer) {
	t.flush(p, false, true)
}

// flushLockedTake is flushLocked, except that when the handler has
// nothing to do the first item to deliver is taken (inbox.take) for the
// caller to deliver once it released p.mu.
func (t *Transport) flushLockedTake(p *peer) (d delivery, took bool) {
	return t.flush(p, true, true)
}

// flush is flushLocked (take: flushLockedTake); poke says whether to wake
// the writer for what it queued (Send does not: it may write it itself).
func (t *Transport) flush(p *peer, take, poke bool) (d delivery, took bool) {
	o := &p.o
	if len(o.send) > 0 && !p.removed && !p.cut.Load() {
		for i := range o.send {
			p.wq.push(&o.send[i])
		}
		if poke {
			p.poke()
		}
	}
	// The state first: a handler that got an event sees it in Peers.
	p.blocked.Store(p.s.blocked)
	p.full.Store(p.s.backlogged())
	p.state.Store(uint32(p.s.state))
	if len(o.deliver) > 0 {
		if take {
			d, took = p.q.take(o.deliver)
		} else {
			p.q.push(o.deliver)
		}
	}
	if !p.s.blocked && p.room != nil {
		close(p.room)
		p.room = nil
	}
	if p.s.closing {
		t.wakeClose()
	}
	o.reset()
	return d, took
}

// ticker runs the sessions' clock.
func (t *Transport) ticker() {
	defer t.wg.Done()
	tk := time.NewTicker(t.opts.Tick)
	defer tk.Stop()
	for {
		select {
		case <-t.stopTick:
			return
		case <-tk.C:
		}
		for _, p := range t.peerList() {
			p.mu.Lock()
			p.s.tick(&p.o)
			t.flushLocked(p)
			p.mu.Unlock()
		}
	}
}

// deliverLoop hands the peer's queued calls to the handler, one at a
// time, in order, and reports the handler's progress to the session.
func (t *Transport) deliverLoop(p *peer) {
	defer t.wg.Done()
	unreported := 0
	for {
		d, more, ok := p.q.next()
		if !ok {
			return
		}
		switch d.what {
		case dItem:
			if !d.refused {
				p.delivered(d.item)
				t.h.Deliver(p.name, d.item)
			}
			unreported++
			if !more || unreported >= 16 {
				unreported = 0
				p.mu.Lock()
				p.s.takenThrough(d.epoch, d.seq, &p.o)
				t.flushLocked(p)
				p.mu.Unlock()
			}
		case dReturned:
			t.h.Returned(p.name, d.item)
		case dEvent:
			t.h.Event(transport.Event{Peer: p.name, Kind: d.event})
		}
	}
}

// receive hands an envelope from the peer to its session.
func (t *Transport) receive(p *peer, e *Envelope) {
	p.mu.Lock()
	if p.cut.Load() {
		// Checked under p.mu, as Cut makes the link Down under it: an
		// envelope read before the cut must not bring the link up again
		// while what the session sends is dropped.
		p.mu.Unlock()
		return
	}
	p.s.receive(e, &p.o)
	d, took := t.flushLockedTake(p)
	p.mu.Unlock()
	if !took {
		return
	}
	// The item came in while its handler had nothing to do: deliver it
	// here, on the reader.
	if !d.refused {
		p.delivered(d.item)
		t.h.Deliver(p.name, d.item)
	}
	if p.q.inlineDone() {
		return // closing: the session was told what the handler took
	}
	p.mu.Lock()
	p.s.takenThrough(d.epoch, d.seq, &p.o)
	t.flushLocked(p)
	p.mu.Unlock()
}
