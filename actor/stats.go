package actor

import (
	"sync/atomic"
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

// addOwners counts n owners more (or fewer, n < 0).
func (s *hostStats) addOwners(n int64) { s.owners.Add(n) }

// ownersNow returns how many owners are live.
func (s *hostStats) ownersNow() int64 { return s.owners.Load() }
