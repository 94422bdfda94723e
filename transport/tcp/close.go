package tcp

import (
	"slices"
	"strings"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The close part (Close, CloseReclaim): the end of a transport.
//
// Owns: the closing sequence — each inbox stopped, each session's bye (or
// crash notice), the wait for the peers' answers (at most
// Options.CloseTimeout; crashWait without grace; none when reclaiming),
// the wait for the writers to write what is queued (at most crashWait),
// then the end of the ticker, the writers, the dials, the listener, the
// handshakes and every connection — and the kick channel by which the
// sessions wake it (wakeClose). Its clock: await's timer.
// Lock: Transport.mu briefly (closing, shut, the handshakes, the peer
// list); peer.mu per peer, not nested in it, each inbox stopped before
// peer.mu is taken; await reads done under peer.mu.
// May call: the session (reclaim, close, closed), the inbox (stop,
// waitInline), driver.go (flushLocked, poke, closeConnsLocked).
// Invariants: only the first Close runs the sequence, a later one waits
// for it (done) and returns nil; once a peer's inbox is stopped its
// handler is handed nothing new (an inline delivery under way ends before
// Close returns); no goroutine of the transport runs when Close returns.

// crashWait bounds how long a Close without grace waits for its peers to
// answer the crash notice.
const crashWait = time.Second

// Close ends this host's links; see transport.Transport.Close. Graceful:
// the handler takes nothing more; each peer gets a bye after what was sent
// to it, which tells it what the handler took (it hands the frames it sent
// and that were not taken back to its own handler, Returned), and Close
// waits until every reachable peer received its bye, at most
// Options.CloseTimeout. Without grace: what was queued is dropped and each
// peer gets a crash notice, waited for at most a second. Then every
// connection closes. Close returns an error of kind payload.DataLost if a
// graceful Close gave up on a peer that had not received everything; it
// returns once no goroutine of the transport runs. A second Close waits
// for the first and returns nil.
func (t *Transport) Close(graceful bool) error {
	return t.close(graceful, nil)
}

// CloseReclaim closes the transport as Close(false) does, and returns what
// each peer's handler had not taken of what this host sent it, in the
// order sent (transport.Reclaimer): the items of the peer's session from
// the last taking the peer reported — so an item the peer took since may
// be among them. A peer that is gone has nothing handed back: what it had
// not taken was lost with it (Stats.Lost). It does not wait for its peers
// to answer its crash notice: a run that reclaims is one they saw fail,
// and they drop what it sends. The items are handed over once no
// goroutine of the transport runs.
func (t *Transport) CloseReclaim() map[string][]transport.Item {
	back := map[string][]transport.Item{}
	_ = t.close(false, back)
	return back
}

// close is Close; a non-nil back (not graceful) gets what CloseReclaim
// hands back.
func (t *Transport) close(graceful bool, back map[string][]transport.Item) error {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		<-t.done
		return nil
	}
	t.closing = true
	t.mu.Unlock()
	peers := t.peerList()
	for _, p := range peers {
		epoch, seq := p.q.stop()
		p.mu.Lock()
		if back != nil {
			if items := p.s.reclaim(); len(items) > 0 {
				back[p.name] = items
			}
		}
		p.s.close(graceful, epoch, seq, &p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
	wait := t.opts.CloseTimeout
	if !graceful {
		wait = min(wait, crashWait)
	}
	if back != nil {
		// A run that reclaims what it sent is one its peers saw fail:
		// they drop its envelopes (a stale incarnation), so none answers
		// its crash notice. The notice is written (below); nobody waits
		// for an answer that does not come.
		wait = 0
	}
	unfinished := t.await(peers, wait, func(p *peer) bool { return p.s.closed() })
	// What is queued to be written goes before the connections close:
	// the answers to the peers' byes are among it (a peer's graceful
	// Close waits for them). A connection that ends drops its queue.
	t.await(peers, crashWait, func(p *peer) bool { return p.out == nil || p.wq.n == 0 && !p.writing })

	close(t.stopTick)
	close(t.stop)
	t.dialStop()
	_ = t.ln.Close()
	t.mu.Lock()
	t.shut = true
	for c := range t.handshakes {
		_ = c.Close()
	}
	t.mu.Unlock()
	for _, p := range peers {
		p.q.stop()
		p.mu.Lock()
		p.removed = true
		p.closeConnsLocked()
		if p.room != nil {
			close(p.room)
			p.room = nil
		}
		p.mu.Unlock()
		p.poke()
	}
	for _, p := range peers {
		p.q.waitInline()
	}
	t.wg.Wait()
	close(t.done)
	if graceful && len(unfinished) > 0 {
		return payload.NewError(payload.DataLost, "tcp.Transport.Close",
			"gave up after "+t.opts.CloseTimeout.String()+" on peers that had not received everything: "+strings.Join(unfinished, ", "))
	}
	return nil
}

// wakeClose wakes a Close that waits for the peers (await).
func (t *Transport) wakeClose() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// await waits until done holds for every peer (called with its p.mu
// held), at most d; it returns the peers for which it does not.
func (t *Transport) await(peers []*peer, d time.Duration, done func(*peer) bool) []string {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		var open []string
		for _, p := range peers {
			p.mu.Lock()
			if !done(p) {
				open = append(open, p.name)
			}
			p.mu.Unlock()
		}
		if len(open) == 0 {
			return nil
		}
		select {
		case <-t.kick:
		case <-timer.C:
			slices.Sort(open)
			return open
		}
	}
}
