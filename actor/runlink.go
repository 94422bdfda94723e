package actor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// runLink is the host's end of its links across its runs: the transport
// attachment of the current run. A host attaches once, at Start, and
// keeps that attachment for its life — except a gateway whose run the
// membership ended (it was paused past its lease): it joins again as a
// new run (lease.go, rejoin), whose links are a new attachment under the
// new run's generation, which replaces the old one here.
//
// Owns: the current attachment. Lock: none (an atomic pointer);
// attachment.againMu, taken alone, around sends of what is sent again.
// Invariants: a Send that finds the attachment it used closed while a
// successor is being made waits for it and sends there: nothing a sender
// hands over in that window is refused for it. The messages the old
// attachment's peers had not seen taken (transport.Reclaimer) go to each
// peer on the new one, marked as sent again (flagAgain), in their order
// and before anything else the new run sends that peer: what a sender
// handed the old run runs once, in its order, unless its peer is gone.
// What cannot be sent again — other items, items for a peer that is no
// longer a member — is lost with the old run, counted by replace's caller
// and dropAgain (Stats.LostOnRejoin).
type runLink struct {
	cur atomic.Pointer[attachment]
}

// attachment is one run's transport.
type attachment struct {
	t       transport.Transport
	backlog transport.Backlogger   // t, if its links have a hard bound
	dir     transport.Directory    // t, if it needs its peers' addresses
	runDir  transport.RunDirectory // t, if it checks its peers' runs
	// replacing is set before t is closed for a new run's attachment;
	// replaced is closed once that one is current (or the replacement
	// failed: the host then closes).
	replacing atomic.Bool
	replaced  chan struct{}

	// again is what the runs before this one sent and their peers had not
	// seen taken, per peer, marked as sent again: it goes to the peer
	// before anything else this run sends it (sendAgain). againN counts
	// the peers it holds items for; sentAgain counts an item sent.
	againMu   sync.Mutex
	again     map[string][]transport.Item // guarded by againMu
	againN    atomic.Int32
	sentAgain func(to string, it transport.Item)
}

func newAttachment(t transport.Transport) *attachment {
	a := &attachment{t: t, replaced: make(chan struct{})}
	a.backlog, _ = t.(transport.Backlogger)
	a.dir, _ = t.(transport.Directory)
	a.runDir, _ = t.(transport.RunDirectory)
	return a
}

// newRunLink returns the link of a host whose first run attached as t.
func newRunLink(t transport.Transport) *runLink {
	l := &runLink{}
	l.cur.Store(newAttachment(t))
	return l
}

// current returns the current run's attachment.
func (l *runLink) current() *attachment { return l.cur.Load() }

// Send sends it as the current run's transport does (transport.Send). A
// send that finds its attachment closed for a new run's sends there.
func (l *runLink) Send(to string, it transport.Item) error {
	for {
		a := l.cur.Load()
		err := a.sendAgain(to)
		if err == nil {
			err = a.t.Send(to, it)
		}
		if err == nil || !errors.Is(err, transport.ErrClosed) || !a.replacing.Load() {
			return err
		}
		<-a.replaced
		if l.cur.Load() == a {
			return err // the replacement failed: the host closes
		}
	}
}

// WaitRoom is transport.WaitRoom on the current run's links.
func (l *runLink) WaitRoom(ctx context.Context, to string) error {
	return l.cur.Load().t.WaitRoom(ctx, to)
}

// Peers is transport.Peers of the current run.
func (l *runLink) Peers() []string { return l.cur.Load().t.Peers() }

// Pending is transport.Pending of the current run; out counts too what
// the run holds to send again (its peers' links not up yet).
func (l *runLink) Pending() (in, out int) {
	a := l.cur.Load()
	in, out = a.t.Pending()
	return in, out + a.pendingAgain()
}

// Leave is transport.Leave of the current run.
func (l *runLink) Leave() { l.cur.Load().t.Leave() }

// Close is transport.Close of the current run.
func (l *runLink) Close(graceful bool) error { return l.cur.Load().t.Close(graceful) }

// closeEnded closes the current run's links as a run its peers saw fail
// (the membership ended it): at once, without waiting for answers to its
// crash notice, which peers that dropped the run never send. It returns
// how many accepted messages its peers had not seen taken, or that it held
// to send again: they are lost with the run. A transport that is not a
// Reclaimer is closed as Close(false) is, and counts its own losses.
func (l *runLink) closeEnded() (lost int) {
	a := l.cur.Load()
	rc, ok := a.t.(transport.Reclaimer)
	if !ok {
		_ = a.t.Close(false)
		return 0
	}
	back := rc.CloseReclaim()
	for _, items := range a.takeAgain() {
		back[""] = append(back[""], items...)
	}
	for _, items := range back {
		for _, it := range items {
			if it.Kind == transport.Frame || it.Kind == transport.Bounce {
				lost++
			}
		}
	}
	return lost
}

// backlogged reports whether the current run's link to host to is at its
// bound (transport.Backlogger).
func (l *runLink) backlogged(to string) bool {
	a := l.cur.Load()
	return a.backlog != nil && a.backlog.Backlogged(to)
}

// rejoined is what replace reports of the old run's links.
type rejoined struct {
	again     int                   // messages held to send again on the new run's links
	lost      int                   // items that cannot go again: lost with the old run
	asks      map[payload.OpID]bool // the requests whose messages go again: their answers come to the new run
	reclaimed bool                  // the old transport handed back what its peers had not taken
}

// replace closes the current run's attachment, as a crash would (its
// peers saw the run fail), and makes next the current one with attach.
// Sends meanwhile wait for it. What the old attachment's peers had not
// seen taken (a transport.Reclaimer hands it back), and what it still
// held to send again itself, is to be sent again on the new one, first
// (sendAgain; sent counts each item as it goes): its messages, marked.
// What cannot go again is lost with the old run: replies, records, and
// everything of a transport that is not a Reclaimer (transport.Pending).
// Advice (hints, control items) is dropped uncounted. If attach fails,
// the old attachment stays current, closed: sends fail with ErrClosed,
// and the caller closes the host.
func (l *runLink) replace(attach func() (transport.Transport, error), sent func(to string, it transport.Item)) (rejoined, error) {
	old := l.cur.Load()
	old.replacing.Store(true)
	defer close(old.replaced)
	r := rejoined{asks: map[payload.OpID]bool{}}
	next := old.takeAgain() // marked by an earlier replace, and first
	if next == nil {
		next = map[string][]transport.Item{}
	}
	var back map[string][]transport.Item
	if rc, ok := old.t.(transport.Reclaimer); ok {
		r.reclaimed = true
		back = rc.CloseReclaim()
	} else {
		_, r.lost = old.t.Pending()
		_ = old.t.Close(false)
	}
	for peer, items := range back {
		for _, it := range items {
			switch it.Kind {
			case transport.Frame, transport.Bounce:
				next[peer] = append(next[peer], it)
			case transport.Hint, transport.Control:
			default:
				r.lost++
			}
		}
	}
	for peer, items := range next {
		kept := items[:0]
		for _, it := range items {
			op, ask, ok := markAgain(it.Data)
			if !ok {
				r.lost++
				continue
			}
			if ask {
				r.asks[op] = true
			}
			kept = append(kept, it)
		}
		if len(kept) == 0 {
			delete(next, peer)
			continue
		}
		next[peer] = kept
		r.again += len(kept)
	}
	t, err := attach()
	if err != nil {
		r.lost += r.again
		r.again, r.asks = 0, nil
		return r, err
	}
	a := newAttachment(t)
	a.sentAgain = sent
	if len(next) > 0 {
		a.again = next
		a.againN.Store(int32(len(next)))
	}
	l.cur.Store(a)
	return r, nil
}

// markAgain marks a message frame as sent again (flagAgain; marking one
// twice changes nothing) and returns its request if it is an Ask's (it
// has a reply route). A reply frame, or bytes that are not a frame, it
// leaves and reports false.
func markAgain(frame []byte) (op payload.OpID, ask, ok bool) {
	hv, _, err := payload.DecodeHeader(frame)
	if err != nil || hv.Flags()&flagReply != 0 || payload.SetFlags(frame, hv.Flags()|flagAgain) != nil {
		return payload.OpID{}, false, false
	}
	return hv.Op(), len(hv.ReplyTo()) > 0, true
}

// sendAgain sends what is to be sent again to peer to, in order, before
// the caller's own send. An item the transport refuses stays, with those
// after it, for the next try, and the caller's send fails as it did (a
// retryable refusal routes it again), so nothing overtakes what is sent
// again. Sends to to wait for one another meanwhile.
func (a *attachment) sendAgain(to string) error {
	if a.againN.Load() == 0 {
		return nil
	}
	a.againMu.Lock()
	defer a.againMu.Unlock()
	items, ok := a.again[to]
	if !ok {
		return nil
	}
	for i, it := range items {
		if err := a.t.Send(to, it); err != nil {
			clear(items[:i])
			a.again[to] = items[i:]
			return err
		}
		a.sentAgain(to, it)
	}
	delete(a.again, to)
	a.againN.Add(-1)
	return nil
}

// sendAllAgain tries sendAgain for every peer it holds items for.
func (a *attachment) sendAllAgain() {
	if a.againN.Load() == 0 {
		return
	}
	a.againMu.Lock()
	peers := make([]string, 0, len(a.again))
	for p := range a.again {
		peers = append(peers, p)
	}
	a.againMu.Unlock()
	for _, p := range peers {
		_ = a.sendAgain(p)
	}
}

// dropAgain drops what is held to send again to the peers member says are
// not members any more (what they had not taken was lost with them) and
// returns how many items it dropped.
func (a *attachment) dropAgain(member func(string) bool) int {
	if a.againN.Load() == 0 {
		return 0
	}
	a.againMu.Lock()
	defer a.againMu.Unlock()
	n := 0
	for p, items := range a.again {
		if !member(p) {
			n += len(items)
			delete(a.again, p)
			a.againN.Add(-1)
		}
	}
	return n
}

// takeAgain takes what a is still to send again (it is being replaced).
func (a *attachment) takeAgain() map[string][]transport.Item {
	a.againMu.Lock()
	defer a.againMu.Unlock()
	m := a.again
	a.again = nil
	a.againN.Store(0)
	return m
}

// pendingAgain returns how many items a holds to send again.
func (a *attachment) pendingAgain() int {
	if a.againN.Load() == 0 {
		return 0
	}
	a.againMu.Lock()
	defer a.againMu.Unlock()
	n := 0
	for _, items := range a.again {
		n += len(items)
	}
	return n
}
