package actor

import (
	"sync"
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
	store relocation.Store

	mu     sync.Mutex
	hosts  map[string]*Host
	links  map[[2]string]*link
	broken map[[2]string]bool // unordered pairs (sorted)
	delay  map[[2]string]time.Duration
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
func (n *Network) leave(h *Host) {
	n.mu.Lock()
	if n.hosts[h.name] != h {
		n.mu.Unlock()
		return
	}
	delete(n.hosts, h.name)
	var closing []*link
	for k, l := range n.links {
		if k[0] == h.name || k[1] == h.name {
			closing = append(closing, l)
			delete(n.links, k)
		}
	}
	var peers []*Host
	for _, p := range n.hosts {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	for _, l := range closing {
		l.close()
	}
	for _, p := range peers {
		p.peerGone(h.name)
	}
}

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
	n.links[key] = l
	return l
}

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

// Break breaks the link between hosts a and b in both directions: records
// sent while it is broken are lost, and messages are refused (the sender
// gets Unavailable); what was already queued is still delivered, in order.
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
	n.mu.Unlock()
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
	h.Close()
	if ms, ok := n.store.(interface{ Expire(host string) }); ok {
		ms.Expire(name)
	}
}

// linkItem is one thing on a link.
type linkItem struct {
	buf  payload.Buffer    // a frame: message or reply (ownership moves)
	rec  relocation.Record // or a relocation record
	obj  relocation.Object // the object a record or hint is about
	hint *routeHint        // or a route hint
}

// link is the ordered link from one host to another. Its receive goroutine
// belongs to the destination host.
type link struct {
	net      *Network
	from, to *Host
	mu       sync.Mutex
	items    []linkItem // guarded by mu
	closed   bool       // guarded by mu
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

// send queues it for delivery. A frame on a broken or closed link is
// refused (the caller keeps the buffer); a record is dropped.
func (l *link) send(it linkItem) error {
	if l.net.isBroken(l.from.name, l.to.name) {
		if it.rec != nil || it.hint != nil {
			return nil // lost on the broken link; the protocol recovers
		}
		return errLinkDown
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		if it.rec != nil || it.hint != nil {
			return nil
		}
		return errLinkDown
	}
	l.items = append(l.items, it)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
	return nil
}

var errLinkDown = payload.NewError(payload.Unavailable, "actor", "the link to the host is down")

func (l *link) run() {
	defer l.to.bg.Done()
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.items) == 0 && !l.closed {
			l.mu.Unlock()
			select {
			case <-l.notify:
			case <-l.to.bgStop:
				l.close()
			}
			l.mu.Lock()
		}
		if l.closed {
			rest := l.items
			l.items = nil
			l.mu.Unlock()
			for _, it := range rest {
				l.to.dropItem(it)
			}
			return
		}
		it := l.items[0]
		l.items[0] = linkItem{}
		l.items = l.items[1:]
		l.mu.Unlock()
		if d := l.net.delayOf(l.from.name, l.to.name); d > 0 {
			select {
			case <-time.After(d):
			case <-l.to.bgStop:
			}
		}
		l.to.receive(l, it)
	}
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}
