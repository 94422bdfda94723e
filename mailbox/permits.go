package mailbox

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/payload"
)

// Grantee is an asynchronous permit waiter: a source of sends that cannot
// block for a permit (a handler holding its owner's gate, or the remaining
// children of a fan-out). Each source has at most one waiter in the queue at
// a time, which is what keeps its sends in order and makes the queue fair
// between sources (oldest live source first).
type Grantee interface {
	// Granted hands the waiter one permit. It runs on the goroutine that
	// freed the permit, outside any Permits lock, and must not block: it
	// consumes the permit (admits a message that now holds it) or returns
	// it with Release.
	Granted()
	// Abandoned tells the waiter that the permits were closed before it was
	// granted one; it must clean up what it holds. It must not block.
	Abandoned()
}

// Permits is the host-wide application job queue (docs/architecture.md, "Job queue, lanes and back-pressure"): a counter of
// at most Max permits, where permits in use are queued application jobs.
// Waiting for a permit is a wait, never a rejection: Acquire blocks
// (cancellably) and Enqueue waits asynchronously. Waiters are served in
// FIFO order; TryAcquire never overtakes a waiter.
//
// Permits also expose the pressure state for network links: Paused turns
// true when ⌈Max·80/100⌉ permits are in use and false again at
// ⌊Max·60/100⌋.
//
// Permits are safe for concurrent use. The zero value is not usable; call
// NewPermits.
type Permits struct {
	// state packs the count in use (bits 0–31), the number of queued
	// waiters (bits 32–62) and the closed flag (bit 63), so that taking and
	// returning a permit while nobody waits is one compare-and-swap.
	state atomic.Uint64

	mu   sync.Mutex // guards the waiter queue; held when waiters join or leave
	max  int
	head *waiter // FIFO of waiters; guarded by mu
	tail *waiter

	pauseAt, resumeAt int
	paused            atomic.Bool
	onPressure        func(paused bool)
}

const (
	inUseMask  = 1<<32 - 1
	waiterOne  = 1 << 32
	waiterMask = (1<<31 - 1) << 32
	closedBit  = 1 << 63
)

// waiter is a queued request for one permit: either a blocked goroutine
// (ch) or an asynchronous Grantee.
type waiter struct {
	next, prev *waiter
	ch         chan bool // blocking waiter: true for a grant, false for Close
	g          Grantee   // asynchronous waiter
	queued     bool
}

var waiters = sync.Pool{New: func() any { return &waiter{ch: make(chan bool, 1)} }}

// NewPermits returns Permits with max permits. onPressure, if not nil, is
// called after each change of the pressure state, with the new state, on the
// goroutine that caused it. NewPermits panics if max < 1.
func NewPermits(max int, onPressure func(paused bool)) *Permits {
	if max < 1 {
		panic("mailbox: NewPermits with max < 1")
	}
	return &Permits{
		max:        max,
		pauseAt:    (max*80 + 99) / 100,
		resumeAt:   max * 60 / 100,
		onPressure: onPressure,
	}
}

// Max returns the number of permits.
func (p *Permits) Max() int { return p.max }

// InUse returns the number of permits held: the queued application jobs.
func (p *Permits) InUse() int { return int(p.state.Load() & inUseMask) }

// Waiters returns the number of queued waiters (they are not counted in InUse).
func (p *Permits) Waiters() int { return int(p.state.Load() & waiterMask >> 32) }

// Paused reports whether links should stop receiving (see Permits).
func (p *Permits) Paused() bool { return p.paused.Load() }

// Thresholds returns the in-use counts at which links pause and resume.
func (p *Permits) Thresholds() (pauseAt, resumeAt int) { return p.pauseAt, p.resumeAt }

// ErrPermitsClosed is returned by Acquire after Close. Its kind is ShuttingDown.
var ErrPermitsClosed = payload.NewError(payload.ShuttingDown, "mailbox.Permits", "permits are closed")

// tryTake takes a permit if one is free, nobody waits and the permits are
// open: the lock-free fast path.
func (p *Permits) tryTake() bool {
	for {
		s := p.state.Load()
		if s&(closedBit|waiterMask) != 0 || int(s&inUseMask) >= p.max {
			return false
		}
		if p.state.CompareAndSwap(s, s+1) {
			p.notify()
			return true
		}
	}
}

// takeOrJoinLocked takes a free permit, or counts the caller as a waiter
// (the caller then queues itself before unlocking). It returns taken, or
// closed if the permits are closed.
func (p *Permits) takeOrJoinLocked() (taken, closed bool) {
	for {
		s := p.state.Load()
		switch {
		case s&closedBit != 0:
			return false, true
		case s&waiterMask == 0 && int(s&inUseMask) < p.max:
			if p.state.CompareAndSwap(s, s+1) {
				return true, false
			}
		default:
			if p.state.CompareAndSwap(s, s+waiterOne) {
				return false, false
			}
		}
	}
}

// Acquire takes one permit, waiting in FIFO order while none is free. On
// cancellation it returns ctx.Err() and leaves the count unchanged (a permit
// granted at the same moment is handed on). After Close it returns
// ErrPermitsClosed.
func (p *Permits) Acquire(ctx context.Context) error {
	if p.tryTake() {
		return nil
	}
	p.mu.Lock()
	taken, closed := p.takeOrJoinLocked()
	if taken || closed {
		p.mu.Unlock()
		if closed {
			return ErrPermitsClosed
		}
		p.notify()
		return nil
	}
	w := waiters.Get().(*waiter)
	p.pushLocked(w)
	p.mu.Unlock()

	select {
	case granted := <-w.ch:
		waiters.Put(w)
		if !granted {
			return ErrPermitsClosed
		}
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		if w.queued {
			p.removeLocked(w)
			p.mu.Unlock()
			waiters.Put(w)
			return ctx.Err()
		}
		p.mu.Unlock()
		// Granted (or closed) while we were giving up: take the token and
		// hand a granted permit on, so the count is as if we never waited.
		granted := <-w.ch
		waiters.Put(w)
		if granted {
			p.Release()
		}
		return ctx.Err()
	}
}

// TryAcquire takes a permit if one is free and nobody is waiting.
func (p *Permits) TryAcquire() bool { return p.tryTake() }

// Enqueue waits asynchronously for one permit for g. If a permit is free and
// nobody is waiting, g.Granted runs at once, on this goroutine; otherwise it
// runs when a permit is handed to g in FIFO order. After Close, g.Abandoned
// runs at once. A Grantee must not be enqueued twice at the same time.
func (p *Permits) Enqueue(g Grantee) {
	if p.tryTake() {
		g.Granted()
		return
	}
	p.mu.Lock()
	taken, closed := p.takeOrJoinLocked()
	if taken || closed {
		p.mu.Unlock()
		if closed {
			g.Abandoned()
			return
		}
		p.notify()
		g.Granted()
		return
	}
	p.pushLocked(&waiter{g: g})
	p.mu.Unlock()
}

// Release returns one permit. If someone is waiting, the permit passes
// directly to the oldest waiter.
func (p *Permits) Release() {
	for {
		s := p.state.Load()
		if s&inUseMask == 0 {
			panic("mailbox: Permits.Release without a permit in use")
		}
		if s&waiterMask != 0 && s&closedBit == 0 {
			if p.handOver() {
				return
			}
			continue // the waiters left meanwhile
		}
		if p.state.CompareAndSwap(s, s-1) {
			p.notify()
			return
		}
	}
}

// handOver gives the caller's permit to the oldest waiter; it reports false
// if there was none after all.
func (p *Permits) handOver() bool {
	p.mu.Lock()
	w := p.head
	if w == nil {
		p.mu.Unlock()
		return false
	}
	p.removeLocked(w) // the permit changes hands; the count in use is unchanged
	p.mu.Unlock()
	if w.g != nil {
		w.g.Granted()
	} else {
		w.ch <- true
	}
	return true
}

// Close wakes every waiter: blocked Acquire calls return ErrPermitsClosed
// and asynchronous waiters are Abandoned. Later Acquire, TryAcquire and
// Enqueue calls fail. Permits already held are still returned with Release.
func (p *Permits) Close() {
	p.mu.Lock()
	for {
		s := p.state.Load()
		if s&closedBit != 0 {
			p.mu.Unlock()
			return
		}
		if p.state.CompareAndSwap(s, s|closedBit) {
			break
		}
	}
	var async []Grantee
	for w := p.head; w != nil; {
		next := w.next
		p.removeLocked(w)
		if w.g != nil {
			async = append(async, w.g)
		} else {
			w.ch <- false
		}
		w = next
	}
	p.mu.Unlock()
	for _, g := range async {
		g.Abandoned()
	}
}

// pushLocked appends w to the queue; the caller has counted it in state.
func (p *Permits) pushLocked(w *waiter) {
	w.queued = true
	w.prev, w.next = p.tail, nil
	if p.tail != nil {
		p.tail.next = w
	} else {
		p.head = w
	}
	p.tail = w
}

// removeLocked takes w out of the queue and the waiter count.
func (p *Permits) removeLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		p.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		p.tail = w.prev
	}
	w.next, w.prev, w.queued = nil, nil, false
	p.state.Add(^uint64(waiterOne - 1)) // minus one waiter
}

// notify updates the pressure state from the current count. Every change of
// the count is followed by a notify that reads the count afterwards, so the
// last one leaves the state right.
func (p *Permits) notify() {
	n := p.InUse()
	switch {
	case !p.paused.Load() && n >= p.pauseAt:
		if p.paused.CompareAndSwap(false, true) && p.onPressure != nil {
			p.onPressure(true)
		}
	case p.paused.Load() && n <= p.resumeAt:
		if p.paused.CompareAndSwap(true, false) && p.onPressure != nil {
			p.onPressure(false)
		}
	}
}
