package actor

import (
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// Back-pressure from a reorder buffer (docs/architecture.md, "Order, routing and transports"): the bound on what an
// object holds for one sender (route.DefaultMaxHeld) never releases
// anything out of order; past it, the object's host pushes back on that
// sender instead.
//
// The owner's side: when an arrival finds its sender past the bound, the
// owner notes the sender (owner.pushed, under seqMu) and, after the lock,
// tells the sending host to pause (a pressure control item; a local
// sender is paused directly). When the sender's held messages are back to
// half the bound, or the owner's inbox freezes (a move: the target pushes
// again if it must) or shuts, it tells the sender to resume.
//
// The sender's side (pressureSet): a send from outside the handlers to an
// object paused here waits for the resume before it takes its job permit
// (so waiting senders hold none) and before it is stamped — at most
// SendTimeout, then it fails with DeadlineExceeded (ErrPushedBack) and
// nothing was stamped, so no gap is left. Sends from
// handlers, forwards, relays and retries of stamped messages never wait:
// one of them may be the very message the gap waits for. A pause ends
// also when the host that asked for it fails or leaves (a fact), or the
// host closes.

// pressureSet is the objects this host's outside senders must wait for.
// Lock order: mu is a leaf.
type pressureSet struct {
	n  atomic.Int32 // len(m): the send path reads it without the lock
	mu sync.Mutex
	m  map[relocation.Object]*paused // guarded by mu
}

type paused struct {
	by      string        // the host that asked for the pause
	resumed chan struct{} // closed on resume
}

// pause records that by asked this host's senders to obj to wait.
func (p *pressureSet) pause(obj relocation.Object, by string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.m[obj]; cur != nil {
		cur.by = by
		return
	}
	if p.m == nil {
		p.m = map[relocation.Object]*paused{}
	}
	p.m[obj] = &paused{by: by, resumed: make(chan struct{})}
	p.n.Store(int32(len(p.m)))
}

// resume ends the pause of obj (any host may end it: the object may have
// moved since the pause).
func (p *pressureSet) resume(obj relocation.Object) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.m[obj]; cur != nil {
		close(cur.resumed)
		delete(p.m, obj)
		p.n.Store(int32(len(p.m)))
	}
}

// resumeBy ends every pause host asked for (it failed or left), or every
// pause if host is "".
func (p *pressureSet) resumeBy(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for obj, cur := range p.m {
		if host == "" || cur.by == host {
			close(cur.resumed)
			delete(p.m, obj)
		}
	}
	p.n.Store(int32(len(p.m)))
}

// wait returns the channel a sender to obj waits on, or nil.
func (p *pressureSet) wait(obj relocation.Object) <-chan struct{} {
	if p.n.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.m[obj]; cur != nil {
		return cur.resumed
	}
	return nil
}

// len returns how many objects are paused.
func (p *pressureSet) len() int { return int(p.n.Load()) }

// pressureItem asks a sending host to pause (or resume) its outside
// senders to an object.
type pressureItem struct {
	obj    relocation.Object
	paused bool
}

// pushBackLocked notes, with o.seqMu held, that sender is past o's
// reorder bound; it reports whether the sender must be told (it was not
// already).
func (o *owner) pushBackLocked(sender []byte) bool {
	if o.pushed == nil {
		o.pushed = map[string]struct{}{}
	}
	if _, ok := o.pushed[string(sender)]; ok {
		return false
	}
	o.pushed[string(sender)] = struct{}{}
	return true
}

// relievedLocked returns, with o.seqMu held, the pushed senders that may
// resume: their held messages are back to half the bound, or (all) the
// inbox is not open any more.
func (o *owner) relievedLocked(all bool) []string {
	if len(o.pushed) == 0 {
		return nil
	}
	var out []string
	ord := o.inbox.Order()
	for s := range o.pushed {
		if all || o.inbox.State() != route.Open || ord.HeldOf([]byte(s)) <= o.host.cfg.ReorderBound/2 {
			out = append(out, s)
			delete(o.pushed, s)
		}
	}
	return out
}
