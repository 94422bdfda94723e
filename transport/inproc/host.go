package inproc

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/transport"
)

// The host part (host): one attached host's Transport — sending, flow
// control, leave and close.
//
// Owns: the host type (its links out and in, its closing and leaving
// flags, the count of its calls in progress); Send, which makes a link on
// the first item for a peer (starting its goroutine, link.go) and queues
// on it; WaitRoom, Peers, Pending, Leave; Close and CloseReclaim, which
// end its links and wait for its calls.
// Lock: Network.mu guards each host's flags and link maps (WaitRoom's fast
// path reads outByName without it); link.mu under Network.mu (Send's
// push, Pending, close), or alone (WaitRoom). No lock is held while the
// hook or a Handler runs.
// May call: the hook, link.go (push, pending, queuedLocked, killLocked,
// wake, run), the Handler (events).
// Invariants: a handler call into a host starts only while it is not
// closing (enter), and Close returns only once every such call and every
// link goroutine into it ended (calls); a leaving peer takes no Frame or
// Bounce.

// host is one attached host: its Transport.
type host struct {
	net  *Network
	name string
	h    transport.Handler

	// calls counts the goroutines of links to this host and the handler
	// calls into it in progress; Close waits for them.
	calls sync.WaitGroup
	done  chan struct{} // closed when Close has finished

	closing bool            // Close was called; guarded by net.mu
	leaving bool            // Leave was called; guarded by net.mu
	out     map[*host]*link // links from this host, by destination; guarded by net.mu
	// outByName is a copy of out by destination name, published (under
	// net.mu) when a link comes or goes: WaitRoom's fast path reads it
	// without a lock.
	outByName atomic.Pointer[map[string]*link]
	in        map[*host]*link // links to this host, by source; guarded by net.mu
}

var _ transport.Transport = (*host)(nil)

// enter reports whether a handler call into x may start (x is not
// closing), counting it in x.calls; exit ends it.
func (x *host) enter() bool {
	x.net.mu.RLock()
	defer x.net.mu.RUnlock()
	if x.closing {
		return false
	}
	x.calls.Add(1)
	return true
}

func (x *host) exit() { x.calls.Done() }

func (x *host) event(e transport.Event) {
	if x.enter() {
		defer x.exit()
		x.h.Event(e)
	}
}

// Local returns the host's name.
func (x *host) Local() string { return x.name }

// Send queues it for the peer named to; see transport.Transport.Send. The
// network copies it.Data unless Options.NoCopy.
func (x *host) Send(to string, it transport.Item) error {
	n := x.net
	hooked := false
	for {
		n.mu.RLock()
		p, err := x.peerLocked(to, it.Kind)
		if err != nil {
			n.mu.RUnlock()
			return err
		}
		if hook := n.hook.Load(); hook != nil && !hooked {
			n.mu.RUnlock()
			if !(*hook)(x.name, to, it) {
				return nil
			}
			hooked = true
			continue // the state may have changed meanwhile
		}
		if l := x.out[p]; l != nil {
			l.push(it, !n.noCopy)
			n.mu.RUnlock()
			return nil
		}
		n.mu.RUnlock()
		n.mu.Lock()
		if p, err := x.peerLocked(to, it.Kind); err == nil && x.out[p] == nil {
			x.newLinkLocked(p)
		}
		n.mu.Unlock()
	}
}

// peerLocked returns the live peer named to that takes an item of kind k
// from x, or Send's error.
func (x *host) peerLocked(to string, k transport.Kind) (*host, error) {
	if x.closing {
		return nil, transport.ErrClosed
	}
	p := x.net.hosts[to]
	if p == nil || p == x {
		return nil, transport.ErrUnknownPeer
	}
	if p.leaving && (k == transport.Frame || k == transport.Bounce) {
		return nil, transport.ErrPeerLeaving
	}
	return p, nil
}

// newLinkLocked makes the link from x to p and starts its goroutine (one
// of p's calls). Both hosts are live.
func (x *host) newLinkLocked(p *host) {
	n := x.net
	l := &link{from: x, to: p, notify: make(chan struct{}, 1), stop: make(chan struct{}), ended: make(chan struct{}),
		broken: n.broken[pair(x.name, p.name)], delay: n.delay[pair(x.name, p.name)], latency: n.latency[pair(x.name, p.name)]}
	x.out[p] = l
	x.publishOutLocked()
	p.in[x] = l
	p.calls.Add(1)
	go l.run()
}

// publishOutLocked publishes x's links by destination name (net.mu held).
func (x *host) publishOutLocked() {
	m := make(map[string]*link, len(x.out))
	for p, l := range x.out {
		m[p.name] = l
	}
	x.outByName.Store(&m)
}

// WaitRoom waits until the link to the peer named to has room; see
// transport.Transport.WaitRoom. It returns nil at once when there is room,
// even if ctx has ended, and when to is not a live peer or x is closed.
func (x *host) WaitRoom(ctx context.Context, to string) error {
	n := x.net
	if m := x.outByName.Load(); m != nil {
		if l := (*m)[to]; l != nil && l.queued.Load() <= int64(n.high) {
			return nil // room (a link that just ended also lets the send through: Send then fails)
		}
	}
	n.mu.RLock()
	p := n.hosts[to]
	var l *link
	if p != nil && !x.closing {
		l = x.out[p]
	}
	n.mu.RUnlock()
	if l == nil {
		return nil
	}
	for {
		l.mu.Lock()
		if l.queuedLocked() <= n.high || l.dead || l.flush {
			l.mu.Unlock()
			return nil
		}
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Peers returns the names of the live peers whose links are not broken,
// sorted; nil once x is closed.
func (x *host) Peers() []string {
	n := x.net
	n.mu.RLock()
	defer n.mu.RUnlock()
	if x.closing {
		return nil
	}
	var out []string
	for name, p := range n.hosts {
		if p != x && !n.broken[pair(x.name, name)] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Pending returns how many items are queued on, or being delivered from,
// the links to x (in) and from x (out). Links of a closed host count until
// they end.
func (x *host) Pending() (in, out int) {
	n := x.net
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, l := range x.in {
		in += l.pending()
	}
	for _, l := range x.out {
		out += l.pending()
	}
	return in, out
}

// Leave starts x's graceful leave; see transport.Transport.Leave. Its
// peers get Event{Leaving}. It does nothing on a closed or leaving host.
func (x *host) Leave() {
	n := x.net
	n.mu.Lock()
	if x.closing || x.leaving {
		n.mu.Unlock()
		return
	}
	x.leaving = true
	peers := x.peersLocked()
	n.mu.Unlock()
	for _, p := range peers {
		p.event(transport.Event{Peer: x.name, Kind: transport.Leaving})
	}
}

func (x *host) peersLocked() []*host {
	var out []*host
	for _, p := range x.net.hosts {
		if p != x {
			out = append(out, p)
		}
	}
	return out
}

// Close ends x's links; see transport.Transport.Close. Graceful: the links
// from x deliver what is queued on them (after x's Close returned, on the
// peers' goroutines) and then give the peer Event{Gone}; the Frame and
// Bounce items queued to x go back to their senders (Returned), other
// items to x are dropped. Not graceful: everything queued to or from x is
// lost. Peers without a link from x get Event{Gone} at once. Close returns
// nil once no goroutine of the links to x runs and no handler call into x
// is in progress; a second Close waits for the first.
func (x *host) Close(graceful bool) error {
	x.close(graceful, false)
	return nil
}

// CloseReclaim closes x as Close(false) does, and returns what its links
// had not delivered, per peer, in the order sent; see
// transport.Reclaimer. What a link delivered is not among it: a peer
// never gets an item twice from this transport.
func (x *host) CloseReclaim() map[string][]transport.Item {
	return x.close(false, true)
}

// close is Close and, with reclaim (not graceful), CloseReclaim.
func (x *host) close(graceful, reclaim bool) map[string][]transport.Item {
	n := x.net
	n.mu.Lock()
	if x.closing {
		n.mu.Unlock()
		<-x.done
		return nil
	}
	x.closing = true
	if n.hosts[x.name] == x {
		delete(n.hosts, x.name)
	}
	var gone []*host // peers that get Gone now: no link from x to end first
	for _, p := range n.hosts {
		if x.out[p] == nil {
			gone = append(gone, p)
		}
	}
	var wake, out []*link
	for _, l := range x.out {
		l.mu.Lock()
		l.senderGone = true
		if graceful {
			l.flush = true
		} else {
			l.reclaim = reclaim
			l.killLocked(false)
		}
		l.mu.Unlock()
		wake = append(wake, l)
		out = append(out, l)
	}
	for _, l := range x.in {
		l.mu.Lock()
		l.killLocked(graceful)
		l.mu.Unlock()
		wake = append(wake, l)
	}
	n.mu.Unlock()
	for _, l := range wake {
		l.wake()
	}
	for _, p := range gone {
		p.event(transport.Event{Peer: x.name, Kind: transport.Gone})
	}
	x.calls.Wait()
	var back map[string][]transport.Item
	if reclaim {
		for _, l := range out {
			<-l.ended
			if len(l.reclaimed) > 0 {
				if back == nil {
					back = map[string][]transport.Item{}
				}
				back[l.to.name] = l.reclaimed
			}
		}
	}
	close(x.done)
	return back
}
