package actor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Host states.
const (
	stateCreated int32 = iota
	stateRunning
	stateStopping
	stateClosed
)

// lifecycle is where the host is between NewHost and Close.
//
// Owns: the state, the host's context, Done's channels, why it closed.
// Lock: mu guards registration and the state transitions (it is taken by
// Register, Start, Stop and Close only, never on a message's path); state
// is atomic and read on every send.
// Invariants: the state only moves forward (created → running → stopping
// → closed); done closes when Close starts, closed when it returns; ctx
// ends when the host closes.
type lifecycle struct {
	storeWait time.Duration // Config.StoreTimeout
	close     func() error  // the host's Close, for the parts that end it (a lost lease, a drain)
	mu        sync.Mutex
	state     atomic.Int32
	draining  atomic.Bool           // a Drain or graceful Stop began: no new activation, no move in (drainer)
	done      chan struct{}         // closed by Close when it starts
	closed    chan struct{}         // closed by Close when it returns
	lostErr   atomic.Pointer[error] // why the host closed itself (ErrLeaseLost); nil if it did not
	ctx       context.Context       // ends when the host closes
	end       context.CancelFunc
}

// whileRunning runs fn under mu if the host is running, and reports
// whether it did: a transition (Stop, Close) waits for fn, and none
// happens while it runs.
func (l *lifecycle) whileRunning(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.Load() != stateRunning {
		return false
	}
	fn()
	return true
}

// unlessClosed runs fn under mu unless the host has closed, and reports
// whether it did: Close waits for fn.
func (l *lifecycle) unlessClosed(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.Load() == stateClosed {
		return false
	}
	fn()
	return true
}

// acceptsExternal reports whether sends from outside a handler are taken.
func (l *lifecycle) acceptsExternal() bool { return l.state.Load() == stateRunning }

// acceptsInternal reports whether sends from handlers are taken: also while
// stopping gracefully, so that chains of messages finish.
func (l *lifecycle) acceptsInternal() bool {
	s := l.state.Load()
	return s == stateRunning || s == stateStopping
}

// storeContext is the context of one Location Store call: it ends after
// Config.StoreTimeout. (It does not end when the host closes: a move's
// last store call, or the membership's leave, still runs then.)
func (l *lifecycle) storeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), l.storeWait)
}

// closing is closed when Close starts.
func (l *lifecycle) closing() <-chan struct{} { return l.done }

// context returns the host's context: it ends when the host closes.
func (l *lifecycle) context() context.Context { return l.ctx }

// isDraining reports whether a Drain or a graceful Stop began.
func (l *lifecycle) isDraining() bool { return l.draining.Load() }

// beginDraining notes that a Drain or a graceful Stop began: no new
// activation here, no move in.
func (l *lifecycle) beginDraining() { l.draining.Store(true) }

// beginStopping moves a running host to stopping, and reports whether it
// did.
func (l *lifecycle) beginStopping() bool { return l.state.CompareAndSwap(stateRunning, stateStopping) }

// current returns the host's state.
func (l *lifecycle) current() int32 { return l.state.Load() }

// closeHost closes the host (Host.Close): for the parts that end it, a
// lost lease or a drain that finished.
func (l *lifecycle) closeHost() error { return l.close() }

// setLost notes why the host closed itself (ErrLeaseLost), and reports
// whether it was the first reason noted.
func (l *lifecycle) setLost(err error) bool { return l.lostErr.CompareAndSwap(nil, &err) }

// lost reports whether the host closed itself.
func (l *lifecycle) lost() bool { return l.lostErr.Load() != nil }

// storeTimeout is Config.StoreTimeout: the bound of one store call.
func (l *lifecycle) storeTimeout() time.Duration { return l.storeWait }
