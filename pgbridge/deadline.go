package pgbridge

import (
	"context"
	"sync"
	"time"
)

// handlerCtx is a claimer's handler context, reused claim after claim:
// the broker's context with the subscription's handler deadline —
// context.WithTimeout per claim costs a context, a timer and a closure
// (four allocations for a one-row claim). Between arm and disarm it is
// the context of one claim's run; a handler must not keep it past its
// return (as it must not keep its Delivery).
//
// It implements AfterFunc, which package context uses to tie a context
// derived from it (pgx watches each statement's context that way) without
// a goroutine of its own.
type handlerCtx struct {
	parent   context.Context
	mu       sync.Mutex
	done     chan struct{} // closed when the deadline passes or parent ends
	err      error
	deadline time.Time
	active   bool
	timer    *time.Timer
	afters   []afterFunc // run when done closes
	seq      uint64
}

type afterFunc struct {
	id uint64
	f  func()
}

// init ties h to parent (once per claimer).
func (h *handlerCtx) init(parent context.Context) {
	h.parent = parent
	h.done = make(chan struct{})
	h.timer = time.AfterFunc(time.Hour, h.fire)
	h.timer.Stop()
	context.AfterFunc(parent, func() { h.end(parent.Err(), false) })
}

// end closes the run with err (deadline: only if the run's deadline
// passed) and runs the functions registered with AfterFunc.
func (h *handlerCtx) end(err error, deadline bool) {
	h.mu.Lock()
	if h.err != nil || deadline && (!h.active || time.Now().Before(h.deadline)) {
		h.mu.Unlock()
		return
	}
	h.err = err
	close(h.done)
	fs := h.afters
	h.afters = nil
	h.mu.Unlock()
	for _, a := range fs {
		go a.f()
	}
}

// AfterFunc arranges for f to run in its own goroutine once the run ends
// (package context's afterFuncer); stop cancels that.
func (h *handlerCtx) AfterFunc(f func()) (stop func() bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		go f()
		return func() bool { return false }
	}
	h.seq++
	id := h.seq
	h.afters = append(h.afters, afterFunc{id: id, f: f})
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for i, a := range h.afters {
			if a.id == id {
				h.afters = append(h.afters[:i], h.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// arm starts a claim's run with deadline d from now.
func (h *handlerCtx) arm(d time.Duration) {
	h.mu.Lock()
	if h.err != nil && h.parent.Err() == nil {
		// The last claim overran its deadline: a fresh channel.
		h.done, h.err = make(chan struct{}), nil
	}
	h.deadline, h.active = time.Now().Add(d), true
	h.mu.Unlock()
	h.timer.Reset(d)
}

// disarm ends the claim's run.
func (h *handlerCtx) disarm() {
	h.timer.Stop()
	h.mu.Lock()
	h.active = false
	clear(h.afters) // what the run registered and did not stop: it is over
	h.afters = h.afters[:0]
	h.mu.Unlock()
}

// fire ends the run whose deadline passed (a timer of an earlier run that
// fires late finds the run over, or a deadline not yet passed).
func (h *handlerCtx) fire() { h.end(context.DeadlineExceeded, true) }

// Deadline returns the run's deadline.
func (h *handlerCtx) Deadline() (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline, true
}

// Done is closed when the run's deadline passes or the broker closes.
func (h *handlerCtx) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// Err is DeadlineExceeded past the deadline, the broker's context's error
// after Close, nil before.
func (h *handlerCtx) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Value is the broker's context's value.
func (h *handlerCtx) Value(key any) any { return h.parent.Value(key) }
