package actor

import (
	"time"

	"github.com/berthrt/berth/mailbox"
)

// Events returns the events of the host's event log recorded after seq
// (0: all it keeps), oldest first: members that joined, drained, left or
// failed as this host saw them; its own jeopardy, resumption, new run or
// end; objects it took over or received; its drains (EventKind lists
// them). A host keeps its newest 1024 events; a burst over many objects
// is one event a second with a count. A follower passes the Seq of the
// last event it has; a gap between that and the first Seq returned means
// events it missed were dropped from the ring.
func (h *Host) Events(after uint64) []Event { return h.events.since(after) }

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
