package actor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Network joins hosts that run in one process: the in-process transport
// (the embedded default). It gives every ordered pair of hosts one link
// that carries ordinary messages, replies, relocation records and relays
// in order, and it holds the Location Store the hosts share. Faults can be
// injected for tests: Break and Heal a link, Delay it, Kill a host.
//
// A Network is safe for concurrent use.
type Network struct {
	store      relocation.Store
	pauses     pauseLog
	recordHook atomic.Pointer[func(from, to string, rec relocation.Record) bool]

	mu      sync.Mutex
	hosts   map[string]*Host
	links   map[[2]string]*link
	broken  map[[2]string]bool
	leaving map[string]leaveStage // hosts leaving gracefully: what their incoming links refuse
	delay   map[[2]string]time.Duration
}

// NewNetwork returns a network whose hosts share store; nil means a new
// in-memory store.
func NewNetwork(store relocation.Store) *Network {
	if store == nil {
		store = relocation.NewMemoryStore(nil)
	}
	return &Network{store: store, hosts: map[string]*Host{}, links: map[[2]string]*link{},
		broken: map[[2]string]bool{}, delay: map[[2]string]time.Duration{}}
}

// pauseLog measures each move's pause: from the seal at the source to the
// opening at the target (both hosts share this process's clock).
type pauseLog struct {
	mu     sync.Mutex
	sealAt map[relocation.MoveID]int64
	done   []time.Duration
}

func (p *pauseLog) sealed(id relocation.MoveID) {
	p.mu.Lock()
	if p.sealAt == nil {
		p.sealAt = map[relocation.MoveID]int64{}
	}
	p.sealAt[id] = nanotime()
	p.mu.Unlock()
}

func (p *pauseLog) opened(id relocation.MoveID) {
	p.mu.Lock()
	if at, ok := p.sealAt[id]; ok {
		delete(p.sealAt, id)
		if len(p.done) == maxPauses {
			p.done = append(p.done[:0], p.done[maxPauses/2:]...) // keep the newer half
		}
		p.done = append(p.done, time.Duration(nanotime()-at))
	}
	p.mu.Unlock()
}

// ended forgets a move that will not open (aborted, lost or abandoned).
func (p *pauseLog) ended(id relocation.MoveID) {
	p.mu.Lock()
	delete(p.sealAt, id)
	p.mu.Unlock()
}

// maxPauses bounds the pauses kept between two calls of Network.Pauses.
const maxPauses = 1 << 16

// Pauses returns the pause of every move completed on the network since
// the last call (at most the newest 65,536) — from the seal at the source
// to the opening at the target — and forgets them.
func (n *Network) Pauses() []time.Duration {
	n.pauses.mu.Lock()
	defer n.pauses.mu.Unlock()
	out := n.pauses.done
	n.pauses.done = nil
	return out
}

// Store returns the network's Location Store.
func (n *Network) Store() relocation.Store { return n.store }

// Hosts returns the names of the running hosts on the network.
func (n *Network) Hosts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.hosts))
	for name := range n.hosts {
		out = append(out, name)
	}
	return out
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func (n *Network) join(h *Host) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.hosts[h.name]; dup {
		return payload.NewError(payload.AlreadyExists, "actor.Host.Start", "the network already has a host named "+h.name)
	}
	n.hosts[h.name] = h
	return nil
}

// leave takes h off the network: its links close, and hosts that had
// moves with it learn that it is gone.
//
// After a graceful leave (leaveGracefully done) every fence that had to
// pass through h has been handed on, so messages held elsewhere for such
// fences keep waiting for them. Otherwise (a crash, or Close without
// Stop) fences may be lost with h, and its peers release what waits for
// fences through h: at once on a crash or with no link from h, else once
// everything h sent before it left has been taken in.
func (n *Network) leave(h *Host) {
	n.mu.Lock()
	if n.hosts[h.name] != h {
		n.mu.Unlock()
		return
	}
	delete(n.hosts, h.name)
	delete(n.leaving, h.name)
	var closing []*link
	hasLink := map[string]bool{} // peers that get a "left" item on a link from h
	for k, l := range n.links {
		if k[0] == h.name || k[1] == h.name {
			closing = append(closing, l)
			delete(n.links, k)
			if k[0] == h.name {
				hasLink[k[1]] = true
			}
		}
	}
	var peers []*Host
	for _, p := range n.hosts {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	killed, graceful := h.killed.Load(), h.leftGracefully.Load()
	for _, l := range closing {
		switch {
		case killed:
			l.close(false) // a crash: what was on the wire is lost
		case l.from == h:
			// Deliver what h sent before it left; without a graceful leave
			// the last item tells the peer, in order, that nothing more
			// comes from h.
			l.mu.Lock()
			if !graceful {
				l.items = append(l.items, linkItem{left: true})
			}
			l.mu.Unlock()
			l.closeWhenEmpty()
		default:
			l.close(true) // hand what h did not receive back to its senders
		}
	}
	for _, p := range peers {
		p.peerGone(h.name, graceful, killed || (!graceful && !hasLink[p.name]))
	}
}

// SetRecordHook installs a hook, for fault-injection tests, that sees
// every relocation record as it is sent, from one host to another; a
// record for which it returns false is lost. The hook must not block; nil
// removes it.
func (n *Network) SetRecordHook(hook func(from, to string, rec relocation.Record) bool) {
	if hook == nil {
		n.recordHook.Store(nil)
		return
	}
	n.recordHook.Store(&hook)
}

// Host returns the running host named name on the network, or nil.
func (n *Network) Host(name string) *Host { return n.host(name) }

func (n *Network) host(name string) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[name]
}

// linkTo returns the link from h to the named host, or nil if that host is
// not on the network.
func (n *Network) linkTo(from *Host, to string) *link {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := [2]string{from.name, to}
	if l := n.links[key]; l != nil {
		return l
	}
	dst := n.hosts[to]
	if dst == nil || n.hosts[from.name] != from {
		return nil
	}
	l := newLink(n, from, dst)
	l.leaving = n.leaving[to]
	n.links[key] = l
	return l
}

// markLeaving tells the other hosts that h is about to leave: they stop
// routing to it by their caches (they ask the store again), while links to
// h keep delivering, so h can forward what is already on its way.
func (n *Network) markLeaving(h *Host) {
	h.draining.Store(true)
	for _, p := range n.peers(h) {
		p.forgetHost(h.name)
	}
}

// peers returns the hosts on the network other than h.
func (n *Network) peers(h *Host) []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*Host
	for _, p := range n.hosts {
		if p != h {
			out = append(out, p)
		}
	}
	return out
}

// leaveStage is how far a gracefully leaving host is: what the links to
// it refuse.
type leaveStage int8

const (
	// notLeaving: the link takes everything.
	notLeaving leaveStage = iota
	// refusingFrames: a sender gets its frame back and routes it again
	// (elsewhere: the peers forgot their routes to the host); fences are
	// still taken, so that they follow what the host already has.
	refusingFrames
	// sealed: fences are refused too (every fence the host had to pass on
	// has been taken and handled); the host is about to leave.
	sealed
)

// setLeaving moves the links to h to stage: from then on they refuse
// what stage refuses. What is already queued is still delivered, so h
// hands it on in order, and nothing refused can be added behind it.
func (n *Network) setLeaving(h *Host, stage leaveStage) {
	n.mu.Lock()
	if n.leaving == nil {
		n.leaving = map[string]leaveStage{}
	}
	n.leaving[h.name] = stage
	var links []*link
	for k, l := range n.links {
		if k[1] == h.name {
			links = append(links, l)
		}
	}
	n.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		l.leaving = stage
		l.mu.Unlock()
	}
}

// pendingIn returns how many items wait on, or are being handled off, the
// links to h.
func (n *Network) pendingIn(h *Host) int {
	n.mu.Lock()
	links := make([]*link, 0, len(n.links))
	for k, l := range n.links {
		if k[1] == h.name {
			links = append(links, l)
		}
	}
	n.mu.Unlock()
	total := 0
	for _, l := range links {
		l.mu.Lock()
		total += len(l.items) + int(l.busy)
		l.mu.Unlock()
		if !l.in.idle() {
			total++ // messages off the link wait for job permits
		}
	}
	return total
}

// pending returns how many items wait on links to or from h.
func (n *Network) pending(h *Host) int {
	n.mu.Lock()
	links := make([]*link, 0, len(n.links))
	for k, l := range n.links {
		if k[0] == h.name || k[1] == h.name {
			links = append(links, l)
		}
	}
	n.mu.Unlock()
	total := 0
	for _, l := range links {
		l.mu.Lock()
		total += len(l.items)
		l.mu.Unlock()
	}
	return total
}

// reachable reports whether host from is on the network and its link to
// host to is not broken.
func (n *Network) reachable(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[from] != nil && !n.broken[pair(from, to)]
}

// Broken reports whether the link between a and b is broken.
func (n *Network) Broken(a, b string) bool { return n.isBroken(a, b) }

func (n *Network) isBroken(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.broken[pair(a, b)]
}

func (n *Network) delayOf(a, b string) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delay[pair(a, b)]
}

// Break breaks the link between hosts a and b in both directions until
// Heal. Relocation records sent while it is broken are lost (the moves
// resend what their phase needs when the link is up again). Messages,
// replies, fences and hints are not lost: they wait on the link, in order,
// and are delivered after Heal — the model is a transport session that
// resumes, as a reconnecting connection with a resend buffer does. If a
// host is killed meanwhile, what waits on its links is lost.
func (n *Network) Break(a, b string) {
	n.mu.Lock()
	n.broken[pair(a, b)] = true
	n.mu.Unlock()
}

// Heal repairs a broken link; both hosts learn that the link is up again
// (moves between them resend what their phase needs).
func (n *Network) Heal(a, b string) {
	n.mu.Lock()
	delete(n.broken, pair(a, b))
	ha, hb := n.hosts[a], n.hosts[b]
	ls := []*link{n.links[[2]string{a, b}], n.links[[2]string{b, a}]}
	n.mu.Unlock()
	for _, l := range ls {
		if l != nil {
			l.wake()
		}
	}
	if ha != nil {
		ha.linkUp(b)
	}
	if hb != nil {
		hb.linkUp(a)
	}
}

// Delay makes every delivery between a and b wait d (0 removes it).
func (n *Network) Delay(a, b string, d time.Duration) {
	n.mu.Lock()
	n.delay[pair(a, b)] = d
	n.mu.Unlock()
}

// Kill stops the named host at once (Close), as if its process died, and
// expires its lease when the store allows it (MemoryStore), so that other
// hosts may take its objects over without waiting for the lease TTL.
// Messages queued at the killed host are lost.
func (n *Network) Kill(name string) {
	h := n.host(name)
	if h == nil {
		return
	}
	h.killed.Store(true)
	h.Close()
	if ms, ok := n.store.(interface{ Expire(host string) }); ok {
		ms.Expire(name)
	}
}

// linkItem is one thing on a link.
type linkItem struct {
	buf      payload.Buffer    // a frame: message or reply (ownership moves)
	fenceSeq uint64            // the frame's fence number (0: none)
	fenceVia string            // and the old route that fence travels
	fenceOf  string            // and the host that sent the frame first ("": the link's)
	rec      relocation.Record // or a relocation record
	obj      relocation.Object // the object a record, hint or fence is about
	hint     *routeHint        // or a route hint
	fence    *fenceMsg         // or a fence
	left     bool              // or the sender's last item: it left the network
}

// link is the ordered link from one host to another. Its receive goroutine
// belongs to the destination host.
type link struct {
	net      *Network
	from, to *Host
	mu       sync.Mutex
	items    []linkItem    // guarded by mu
	closed   bool          // guarded by mu
	leaving  leaveStage    // the destination is leaving: what is refused; guarded by mu
	room     chan struct{} // closed when the queue falls below linkLow; guarded by mu
	bounce   bool          // on close, hand undelivered frames back to the sender
	busy     int32         // an item is being handled; guarded by mu
	flush    bool          // close once everything queued is delivered
	notify   chan struct{}
	done     chan struct{}
	in       outbox // the destination's permit source for messages off this link
}

func newLink(n *Network, from, to *Host) *link {
	l := &link{net: n, from: from, to: to, notify: make(chan struct{}, 1), done: make(chan struct{})}
	l.in.host = to
	to.bg.Add(1)
	go l.run()
	return l
}

// send queues it for delivery. A frame the link refuses stays the
// caller's (refusalLocked's error); so does a fence (errLinkDown or
// errHostGone: the caller must not count on it arriving). A record on a
// broken or closed link, or one the record hook refuses, is dropped, as
// is a record or hint for a host that is leaving.
func (l *link) send(it linkItem) error {
	if it.rec != nil {
		if l.net.isBroken(l.from.name, l.to.name) {
			return nil // lost; the relocation protocol recovers
		}
		if hook := l.net.recordHook.Load(); hook != nil && !(*hook)(l.from.name, l.to.name, it.rec) {
			return nil
		}
	}
	l.mu.Lock()
	var err error
	switch {
	case it.fence != nil:
		if l.closed {
			err = errLinkDown
		} else if l.leaving == sealed {
			err = errHostGone
		}
	default:
		err = l.refusalLocked()
	}
	if err != nil {
		l.mu.Unlock()
		if it.buf.IsZero() && it.fence == nil {
			return nil // a record or hint: dropped
		}
		return err
	}
	l.items = append(l.items, it)
	l.mu.Unlock()
	l.wake()
	return nil
}

// refusalLocked says why the link takes no frame now: errLinkDown (closed)
// or errHostGone (its destination is leaving: the sender keeps the frame
// and routes it again); nil if it takes one.
func (l *link) refusalLocked() error {
	switch {
	case l.closed:
		return errLinkDown
	case l.leaving != notLeaving:
		return errHostGone
	}
	return nil
}

var errLinkDown = payload.NewError(payload.Unavailable, "actor", "the link to the host is down")

func (l *link) run() {
	defer l.to.bg.Done()
	defer close(l.done)
	for {
		l.mu.Lock()
		for (len(l.items) == 0 || l.net.isBroken(l.from.name, l.to.name)) && !l.closed {
			if l.flush && len(l.items) == 0 {
				l.closed = true
				break
			}
			l.mu.Unlock()
			select {
			case <-l.notify:
			case <-l.to.bgStop:
				l.close(!l.to.killed.Load())
			}
			l.mu.Lock()
		}
		if l.closed {
			rest, bounce := l.items, l.bounce
			l.items = nil
			l.mu.Unlock()
			for _, it := range rest {
				if bounce && !it.buf.IsZero() && !l.from.killed.Load() {
					// Not delivered: the sender's host routes it again.
					l.from.bounced(it.buf)
					continue
				}
				l.to.dropItem(it)
			}
			return
		}
		it := l.items[0]
		l.items[0] = linkItem{}
		l.items = l.items[1:]
		l.busy = 1
		if l.room != nil && len(l.items) < linkLow {
			close(l.room)
			l.room = nil
		}
		l.mu.Unlock()
		if d := l.net.delayOf(l.from.name, l.to.name); d > 0 {
			select {
			case <-time.After(d):
			case <-l.to.bgStop:
			}
		}
		l.to.receive(l, it)
		l.mu.Lock()
		l.busy = 0
		l.mu.Unlock()
	}
}

// wake makes the link's goroutine look at its queue again.
func (l *link) wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// closeWhenEmpty closes the link once what is queued has been delivered.
func (l *link) closeWhenEmpty() {
	l.mu.Lock()
	l.flush = true
	l.mu.Unlock()
	l.wake()
}

// close closes the link; with bounce, frames not yet delivered go back to
// the sending host (a graceful leave), else they are lost (a crash).
func (l *link) close(bounce bool) {
	l.mu.Lock()
	if !l.closed {
		l.closed, l.bounce = true, bounce
	}
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
	l.mu.Unlock()
	l.wake()
}

// sendMessage queues m's frame with the fence fields of it. If the
// destination is leaving it returns errHostGone and m stays the caller's;
// on a closed link it returns errLinkDown (m too stays the caller's).
func (l *link) sendMessage(m *payload.Message, it linkItem) error {
	l.mu.Lock()
	if err := l.refusalLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	it.buf = m.TakeBuffer()
	l.items = append(l.items, it)
	l.mu.Unlock()
	l.wake()
	return nil
}

// Flow control on a link: a sender from outside the hosts' handlers (Tell,
// Ask) waits while more than linkHigh items are queued on the link, until
// fewer than linkLow are. Forwarded messages, replies, relocation records
// and sends from handlers never wait (the link goroutines and owners must
// not block on each other); they are bounded by the senders that do.
const (
	linkHigh = 8192
	linkLow  = linkHigh / 2
)

// waitRoom waits until the link has room for an external send, ctx ends
// (its error), timeout passes (ErrSendTimeout) or done closes.
func (l *link) waitRoom(ctx context.Context, timeout time.Duration, done <-chan struct{}) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.mu.Lock()
		if len(l.items) < linkHigh || l.closed {
			l.mu.Unlock()
			return nil
		}
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(timeout)
		}
		select {
		case <-room:
		case <-ctx.Done():
			return ctxErr(ctx)
		case <-timer.C:
			return ErrSendTimeout
		case <-done:
			return ErrShuttingDown
		}
	}
}
