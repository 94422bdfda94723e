package actor

import (
	"slices"
	"sync"
)

// serial runs work one item at a time, in the order it was added: a
// peer's slow lane, a look-up lane, a move's inputs, a move's store
// calls. Work added with add runs on a goroutine of the serial's own,
// started when work comes and ended when none is left; tryHere runs work
// on the caller's goroutine when the serial is idle (no hand-off) and
// queues it otherwise, never waiting; runHere runs work on the caller's
// goroutine, in its place in the order, waiting for it — so that a move's
// step that must run inside an owner's turn (the seal and capture) runs
// there, and no other work of the serial runs meanwhile. Work may hand
// the rest of itself on with next: it runs right after the work that
// called next, before anything queued, on the serial's own goroutine —
// so that a step that tryHere began on a caller's goroutine (a
// transport's delivery goroutine) runs the user's code off it, and
// nothing else of the serial runs between the two halves.
//
// Owns: its queue and its goroutine. Lock: mu, a leaf, held only to queue
// and take work, never while work runs.
// May call: the work it is given.
// Invariants: no two items of one serial run at once; items run in the
// order they were added (runHere takes its place like add), except that
// work given to next runs at once after the work that gave it; wg counts
// the serial's goroutine, so a Close that waits for wg knows no work
// runs. runHere must not be called from work of the same serial (it
// would wait for itself); next must be called only from it.
type serial struct {
	mu      sync.Mutex
	work    []serialItem // guarded by mu
	running bool         // guarded by mu: an item runs, or the goroutine is about to take one
	wg      *sync.WaitGroup
}

// serialItem is work to run, or (turn set) a caller of runHere waiting
// for its place: the serial's goroutine closes turn, then waits for done.
type serialItem struct {
	f    func()
	turn chan struct{}
	done chan struct{}
}

// add queues f; it never waits.
func (s *serial) add(f func()) {
	s.mu.Lock()
	s.work = append(s.work, serialItem{f: f})
	start := !s.running
	s.running = true
	if start {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if start {
		go s.run()
	}
}

// runHere runs f on the calling goroutine once the work added before it
// has run, with no other work of the serial running meanwhile; it returns
// when f has returned.
func (s *serial) runHere(f func()) {
	s.mu.Lock()
	if !s.running {
		s.running = true
		s.mu.Unlock()
		s.inline(f)
		return
	}
	it := serialItem{turn: make(chan struct{}), done: make(chan struct{})}
	s.work = append(s.work, it)
	s.mu.Unlock()
	<-it.turn
	defer close(it.done)
	f()
}

// tryHere runs f on the calling goroutine if the serial is idle — no
// hand-off to another goroutine — and queues it (add) otherwise; it never
// waits for other work.
func (s *serial) tryHere(f func()) {
	s.mu.Lock()
	if s.running {
		s.work = append(s.work, serialItem{f: f})
		s.mu.Unlock()
		return
	}
	s.running = true
	s.mu.Unlock()
	s.inline(f)
}

// next queues f to run right after the work that calls it, ahead of
// everything queued, on the serial's own goroutine: never on the
// goroutine of a caller of tryHere or runHere, whose work hands f on to
// the serial's goroutine when it returns (inline, or run's loop after a
// runHere). It must be called from work of this serial, which keeps the
// serial claimed until f has run; it never waits.
func (s *serial) next(f func()) {
	s.mu.Lock()
	s.work = slices.Insert(s.work, 0, serialItem{f: f})
	s.mu.Unlock()
}

// inline runs f on the calling goroutine, the serial claimed (running set
// by the caller); work that came meanwhile goes to a goroutine.
func (s *serial) inline(f func()) {
	f()
	s.mu.Lock()
	if len(s.work) == 0 {
		s.running = false
		s.mu.Unlock()
		return
	}
	s.wg.Add(1) // work came meanwhile: a goroutine takes it
	s.mu.Unlock()
	go s.run()
}

func (s *serial) run() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if len(s.work) == 0 {
			s.running = false
			s.work = nil
			s.mu.Unlock()
			return
		}
		it := s.work[0]
		s.work[0] = serialItem{}
		s.work = s.work[1:]
		s.mu.Unlock()
		if it.turn != nil {
			close(it.turn) // the caller runs its work in its place
			<-it.done
			continue
		}
		it.f()
	}
}

// pending returns how much work waits or runs.
func (s *serial) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.work)
	if s.running {
		n++
	}
	return n
}
