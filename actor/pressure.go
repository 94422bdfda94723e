package actor

import (
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/relocation"
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
// Each pause and resume is decided under seqMu and queued there
// (owner.pushQ); one goroutine at a time sends the queue, in the order
// the advice was decided (owner.sendPushes). Sent as each decider left the
// lock, a resume could overtake the pause it ends, and the sender would
// wait for a resume that had already come: its outside sends to the object
// refused with ErrPushedBack for as long as both hosts are up.
//
// The sender's side (pressureSet): a send from outside the handlers to an
// object paused here waits for the resume before it takes its job permit
// (so waiting senders hold none) and before it is stamped — at most
// SendTimeout, then it fails with DeadlineExceeded (ErrPushedBack) and
// nothing was stamped, so no gap is left. Sends from
// handlers, forwards, relays and retries of stamped messages never wait:
// one of them may be the very message the gap waits for. An object is
// paused while any host that asked for a pause has not resumed it (the
// object may have moved, and two owners' advice travels on two links); a
// host's pauses end also when it fails or leaves (a fact), and all end
// when this host closes.

// pressureSet is the objects this host's outside senders must wait for.
// Lock order: mu is a leaf. Bounds: a pause is taken only for an object
// this host sends to (inbounds.onPressure), and at most maxPausesPerPeer
// objects are paused by one host.
type pressureSet struct {
	n     atomic.Int32 // len(m): the send path reads it without the lock
	mu    sync.Mutex
	m     map[relocation.Object]*paused // guarded by mu
	byMap map[string]int                // objects each host's pauses are on; guarded by mu
	// checking is the pauses whose sender's ownership the Location Store
	// is asked about (this host's routes did not name it the owner); a
	// resume meanwhile takes its pause out. Guarded by mu.
	checking   map[pauseKey]struct{}
	checksOfBy map[string]int // len of checking per host; guarded by mu
}

// pauseKey is one host's pause of one object.
type pauseKey struct {
	obj relocation.Object
	by  string
}

// maxPauseChecksPerPeer bounds the store look-ups one host's pauses may
// have under way here at once; past it a pause is refused, counted.
const maxPauseChecksPerPeer = 64

// check notes that by's pause of obj waits for a store look-up, and
// reports false (noting nothing) if by has maxPauseChecksPerPeer under
// way already.
func (p *pressureSet) check(obj relocation.Object, by string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := pauseKey{obj, by}
	if _, on := p.checking[k]; on {
		return true
	}
	if p.checksOfBy[by] >= maxPauseChecksPerPeer {
		return false
	}
	if p.checking == nil {
		p.checking, p.checksOfBy = map[pauseKey]struct{}{}, map[string]int{}
	}
	p.checking[k] = struct{}{}
	p.checksOfBy[by]++
	return true
}

// checked ends by's look-up for obj and reports whether its pause still
// stands (no resume came meanwhile).
func (p *pressureSet) checked(obj relocation.Object, by string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.uncheckLocked(pauseKey{obj, by})
}

// uncheckLocked takes k out of the look-ups under way and reports whether
// it was there. Under mu.
func (p *pressureSet) uncheckLocked(k pauseKey) bool {
	if _, on := p.checking[k]; !on {
		return false
	}
	delete(p.checking, k)
	if p.checksOfBy[k.by]--; p.checksOfBy[k.by] <= 0 {
		delete(p.checksOfBy, k.by)
	}
	return true
}

// pauses returns every pause of another host than self that is on.
func (p *pressureSet) pauses(self string) []pauseKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pauseKey
	for obj, cur := range p.m {
		for by := range cur.by {
			if by != self {
				out = append(out, pauseKey{obj, by})
			}
		}
	}
	return out
}

// maxPausesPerPeer bounds the objects one host may have paused here at
// once: an object's owner pushes back on a sender only for the objects
// the sender floods, a few at a time.
const maxPausesPerPeer = 4096

type paused struct {
	by      map[string]struct{} // the hosts whose pause is on
	resumed chan struct{}       // closed when the last of them resumes
}

// pause records that by asked this host's senders to obj to wait, and
// reports false (recording nothing) if by is a peer (bounded) that has
// maxPausesPerPeer objects paused here already. This host's own pauses
// (an owner here pushing back on its local senders) are not bounded:
// there is one per object it owns at most.
func (p *pressureSet) pause(obj relocation.Object, by string, bounded bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.m[obj]
	if cur != nil {
		if _, on := cur.by[by]; on {
			return true
		}
	}
	if bounded && p.byMap[by] >= maxPausesPerPeer {
		return false
	}
	if p.byMap == nil {
		p.byMap = map[string]int{}
	}
	p.byMap[by]++
	if cur != nil {
		cur.by[by] = struct{}{}
		return true
	}
	if p.m == nil {
		p.m = map[relocation.Object]*paused{}
	}
	p.m[obj] = &paused{by: map[string]struct{}{by: {}}, resumed: make(chan struct{})}
	p.n.Store(int32(len(p.m)))
	return true
}

// unpauseLocked notes that by's pause of one object ended. Under mu.
func (p *pressureSet) unpauseLocked(by string) {
	if p.byMap[by]--; p.byMap[by] <= 0 {
		delete(p.byMap, by)
	}
}

// resume ends by's pause of obj; the senders go on when no other host's
// pause of obj is on.
func (p *pressureSet) resume(obj relocation.Object, by string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.uncheckLocked(pauseKey{obj, by})
	if cur := p.m[obj]; cur != nil {
		if _, on := cur.by[by]; !on {
			return
		}
		delete(cur.by, by)
		p.unpauseLocked(by)
		if len(cur.by) == 0 {
			close(cur.resumed)
			delete(p.m, obj)
			p.n.Store(int32(len(p.m)))
		}
	}
}

// resumeBy ends every pause host asked for (it failed or left), or every
// pause if host is "".
func (p *pressureSet) resumeBy(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for obj, cur := range p.m {
		delete(cur.by, host)
		if host == "" || len(cur.by) == 0 {
			close(cur.resumed)
			delete(p.m, obj)
		}
	}
	if host == "" {
		clear(p.byMap)
		clear(p.checking)
		clear(p.checksOfBy)
	} else {
		delete(p.byMap, host)
		for k := range p.checking {
			if k.by == host {
				p.uncheckLocked(k)
			}
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

// pushAdvice is a pause or a resume an owner decided for a sender, not
// yet sent.
type pushAdvice struct {
	sender string
	pause  bool
}
