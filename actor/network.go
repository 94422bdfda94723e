package actor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
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

	// linkMap is a copy of links for the send path, read without a lock;
	// replaced (under mu) whenever a link comes or goes.
	linkMap atomic.Pointer[map[[2]string]*link]

	mu      sync.Mutex
	hosts   map[string]*Host
	links   map[[2]string]*link
	broken  map[[2]string]bool
	leaving map[string]bool // hosts leaving gracefully: their incoming links refuse frames
	delay   map[[2]string]time.Duration
}

// NewNetwork returns a network whose hosts share store; nil means a new
// in-memory store.
func NewNetwork(store relocation.Store) *Network {
	if store == nil {
		store = relocation.NewMemoryStore(nil)
	}
	return &Network{store: store, hosts: map[string]*Host{}, links: map[[2]string]*link{},
		broken: map[[2]string]bool{}, delay: map[[2]string]time.Duration{}, leaving: map[string]bool{}}
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
// moves with it learn that it is gone. What h sent before it left is
// still delivered; what was sent to h and not received goes back to its
// senders (a crash — Kill — loses both).
func (n *Network) leave(h *Host) {
	n.mu.Lock()
	if n.hosts[h.name] != h {
		n.mu.Unlock()
		return
	}
	delete(n.hosts, h.name)
	delete(n.leaving, h.name)
	var closing []*link
	for k, l := range n.links {
		if k[0] == h.name || k[1] == h.name {
			closing = append(closing, l)
			delete(n.links, k)
		}
	}
	n.publishLinksLocked()
	var peers []*Host
	for _, p := range n.hosts {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	killed := h.killed.Load()
	for _, l := range closing {
		switch {
		case killed:
			l.close(false) // a crash: what was on the wire is lost
		case l.from == h:
			l.closeWhenEmpty() // deliver what h sent before it left
		default:
			l.close(true) // hand what h did not receive back to its senders
		}
	}
	for _, p := range peers {
		p.peerGone(h.name)
	}
}

// publishLinksLocked makes the send path see the current links.
func (n *Network) publishLinksLocked() {
	m := make(map[[2]string]*link, len(n.links))
	for k, l := range n.links {
		m[k] = l
	}
	n.linkMap.Store(&m)
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
// not on the network. Finding an existing link takes no lock.
func (n *Network) linkTo(from *Host, to string) *link {
	key := [2]string{from.name, to}
	if m := n.linkMap.Load(); m != nil {
		if l := (*m)[key]; l != nil {
			return l
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.links[key]; l != nil {
		return l
	}
	dst := n.hosts[to]
	if dst == nil || n.hosts[from.name] != from {
		return nil
	}
	l := newLink(n, from, dst)
	l.leaving = n.leaving[to]
	l.broken.Store(n.broken[pair(from.name, to)])
	l.delay.Store(int64(n.delay[pair(from.name, to)]))
	n.links[key] = l
	n.publishLinksLocked()
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

// setLeaving makes the links to h refuse frames from now on: their
// senders route them again (elsewhere: the peers forgot their routes to
// h). Relocation records and hints are still taken, and what is already
// queued is still delivered, so h hands it on and finishes its moves.
func (n *Network) setLeaving(h *Host) {
	n.mu.Lock()
	if n.leaving == nil {
		n.leaving = map[string]bool{}
	}
	n.leaving[h.name] = true
	var links []*link
	for k, l := range n.links {
		if k[1] == h.name {
			links = append(links, l)
		}
	}
	n.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		l.leaving = true
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
		total += l.queuedLocked() + int(l.busy)
		l.mu.Unlock()
		if !l.in.idle() {
			total++ // messages off the link wait for job permits
		}
		total += l.slow.pending() // messages off the link being looked up
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
		total += l.queuedLocked()
		l.mu.Unlock()
		if l.to == h {
			total += l.slow.pending()
		}
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
func (n *Network) Broken(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.broken[pair(a, b)]
}

// pairLinks returns the links between a and b (either may be nil).
func (n *Network) pairLinksLocked(a, b string) [2]*link {
	return [2]*link{n.links[[2]string{a, b}], n.links[[2]string{b, a}]}
}

// Break breaks the link between hosts a and b in both directions until
// Heal. Relocation records sent while it is broken are lost (the moves
// resend what their phase needs when the link is up again). Messages,
// replies and hints are not lost: they wait on the link, in order, and are
// delivered after Heal — the model is a transport session that resumes,
// as a reconnecting connection with a resend buffer does. If a host is
// killed meanwhile, what waits on its links is lost.
func (n *Network) Break(a, b string) {
	n.mu.Lock()
	n.broken[pair(a, b)] = true
	for _, l := range n.pairLinksLocked(a, b) {
		if l != nil {
			l.broken.Store(true)
		}
	}
	n.mu.Unlock()
}

// Heal repairs a broken link; both hosts learn that the link is up again
// (moves between them resend what their phase needs).
func (n *Network) Heal(a, b string) {
	n.mu.Lock()
	delete(n.broken, pair(a, b))
	ha, hb := n.hosts[a], n.hosts[b]
	ls := n.pairLinksLocked(a, b)
	for _, l := range ls {
		if l != nil {
			l.broken.Store(false)
		}
	}
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
	for _, l := range n.pairLinksLocked(a, b) {
		if l != nil {
			l.delay.Store(int64(d))
		}
	}
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

// linkItem is one thing on a link. Everything but frames crosses as
// bytes, encoded by the sender and decoded by the receiver, as over a real
// transport: relocation records (relocation.AppendRecord), route hints and
// control items (wireitems.go).
type linkItem struct {
	buf    payload.Buffer // a frame: message or reply (ownership moves)
	bounce bool           // the frame goes back to its origin (onBounce)
	rec    []byte         // or a relocation record, with its object
	hint   []byte         // or a route hint
	ctl    []byte         // or a relocate request, answer or cancel (remotemove.go)
}

// link is the ordered link from one host to another. Its receive goroutine
// belongs to the destination host. Sending takes only the link's own lock.
type link struct {
	net      *Network
	from, to *Host
	broken   atomic.Bool  // Network.Break
	delay    atomic.Int64 // Network.Delay, nanoseconds
	mu       sync.Mutex
	items    []linkItem    // queued from items[head]; guarded by mu
	head     int           // guarded by mu
	closed   bool          // guarded by mu
	leaving  bool          // the destination is leaving: frames are refused; guarded by mu
	room     chan struct{} // closed when the queue falls below linkLow; guarded by mu
	bounce   bool          // on close, hand undelivered frames back to the sender
	busy     int32         // an item is being handled; guarded by mu
	flush    bool          // close once everything queued is delivered
	notify   chan struct{}
	done     chan struct{}
	in       outbox // the destination's permit source for messages off this link
	slow     lane   // the destination's work off this link that may call the store
	// maxItem is the largest message the destination admits (its
	// application lane's byte limit, less the item overhead): what a
	// transport's handshake tells the sender, so that a message too large
	// for the destination is refused to its sender, not dropped there.
	maxItem int64
}

func newLink(n *Network, from, to *Host) *link {
	l := &link{net: n, from: from, to: to, notify: make(chan struct{}, 1), done: make(chan struct{}),
		maxItem: to.cfg.ApplicationLimits.Bytes - mailbox.ItemOverhead}
	l.in.host = to
	l.slow.wg = &to.lanes
	to.bg.Add(1)
	go l.run()
	return l
}

// sendRecord queues a relocation record about obj. A record on a broken
// or closed link, or one the record hook refuses, is lost: the relocation
// protocol recovers.
func (l *link) sendRecord(obj relocation.Object, rec relocation.Record) {
	if l.broken.Load() {
		return
	}
	if hook := l.net.recordHook.Load(); hook != nil && !(*hook)(l.from.name, l.to.name, rec) {
		return
	}
	size := 64 + len(obj.Kind) + len(obj.ID) // the fixed part, roughly
	switch r := rec.(type) {
	case *relocation.Chunk:
		size += len(r.Data)
	case *relocation.Relay:
		size += len(r.Frame)
	}
	l.sendBytes(linkItem{rec: relocation.AppendRecord(make([]byte, 0, size), obj, rec)})
}

// sendHint queues a route hint; on a closed link it is dropped (hints are
// advice).
func (l *link) sendHint(obj relocation.Object, hint routeHint) {
	l.sendBytes(linkItem{hint: appendHint(nil, obj, hint)})
}

// sendControl queues a relocate request, answer or cancel; errLinkDown if
// the link is closed. Like messages, it waits out a broken link.
func (l *link) sendControl(ctl any) error {
	return l.sendBytes(linkItem{ctl: appendControl(nil, ctl)})
}

// sendReply queues a reply frame; errLinkDown if the link is closed (the
// frame stays the caller's). A leaving destination still takes replies.
func (l *link) sendReply(buf payload.Buffer) error {
	return l.sendBytes(linkItem{buf: buf})
}

// sendBytes queues an item that a leaving destination still takes;
// errLinkDown if the link is closed.
func (l *link) sendBytes(it linkItem) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errLinkDown
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
	case l.leaving:
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
		for (l.queuedLocked() == 0 || l.broken.Load()) && !l.closed {
			if l.flush && l.queuedLocked() == 0 {
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
			rest, bounce := l.items[l.head:], l.bounce
			l.items, l.head = nil, 0
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
		it := l.items[l.head]
		l.items[l.head] = linkItem{}
		l.head++
		switch {
		case l.head == len(l.items):
			l.items, l.head = l.items[:0], 0 // reuse the array
		case l.head > 1024 && l.head > len(l.items)/2:
			n := copy(l.items, l.items[l.head:])
			clear(l.items[n:])
			l.items, l.head = l.items[:n], 0
		}
		l.busy = 1
		if l.room != nil && l.queuedLocked() < linkLow {
			close(l.room)
			l.room = nil
		}
		l.mu.Unlock()
		if d := time.Duration(l.delay.Load()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.to.bgStop:
			}
			t.Stop()
		}
		l.to.receive(l, it)
		l.mu.Lock()
		l.busy = 0
		l.mu.Unlock()
	}
}

// lane runs work in order on a goroutine of its own, started when work
// comes and ended when none is left; wg counts it (the host's Close waits).
type lane struct {
	mu      sync.Mutex
	work    []func() // guarded by mu
	running bool     // guarded by mu
	wg      *sync.WaitGroup
}

func (ln *lane) add(f func()) {
	ln.mu.Lock()
	ln.work = append(ln.work, f)
	start := !ln.running
	ln.running = true
	if start {
		ln.wg.Add(1)
	}
	ln.mu.Unlock()
	if start {
		go ln.run()
	}
}

func (ln *lane) run() {
	defer ln.wg.Done()
	for {
		ln.mu.Lock()
		if len(ln.work) == 0 {
			ln.running = false
			ln.work = nil
			ln.mu.Unlock()
			return
		}
		f := ln.work[0]
		ln.work[0] = nil
		ln.work = ln.work[1:]
		ln.mu.Unlock()
		f()
	}
}

// pending returns how much work waits or runs on the lane.
func (ln *lane) pending() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	n := len(ln.work)
	if ln.running {
		n++
	}
	return n
}

// queuedLocked returns how many items wait on the link.
func (l *link) queuedLocked() int { return len(l.items) - l.head }

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

// sendMessage queues m's frame. If the destination is leaving it returns
// errHostGone, on a closed link errLinkDown; m stays the caller's then.
func (l *link) sendMessage(m *payload.Message) error { return l.sendFrame(m, false) }

// sendBounce queues m's frame back to its origin (onBounce there); as
// sendMessage.
func (l *link) sendBounce(m *payload.Message) error { return l.sendFrame(m, true) }

func (l *link) sendFrame(m *payload.Message, bounce bool) error {
	l.mu.Lock()
	if err := l.refusalLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.items = append(l.items, linkItem{buf: m.TakeBuffer(), bounce: bounce})
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
		if l.queuedLocked() < linkHigh || l.closed {
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
