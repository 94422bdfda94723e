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
// Send wakes the goroutine only when it sleeps. A link delays in two ways:
// Delay makes each delivery wait in turn (a slow link: one item per delay,
// and what is sent queues behind what was sent before), Latency holds each
// item back from its own Send (a long link: any number of items in flight
// at once).
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The network part (Network): the directory of attached hosts and the
// faults injected between them.
//
// Owns: Options; Network (its hosts, its broken pairs, its delays, its
// hook), Attach and Hosts; the faults — Break, Heal, Delay, Kill,
// SetHook — which reach the links between a pair (forPairLocked).
// Lock: Network.mu, then link.mu (Break, Heal and Delay set each link's
// state under both); no lock is held while a Handler gets an event.
// May call: host.go (event, Close), link.go (setHaltLocked, wake).
// Invariants: a name is attached at most once until its host closes; a
// broken pair's links deliver nothing until Heal and lose nothing; a new
// link starts with its pair's broken state and delay (host.go).

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
// are injected with Break, Heal, Delay, Latency, Kill and SetHook.
//
// A Network is safe for concurrent use.
type Network struct {
	high, low int
	noCopy    bool
	hook      atomic.Pointer[func(from, to string, it transport.Item) bool]

	mu      sync.RWMutex
	hosts   map[string]*host            // attached and not closing; guarded by mu
	broken  map[[2]string]bool          // by pair(a, b); guarded by mu
	delay   map[[2]string]time.Duration // by pair(a, b); guarded by mu
	latency map[[2]string]time.Duration // by pair(a, b); guarded by mu
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
		latency: map[[2]string]time.Duration{},
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
	n.setPair(n.delay, a, b, d, func(l *link) {
		l.delay = max(d, 0)
		l.setHaltLocked()
	})
}

// Latency makes every item sent between a and b, both ways, arrive d
// after its Send (0 removes it), as over a network path whose one-way
// delay is d: the link carries any number of items at once, in order, and
// an item waits behind an earlier one only until that one's own time is
// up. Unlike Delay, the link is no slower for it: what else is sent on it
// (a host's periodic reports) holds nothing up, so each way takes d. An
// item keeps the latency of its Send: one queued before Latency is called
// is not held back by it, nor let go sooner by a later Latency.
func (n *Network) Latency(a, b string, d time.Duration) {
	n.setPair(n.latency, a, b, d, func(l *link) { l.latency = max(d, 0) })
}

// setPair sets the pair's duration in m (0 or less removes it) and
// applies it with set, under each link's lock, to the pair's links.
func (n *Network) setPair(m map[[2]string]time.Duration, a, b string, d time.Duration, set func(*link)) {
	n.mu.Lock()
	if d <= 0 {
		delete(m, pair(a, b))
	} else {
		m[pair(a, b)] = d
	}
	n.forPairLocked(a, b, func(l *link) {
		l.mu.Lock()
		set(l)
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
