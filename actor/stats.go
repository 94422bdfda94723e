package actor

import (
	"sync"
	"sync/atomic"
	"time"
)

// hostStats holds the host's own counters and gauges (the API's requests
// in flight, what Close dropped) and the number of live owners, which the
// owners count (addOwners) and the peers report (owners). Every other
// counter of Stats is its part's own field; Host.Stats reads them all.
//
// Lock: none; every field is atomic.
// May call: nothing.
// Invariants: counters only grow; the gauges (inflight, owners) return to
// zero when the host is idle.
type hostStats struct {
	inflight     atomic.Int32 // requests waiting for their reply (Stats.RequestsInFlight)
	owners       atomic.Int64 // live owners, objects and subscribers (Stats.OwnersActive)
	closeDropped atomic.Int64 // accepted messages Close ended unrun (Stats.DroppedOnClose)
}

// spells sums the time spent in spells of a state (jeopardy), the
// current one included, so that the sum only grows.
type spells struct {
	mu    sync.Mutex
	ended time.Duration // the spells that ended
	since time.Time     // the current spell's start; zero: none
}

// begin starts a spell at now.
func (s *spells) begin(now time.Time) {
	s.mu.Lock()
	s.since = now
	s.mu.Unlock()
}

// end ends the current spell at now.
func (s *spells) end(now time.Time) {
	s.mu.Lock()
	if !s.since.IsZero() {
		s.ended += now.Sub(s.since)
		s.since = time.Time{}
	}
	s.mu.Unlock()
}

// total is the time of every spell up to now.
func (s *spells) total(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.ended
	if !s.since.IsZero() {
		t += now.Sub(s.since)
	}
	return t
}

// addOwners counts n owners more (or fewer, n < 0).
func (s *hostStats) addOwners(n int64) { s.owners.Add(n) }

// ownersNow returns how many owners are live.
func (s *hostStats) ownersNow() int64 { return s.owners.Load() }
