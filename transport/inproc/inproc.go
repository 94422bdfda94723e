// Package inproc is the in-process transport: hosts that run in one
// process exchange items through a Network, with the same behaviour a
// transport over bytes has (package transport states the contract;
// transport/transporttest checks it). It is the embedded default and the
// fake on which fault tests inject breaks, delays, crashes and losses.
//
// Each ordered pair of hosts has one link: a queue and one delivery
// goroutine, started on the first Send, that hands the items to the
// destination's Handler.Deliver in the order they were sent. The delivery
// goroutine belongs to the destination: the destination's Close waits for
// it. It takes what is queued in batches of up to 64 items, one lock per
// batch; a Break, Kill or Delay during a batch stops it after the item
// being delivered (the rest go back to the head of the queue), so at most
// one item is delivered after Break returns, as on an unbatched link. A
// Send wakes the goroutine only when it sleeps.
//
// Invariants, beyond those of package transport:
//
//   - Copy: Send copies Data (unless Options.NoCopy, or the item is
//     Owned: then the receiver gets the slice the sender gave up); the
//     receiver never gets a slice the sender still uses, so no host can
//     rely on memory it shares with another. The caller may reuse its
//     buffer as soon as Send returns. Copies of up to 16 KiB are made into
//     buffers the link recycles after Deliver returns (the Data lent to
//     Deliver); larger ones are handed to the receiver (Owned).
//   - Flow control: WaitRoom blocks while more than Options.High items are
//     queued on the link, until fewer than High/2 are.
//   - Returned: when a host closes gracefully, the Frame and Bounce items
//     still queued to it go back to their senders' Handler.Returned, with
//     their Kind unchanged (a Bounce its origin never took goes back to the
//     host that bounced it, which routes it again or drops it); the other
//     kinds queued to it are dropped. A crash (Close(false), Kill) drops
//     everything queued to and from the host.
//   - Reclaim: CloseReclaim closes a host as a crash does, but hands back
//     to the caller, per peer and in order, what its links had not
//     delivered (transport.Reclaimer); nothing it delivered is among it.
//   - Gone: a peer gets Event{Gone} for a closed host after the last item
//     it receives from that host (a graceful close first delivers what the
//     host sent, waiting out a broken link).
//   - No Handler call reaches a host after its Close returned.
//
// Handlers must not call Close (nor Network.Kill) for their own host: Close
// waits for the host's handler calls to end.
//
// Lock order: Network.mu, then link.mu. No lock is held while a Handler
// or the hook runs.
package inproc

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/internal/fifo"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// DefaultHigh is the default for Options.High.
const DefaultHigh = 8192

// Options configures a Network. The zero value is the default: copies,
// and a high-water mark of DefaultHigh items per link.
type Options struct {
	// High is how many items may queue on a link before WaitRoom blocks;
	// it then waits until fewer than High/2 are queued. 0 means
	// DefaultHigh.
	High int
	// NoCopy hands the sender's Data slice to the receiver instead of a
	// copy. For benchmarks only: the sender must then never touch the
	// slice again after a successful Send.
	NoCopy bool
}

// Network joins the hosts of one process. Hosts join with Attach; faults
// are injected with Break, Heal, Delay, Kill and SetHook.
//
// A Network is safe for concurrent use.
type Network struct {
	high, low int
	noCopy    bool
	hook      atomic.Pointer[func(from, to string, it transport.Item) bool]

	mu     sync.RWMutex
	hosts  map[string]*host            // attached and not closing; guarded by mu
	broken map[[2]string]bool          // by pair(a, b); guarded by mu
	delay  map[[2]string]time.Duration // by pair(a, b); guarded by mu
}

// NewNetwork returns an empty network. It panics if opts.High is negative.
func NewNetwork(opts Options) *Network {
	if opts.High < 0 {
		panic("inproc: Options.High is negative")
	}
	high := opts.High
	if high == 0 {
		high = DefaultHigh
	}
	return &Network{
		high: high, low: max(high/2, 1), noCopy: opts.NoCopy,
		hosts: map[string]*host{}, broken: map[[2]string]bool{}, delay: map[[2]string]time.Duration{},
	}
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Attach joins a host named name to the network, with h receiving what
// arrives for it, and returns its Transport. The host's peers get
// Event{Up} for it, and it gets Event{Up} for each of them (and
// Event{Leaving} for those that are leaving); hosts whose link is broken
// get Up only on Heal. Attach fails with an error of kind
// payload.AlreadyExists if a host of that name is attached and not closed,
// of kind payload.InvalidOperation for an empty name or a nil h.
func (n *Network) Attach(name string, h transport.Handler) (transport.Transport, error) {
	if name == "" || h == nil {
		return nil, payload.NewError(payload.InvalidOperation, "inproc.Network.Attach", "empty name or nil handler")
	}
	x := &host{net: n, name: name, h: h, out: map[*host]*link{}, in: map[*host]*link{}, done: make(chan struct{})}
	n.mu.Lock()
	if _, dup := n.hosts[name]; dup {
		n.mu.Unlock()
		return nil, payload.NewError(payload.AlreadyExists, "inproc.Network.Attach", "the network already has a host named "+name)
	}
	var peers []*host
	for _, p := range n.hosts {
		if !n.broken[pair(name, p.name)] {
			peers = append(peers, p)
		}
	}
	n.hosts[name] = x
	n.mu.Unlock()
	for _, p := range peers {
		p.event(transport.Event{Peer: name, Kind: transport.Up})
		x.event(transport.Event{Peer: p.name, Kind: transport.Up})
		n.mu.RLock()
		leaving := p.leaving
		n.mu.RUnlock()
		if leaving {
			x.event(transport.Event{Peer: p.name, Kind: transport.Leaving})
		}
	}
	return x, nil
}

// Hosts returns the names of the attached hosts, sorted.
func (n *Network) Hosts() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]string, 0, len(n.hosts))
	for name := range n.hosts {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// SetHook installs a hook, for fault-injection tests, that sees every item
// Send is about to queue, from one host to another; an item for which it
// returns false is lost (Send still returns nil). The hook must not block
// nor keep it.Data; nil removes it.
func (n *Network) SetHook(hook func(from, to string, it transport.Item) bool) {
	if hook == nil {
		n.hook.Store(nil)
		return
	}
	n.hook.Store(&hook)
}

// Break breaks the links between hosts a and b, both ways, until Heal:
// items sent meanwhile wait on them, in order, and nothing is lost (as a
// session that resumes over a new connection). Both hosts, if attached,
// get Event{Down} for the other. Breaking a broken pair does nothing.
func (n *Network) Break(a, b string) {
	n.mu.Lock()
	k := pair(a, b)
	if n.broken[k] {
		n.mu.Unlock()
		return
	}
	n.broken[k] = true
	ha, hb := n.hosts[a], n.hosts[b]
	n.forPairLocked(a, b, func(l *link) {
		l.mu.Lock()
		l.broken = true
		l.setHaltLocked()
		l.mu.Unlock()
	})
	n.mu.Unlock()
	n.linkEvents(ha, hb, transport.Down)
}

// Heal repairs the links between a and b: what waits on them is delivered,
// in order, and both hosts, if attached, get Event{Up} for the other.
// Healing a pair that is not broken does nothing.
func (n *Network) Heal(a, b string) {
	n.mu.Lock()
	k := pair(a, b)
	if !n.broken[k] {
		n.mu.Unlock()
		return
	}
	delete(n.broken, k)
	ha, hb := n.hosts[a], n.hosts[b]
	n.forPairLocked(a, b, func(l *link) {
		l.mu.Lock()
		l.broken = false
		l.setHaltLocked()
		l.mu.Unlock()
		l.wake()
	})
	n.mu.Unlock()
	n.linkEvents(ha, hb, transport.Up)
}

func (n *Network) linkEvents(ha, hb *host, k transport.EventKind) {
	if ha != nil && hb != nil {
		ha.event(transport.Event{Peer: hb.name, Kind: k})
		hb.event(transport.Event{Peer: ha.name, Kind: k})
	}
}

// Delay makes every delivery between a and b, both ways, wait d first (0
// removes the delay). Items keep their order.
func (n *Network) Delay(a, b string, d time.Duration) {
	n.mu.Lock()
	if d <= 0 {
		delete(n.delay, pair(a, b))
	} else {
		n.delay[pair(a, b)] = d
	}
	n.forPairLocked(a, b, func(l *link) {
		l.mu.Lock()
		l.delay = max(d, 0)
		l.setHaltLocked()
		l.mu.Unlock()
	})
	n.mu.Unlock()
}

// Kill crashes the named host, as if its process died: Close(false).
// Everything queued to or from it is lost; its peers get Event{Gone}. It
// does nothing if no such host is attached.
func (n *Network) Kill(name string) {
	n.mu.RLock()
	x := n.hosts[name]
	n.mu.RUnlock()
	if x != nil {
		x.Close(false)
	}
}

// forPairLocked calls f once for each link between the hosts named a and
// b that has a live end (a link whose sender closed gracefully still
// delivers: it breaks and heals as well).
func (n *Network) forPairLocked(a, b string, f func(*link)) {
	seen := map[*link]bool{}
	for _, ends := range [2][2]string{{a, b}, {b, a}} {
		x := n.hosts[ends[0]]
		if x == nil {
			continue
		}
		for _, m := range []map[*host]*link{x.out, x.in} {
			for p, l := range m {
				if p.name == ends[1] && !seen[l] {
					seen[l] = true
					f(l)
				}
			}
		}
	}
}

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
		broken: n.broken[pair(x.name, p.name)], delay: n.delay[pair(x.name, p.name)]}
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

// link is the ordered link from one host to another. Its goroutine is one
// of the destination's calls.
type link struct {
	from, to *host
	notify   chan struct{} // one slot: look at the queue again
	stop     chan struct{} // closed by killLocked: cuts a delay short
	ended    chan struct{} // closed when the link's goroutine ends
	// reclaimed is what the link had not delivered when it ended, if it
	// was to keep it (reclaim); written before ended is closed.
	reclaimed []transport.Item

	mu         sync.Mutex
	items      []transport.Item // queued from items[head]; guarded by mu
	free       [][]byte         // delivered copies, for reuse; guarded by mu
	queued     atomic.Int64     // len(items) - head, for WaitRoom's fast path (written under mu)
	inFlight   atomic.Int64     // taken off the queue, not yet delivered (raised under mu)
	halt       atomic.Bool      // broken, dead or delayed: deliver no more of a batch (written under mu)
	freeBytes  int              // their capacity in all; guarded by mu
	head       int              // guarded by mu
	sleeping   bool             // the goroutine waits for a wake; guarded by mu
	broken     bool             // Network.Break; guarded by mu
	delay      time.Duration    // Network.Delay; guarded by mu
	flush      bool             // the sender closed gracefully: end once empty; guarded by mu
	senderGone bool             // the sender closed: its peer gets Gone when the link ends; guarded by mu
	dead       bool             // end now, undelivered items go as giveBack says; guarded by mu
	giveBack   bool             // frames not delivered go back to the sender; guarded by mu
	reclaim    bool             // the sender closes to send again what was not delivered: keep it (reclaimed); guarded by mu
	room       chan struct{}    // closed when the queue falls below low; guarded by mu
}

// push queues it, copying its Data if copy is set and the item is not
// Owned (under the network's read lock: both hosts are live). A small item
// is copied into a buffer the link recycles once the item has been
// delivered (lent to Deliver), so that a copy costs no allocation in the
// steady state; a large one into a new buffer, handed over (Owned).
func (l *link) push(it transport.Item, copy bool) {
	if it.Owned {
		copy = false
	}
	if copy && len(it.Data) > maxRecycled {
		it.Data, it.Owned = bytes.Clone(it.Data), true
		copy = false
	}
	l.mu.Lock()
	if copy {
		var buf []byte
		// The newest recycled buffers that fit (the last few looked at:
		// frames of a link come in a few sizes).
		for i, k := len(l.free)-1, 0; i >= 0 && k < 4; i, k = i-1, k+1 {
			if cap(l.free[i]) >= len(it.Data) {
				buf = l.free[i]
				last := len(l.free) - 1
				l.free[i], l.free[last] = l.free[last], nil
				l.free = l.free[:last]
				l.freeBytes -= cap(buf)
				break
			}
		}
		it.Data = append(buf[:0], it.Data...)
	}
	l.items = append(l.items, it)
	l.queued.Add(1)
	sleeping := l.sleeping
	l.mu.Unlock()
	if sleeping {
		l.wake() // a link that is delivering looks at its queue again unwoken
	}
}

// Recycling of copies: buffers of up to maxRecycled bytes, at most
// maxFreeBytes of them per link (enough for a queue of small frames as
// deep as the flow-control mark).
const (
	maxRecycled  = 16 << 10
	maxFreeBytes = 1 << 20
)

// recycleLocked keeps a delivered item's buffer for a later copy.
func (l *link) recycleLocked(b []byte) {
	if c := cap(b); c > 0 && c <= maxRecycled && l.freeBytes+c <= maxFreeBytes {
		l.free = append(l.free, b[:0])
		l.freeBytes += c
	}
}

// setHaltLocked updates halt, which a batch being delivered reads.
func (l *link) setHaltLocked() { l.halt.Store(l.broken || l.dead || l.delay > 0) }

func (l *link) wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

func (l *link) queuedLocked() int { return len(l.items) - l.head }

func (l *link) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queuedLocked() + int(l.inFlight.Load())
}

// killLocked makes the link end at once; with giveBack, the frames not
// delivered go back to the sender.
func (l *link) killLocked(giveBack bool) {
	if l.dead {
		return
	}
	l.dead, l.giveBack = true, giveBack
	l.setHaltLocked()
	close(l.stop)
	l.openRoomLocked()
}

func (l *link) openRoomLocked() {
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
}

// maxBatch is the most items the link takes off its queue under one lock.
const maxBatch = 64

// run delivers the link's items in order. It takes up to maxBatch of them
// off the queue at a time (one lock for the batch, and one to recycle
// their copies), and stops a batch short if the link breaks, dies or gets
// a delay meanwhile: the rest go back to the head of the queue, so a link
// delivers at most one item after Break returns, as an unbatched one would.
func (l *link) run() {
	defer l.to.calls.Done()
	delayed := false // the item at the head has waited out the delay
	var batch []transport.Item
	for {
		l.mu.Lock()
		for !l.dead && (l.queuedLocked() == 0 || l.broken) && !(l.flush && l.queuedLocked() == 0) {
			l.sleeping = true
			l.mu.Unlock()
			<-l.notify
			l.mu.Lock()
			l.sleeping = false
		}
		if l.dead || l.queuedLocked() == 0 {
			l.end() // unlocks
			return
		}
		n := min(l.queuedLocked(), maxBatch)
		if d := l.delay; d > 0 {
			if !delayed {
				l.mu.Unlock()
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-l.stop:
				}
				t.Stop()
				delayed = true
				continue // look again: the link may have broken or died meanwhile
			}
			n = 1 // each item waits out the delay
		}
		delayed = false
		batch = append(batch[:0], l.items[l.head:l.head+n]...)
		clear(l.items[l.head : l.head+n])
		l.queued.Add(-int64(n))
		l.inFlight.Store(int64(n))
		l.items, l.head = fifo.Compact(l.items, l.head+n)
		if l.room != nil && l.queuedLocked() < l.from.net.low {
			l.openRoomLocked()
		}
		l.mu.Unlock()
		done := len(batch)
		for i, it := range batch {
			if i > 0 && l.halt.Load() {
				done = i
				break
			}
			l.to.h.Deliver(l.from.name, it)
			l.inFlight.Add(-1)
		}
		l.mu.Lock()
		if done < len(batch) {
			l.requeueLocked(batch[done:])
		}
		if !l.from.net.noCopy {
			for _, it := range batch[:done] {
				if !it.Owned {
					l.recycleLocked(it.Data) // lent to Deliver only
				}
			}
		}
		l.mu.Unlock()
		clear(batch)
	}
}

// requeueLocked puts items a halted batch did not deliver back at the head
// of the queue, in order.
func (l *link) requeueLocked(rest []transport.Item) {
	l.items = append(append(make([]transport.Item, 0, len(rest)+l.queuedLocked()), rest...), l.items[l.head:]...)
	l.head = 0
	l.queued.Add(int64(len(rest)))
	l.inFlight.Add(-int64(len(rest)))
}

// end finishes the link's goroutine: it hands back or drops what was not
// delivered, takes the link off its hosts and tells the destination that
// the sender is gone if it is. Called with l.mu held; unlocks it.
func (l *link) end() {
	rest, giveBack, senderGone := l.items[l.head:], l.giveBack, l.senderGone
	if l.reclaim {
		for i := range rest {
			rest[i].Owned = true // the link is done with its buffers
		}
		l.reclaimed, rest = rest, nil
	}
	l.items, l.head = nil, 0
	l.queued.Store(0)
	l.openRoomLocked()
	l.mu.Unlock()
	defer close(l.ended)
	n := l.from.net
	n.mu.Lock()
	if l.from.out[l.to] == l {
		delete(l.from.out, l.to)
		l.from.publishOutLocked()
	}
	if l.to.in[l.from] == l {
		delete(l.to.in, l.from)
	}
	n.mu.Unlock()
	if giveBack && l.from.enter() {
		for _, it := range rest {
			if it.Kind == transport.Frame || it.Kind == transport.Bounce {
				l.from.h.Returned(l.to.name, it)
			}
		}
		l.from.exit()
	}
	if senderGone {
		l.to.event(transport.Event{Peer: l.from.name, Kind: transport.Gone})
	}
}
