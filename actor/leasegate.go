package actor

import (
	"sync"
	"sync/atomic"
)

// The lease gate (leaseGate): what every turn of an object reads of the
// lease, and the turns and checks waiting on it.
//
// Owns: the deadline, the lapse epoch, the owners waiting for an
// ownership check, the channel that wakes waiting turns.
// Lock: mu, a leaf.
// May call: nothing.
// Invariants: the deadline is the lease keeper's local deadline (0 on a
// private store: no lease to check); the epoch only grows; changed is
// closed and replaced whenever the deadline moves or a check ends.

// leaseGate is the lease as turns read it: its deadline and lapse epoch,
// the owners waiting for a check, and the broadcast that wakes turns
// waiting for either.
// checkGate is the lease gate, over the waiters of an ownership check (the
// owners: leaseGate; the gate knows nothing else of them).
type checkGate[W comparable] struct {
	deadline atomic.Int64  // on wallNano's scale (monotonic from the start); past it no turn starts (0: no lease check)
	epoch    atomic.Uint64 // lapses seen: an owner checked at an older one waits for a check
	// betweenRuns: the host is becoming a new run and the store has not
	// yet confirmed the new run's lease. No activation or move into the
	// host commits meanwhile (a row it wrote would name the old run,
	// which the new run's lease ends): router.activate and the move's
	// store lane read it after the epoch (leaseKeeper.newRun says why
	// that order).
	betweenRuns atomic.Bool

	mu      sync.Mutex
	changed chan struct{}  // closed and replaced when the deadline moves or a check ends; guarded by mu
	pending map[W]struct{} // owners waiting for an ownership check; guarded by mu
	kick    chan struct{}  // one slot: pending is not empty
}

// live reports whether a turn may start now by the lease's deadline.
func (g *checkGate[W]) live() bool {
	_, live := g.liveUntil()
	return live
}

// liveUntil returns the lease's deadline (0: none to check) and whether a
// turn may start now by it.
func (g *checkGate[W]) liveUntil() (deadline int64, live bool) {
	dl := g.deadline.Load()
	return dl, dl == 0 || wallNano() < dl
}

// current reports whether an ownership checked at epoch is good now.
func (g *checkGate[W]) current(epoch uint64) bool { return epoch == g.epoch.Load() }

// look returns, under one lock, the channel the next change closes and
// whether the lease is live; a turn that finds the lease live but its
// ownership not current (checked false) is queued for a check.
func (g *checkGate[W]) look(o W, checked bool) (ch <-chan struct{}, live bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	live = g.live()
	if live && !checked {
		g.requestLocked(o)
	}
	return g.changed, live
}

// request queues o for an ownership check.
func (g *checkGate[W]) request(o W) {
	g.mu.Lock()
	g.requestLocked(o)
	g.mu.Unlock()
}

func (g *checkGate[W]) requestLocked(o W) {
	if g.pending == nil {
		g.pending = map[W]struct{}{}
	}
	g.pending[o] = struct{}{}
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// takePending takes the owners waiting for a check.
func (g *checkGate[W]) takePending() []W {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]W, 0, len(g.pending))
	for o := range g.pending {
		out = append(out, o)
	}
	clear(g.pending)
	return out
}

// publish sets the deadline (Unix ns) and wakes the waiting turns.
func (g *checkGate[W]) publish(deadline int64) {
	g.deadline.Store(deadline)
	g.broadcast()
}

// broadcast wakes the turns waiting for the lease or a check.
func (g *checkGate[W]) broadcast() {
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// epochNow returns the lapses seen so far.
func (g *checkGate[W]) epochNow() uint64 { return g.epoch.Load() }

// isBetweenRuns reports whether the host is becoming a new run and the
// store has not yet confirmed the new run's lease.
func (g *checkGate[W]) isBetweenRuns() bool { return g.betweenRuns.Load() }
