package actor

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The host's side of the seam between hosts (docs/architecture.md, "Packages", "Order, routing and transports"). A host
// reaches other hosts only through its transport (Config.Transport) —
// items of bytes, in order per peer, and link events — and learns who
// they are only from its membership (Config.Membership): their states,
// kinds and message limits. Nothing here reads another host's memory.
//
// What arrives is handled on the transport's goroutines (hostHandler):
// decoding, route-table updates and admission to local owners never wait
// for a store call or a lock another host's traffic needs; a message whose
// object is not here goes to the sending peer's slow lane (inbound.slow),
// where a store look-up may wait without stalling the peer's link.
//
// What this host knows of its peers (peerView) comes from three sources:
// the membership watch (members, their state and kinds), the transport's
// events (a link down, a peer leaving, gone) and the peers' load reports
// (control items a host sends when its number of objects changes).
//
// Lock order: peerView.mu is a leaf.

// lookupLanes is how many look-up lanes a host has (Host.lookupLane).
const lookupLanes = 8

// Sending. Send does not keep the bytes it is given, so a frame's pooled
// buffer is released as soon as it is sent. A peer that is gone, unknown
// or leaving (frames only) is errHostGone: the caller routes again.

// errLinkDown: this host's transport is closed.
var errLinkDown = payload.NewError(payload.Unavailable, "actor", "the link to the host is down")

// errHostGone: the host a route names is no longer on the network.
var errHostGone = payload.NewError(payload.Unavailable, "actor", "the host is not on the network")

func sendError(err error) error {
	switch {
	case err == nil:
		return nil
	case transport.IsRetryable(err):
		return errHostGone
	}
	return errLinkDown
}

// doneCtx is a context that is already done: WaitRoom with it only tells
// whether there is room.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// watchMembers keeps the view up to date from the membership watch until
// the watch ends (the host closes).
func (h *Host) watchMembers(ch <-chan membership.Event) {
	for ev := range ch {
		for _, name := range h.peers.view.apply(ev) {
			if name != h.name {
				h.gaps.failed(name, ev.Type.String())
			}
		}
		h.peers.tellDirectory()
	}
}

// Addr returns the address other hosts reach this one at — what it
// publishes as its membership Address — when its transport has one (a
// network transport, transport.Directory); else "".
func (h *Host) Addr() string {
	if d, ok := h.peers.tr.(transport.Directory); ok {
		return d.Addr()
	}
	return ""
}

// pauseLog keeps the pauses of the moves this host was the source of
// (moveDriver.pauseLocked: the seal here to the opening at the target).
type pauseLog struct {
	mu   sync.Mutex
	done []time.Duration
}

func (p *pauseLog) add(d time.Duration) {
	p.mu.Lock()
	if len(p.done) == maxPauses {
		p.done = append(p.done[:0], p.done[maxPauses/2:]...) // keep the newer half
	}
	p.done = append(p.done, d)
	p.mu.Unlock()
}

// maxPauses bounds the pauses kept between two calls of Host.Pauses.
const maxPauses = 1 << 16

// Pauses returns the pause of every move this host was the source of
// since the last call (at most the newest 65,536), and forgets them. A
// pause runs from the seal here (no turn of the object starts any more) to
// the opening of the object at the target (its turns run there). Hosts
// compare no clocks: the pause is this host's time from the seal to the
// send of the Prepare record, plus the Prepare's way over (half the
// shorter of two round trips of the move on the link, as NTP estimates a
// one-way delay), plus the target's time from the Prepare's arrival to the
// opening, which the target reports in its Committed record. (Should the target not report it, the pause is taken
// up to the Committed's arrival here: an upper bound.)
func (h *Host) Pauses() []time.Duration {
	h.moves.pauses.mu.Lock()
	defer h.moves.pauses.mu.Unlock()
	out := h.moves.pauses.done
	h.moves.pauses.done = nil
	return out
}

// Peers returns the names of the other hosts this host knows from its
// membership, serving or draining, as the membership last reported them,
// sorted; nil for a host without a transport. A host learns of a host
// that joined after it a moment after that host's Start returned (the
// membership's watch), so a program that starts several hosts and wants
// each to place objects on all the others waits until their Peers list
// them.
func (h *Host) Peers() []string {
	h.peers.view.mu.RLock()
	defer h.peers.view.mu.RUnlock()
	var out []string
	for name := range h.peers.view.members {
		if name != h.name {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
