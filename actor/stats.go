package actor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
)

// hostStats holds the host's counters and gauges that no single part owns:
// they are bumped on the paths of many parts and read only by Host.Stats.
//
// Lock: none but jeopardyTime's own mutex, a leaf (spells: nothing is
// called under it); every other field is atomic and may be touched from
// any goroutine.
// May call: nothing.
// Invariants: counters only grow; the gauges (inflight, owners, running,
// heldOut) return to zero when the host is idle.
type hostStats struct {
	inflight       atomic.Int32 // requests waiting for their reply (Stats.RequestsInFlight)
	owners         atomic.Int64 // live owners, objects and subscribers (Stats.OwnersActive)
	running        atomic.Int64 // turns running now
	heldOut        atomic.Int64 // messages held out of order (Stats.HeldOutOfOrder)
	moved          atomic.Int64 // relocations completed here, either side (Stats.Relocations)
	captured       atomic.Int64 // messages in move records sent from here (Stats.Captured)
	relayed        atomic.Int64 // messages relayed from here (Stats.Relayed)
	forwarded      atomic.Int64 // messages forwarded from here (Stats.Forwarded)
	gapsClosed     atomic.Int64 // sequence numbers given up on after a host failure (Stats.GapsClosed)
	late           atomic.Int64 // messages run after a gap before them was given up on (Stats.Late)
	droppedMsgs    atomic.Int64 // stamped messages not delivered; a skip notice followed (Stats.Dropped)
	bouncedMsgs    atomic.Int64 // messages sent back to their origin to be routed again (Stats.Bounced)
	closeDropped   atomic.Int64 // accepted messages Close ended unrun (Stats.DroppedOnClose)
	droppedOutputs atomic.Int64 // outputs of persistent owners ended as failures (Stats.OutputsDropped)
	suspicions     atomic.Int64 // checks of a suspected peer's lease started (Stats.Suspicions)
	confirmedDead  atomic.Int64 // suspected peers the Location Store showed dead (Stats.SuspectsConfirmed)
	failedWithPeer atomic.Int64 // requests ended because the host their message was handed to failed (Stats.RequestsFailedWithPeer)
	jeopardies     atomic.Int64 // times the lease ran out before a renewal was answered (Stats.Jeopardies)
	rejoins        atomic.Int64 // times a gateway joined again as a new run (Stats.Rejoins)
	lostOnRejoin   atomic.Int64 // items the old run's links had not delivered at a rejoin, not sent again (Stats.LostOnRejoin)
	sentAgain      atomic.Int64 // messages a new run sent again from the old run's links (Stats.SentAgain)
	repeats        atomic.Int64 // messages sent again that ran here already, dropped (Stats.Repeats)
	lapses         atomic.Int64 // renewals that found the lease lapsed in the store (Stats.LeaseLapses)
	checks         atomic.Int64 // ownership checks of all objects after a lapse or a lost answer (Stats.OwnershipChecks)
	takenOver      atomic.Int64 // objects found taken over by another host after a lapse (Stats.TakenOver)
	stateDropped   atomic.Int64 // objects whose in-memory state a drain ended: no host took them (Stats.DrainStateDropped)
	jeopardyTime   spells       // time spent in jeopardy (Stats.JeopardyTime)
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
		HeldOutOfOrder:         int(h.stats.heldOut.Load()),
		GapsClosed:             h.stats.gapsClosed.Load(),
		Late:                   h.stats.late.Load(),
		OldestGap:              time.Duration(h.gaps.oldestGap.Load()),
		OverBound:              h.gaps.overHeld.Load(),
		WaitingToRoute:         int(h.gaps.waiting.Load()),
		SkipsLost:              h.gaps.skipsLost.Load(),
		PressureWaits:          h.pressure.waits.Load(),
		PeerWaits:              h.peers.waits.Load(),
		PeerRefused:            h.gaps.peerRefused.Load(),
		LinkRefused:            h.peers.linkRefused.Load(),
		Dropped:                h.stats.droppedMsgs.Load(),
		DroppedOnClose:         h.stats.closeDropped.Load(),
		Bounced:                h.stats.bouncedMsgs.Load(),
		Relocations:            h.stats.moved.Load(),
		MovesUnderWay:          int(h.moves.underWay.Load()),
		Captured:               h.stats.captured.Load(),
		Relayed:                h.stats.relayed.Load(),
		Forwarded:              h.stats.forwarded.Load(),
		StateWrites:            h.owners.persist.writes.Load(),
		StateFlushes:           h.owners.persist.flushes.Load(),
		StateFenced:            h.owners.persist.fencedN.Load(),
		StateWriteErrors:       h.owners.persist.failures.Load(),
		OutputsHeld:            int(h.owners.persist.held.Load()),
		OutputsDropped:         h.stats.droppedOutputs.Load(),
		Suspicions:             h.stats.suspicions.Load(),
		SuspectsConfirmed:      h.stats.confirmedDead.Load(),
		RequestsFailedWithPeer: h.stats.failedWithPeer.Load(),
		Jeopardy:               h.life.current() == stateRunning && !h.gate.live(),
		Jeopardies:             h.stats.jeopardies.Load(),
		JeopardyTime:           h.stats.jeopardyTime.total(time.Now()),
		Rejoins:                h.stats.rejoins.Load(),
		LostOnRejoin:           h.stats.lostOnRejoin.Load(),
		SentAgain:              h.stats.sentAgain.Load(),
		Repeats:                h.stats.repeats.Load(),
		LeaseLapses:            h.stats.lapses.Load(),
		OwnershipChecks:        h.stats.checks.Load(),
		TakenOver:              h.stats.takenOver.Load(),
		DrainStateDropped:      h.stats.stateDropped.Load(),
		Payload:                h.pool.Stats(),
	}
}
