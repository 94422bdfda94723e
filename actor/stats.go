package actor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
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

// Stats returns a snapshot of the host's gauges and counters.
func (h *Host) Stats() Stats {
	return Stats{
		OwnersActive:           int(h.stats.owners.Load()),
		QueuedApplication:      h.jobs.counters.Queued(mailbox.Application),
		QueuedLifecycle:        h.jobs.counters.Queued(mailbox.Lifecycle),
		PermitsInUse:           h.jobs.permits.InUse(),
		PermitWaiters:          h.jobs.permits.Waiters(),
		PermitsMax:             h.jobs.permits.Max(),
		RequestsInFlight:       int(h.stats.inflight.Load()),
		HeldOutOfOrder:         int(h.owners.heldOut.Load()),
		GapsClosed:             h.owners.gapsClosed.Load(),
		Late:                   h.owners.late.Load(),
		OldestGap:              time.Duration(h.gaps.oldestGap.Load()),
		OverBound:              h.gaps.overHeld.Load(),
		WaitingToRoute:         int(h.gaps.waiting.Load()),
		SkipsLost:              h.router.skipsLost.Load(),
		PressureWaits:          h.admit.pressureWaits.Load(),
		PeerWaits:              h.peers.waits.Load(),
		PeerRefused:            h.in.peerRefused.Load(),
		LinkRefused:            h.peers.linkRefused.Load(),
		Dropped:                h.router.droppedMsgs.Load(),
		DroppedOnClose:         h.stats.closeDropped.Load(),
		Bounced:                h.router.bouncedMsgs.Load(),
		Relocations:            h.moves.moved.Load(),
		MovesUnderWay:          int(h.moves.underWay.Load()),
		Captured:               h.moves.captured.Load(),
		Relayed:                h.moves.relayed.Load(),
		Forwarded:              h.router.forwarded.Load(),
		StateWrites:            h.owners.persist.writes.Load(),
		StateFlushes:           h.owners.persist.flushes.Load(),
		StateFenced:            h.owners.persist.fencedN.Load(),
		StateWriteErrors:       h.owners.persist.failures.Load(),
		OutputsHeld:            int(h.owners.persist.held.Load()),
		OutputsDropped:         h.owners.persist.droppedOutputs.Load(),
		Suspicions:             h.suspects.suspicions.Load(),
		SuspectsConfirmed:      h.suspects.confirmedDead.Load(),
		RequestsFailedWithPeer: h.requests.failedWithPeer.Load(),
		Jeopardy:               h.life.current() == stateRunning && !h.gate.live(),
		Jeopardies:             h.lease.jeopardies.Load(),
		JeopardyTime:           h.lease.jeopardyTime.total(time.Now()),
		Rejoins:                h.lease.rejoins.Load(),
		LostOnRejoin:           h.peers.lostOnRejoin.Load(),
		SentAgain:              h.peers.sentAgainN.Load(),
		Repeats:                h.owners.repeats.Load(),
		LeaseLapses:            h.lease.lapses.Load(),
		OwnershipChecks:        h.lease.checks.Load(),
		TakenOver:              h.owners.takenOver.Load(),
		DrainStateDropped:      h.drainer.stateDropped.Load(),
		Payload:                h.pool.Stats(),
	}
}

// addOwners counts n owners more (or fewer, n < 0).
func (s *hostStats) addOwners(n int64) { s.owners.Add(n) }

// ownersNow returns how many owners are live.
func (s *hostStats) ownersNow() int64 { return s.owners.Load() }
