package actor

import (
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

// Outcome is how a turn ended.
type Outcome uint8

// The outcomes.
const (
	OutcomeOK    Outcome = iota // the handler returned without error
	OutcomeError                // the handler (or decode, or activation) returned an error
	OutcomePanic                // the handler panicked; recovered
)

// String returns "ok", "error" or "panic".
func (o Outcome) String() string {
	switch o {
	case OutcomeError:
		return "error"
	case OutcomePanic:
		return "panic"
	}
	return "ok"
}

// Reject reasons reported to Observer.Rejected.
const (
	RejectFull         = "lane_full"      // no room in the owner's lane (or on the link to its host) within SendTimeout
	RejectTooLarge     = "too_large"      // larger than the owner's lane
	RejectPushedBack   = "pushed_back"    // the object's reorder buffer pushed back on this host for SendTimeout (ErrPushedBack)
	RejectShuttingDown = "shutting_down"  // the host stopped first
	RejectCancelled    = "cancelled"      // the sender's context ended while waiting
	RejectExpired      = "expired"        // the request's deadline passed before its turn
	RejectNotFound     = "not_found"      // no such kind, channel, handler or subscriber
	RejectActivation   = "activation"     // the object's factory failed
	RejectUnknownType  = "unknown_type"   // no handler for the message type
	RejectProtocol     = "protocol_error" // the payload did not decode
	// RejectUndeliverable: no route led to the object's owner (a loop, too
	// many hops, an unreachable host); a request got Unavailable.
	RejectUndeliverable = "undeliverable"
	// RejectPeerBacklog: this host kept Config.PeerInbound of the sending
	// peer's messages already; a request got ErrPeerBacklog.
	RejectPeerBacklog = "peer_backlog"
	// RejectPaused: the host was in jeopardy and had no job permit free
	// for SendTimeout (ErrPaused).
	RejectPaused = "paused"
	// RejectIncomingMoves: a move to this host was refused at its Prepare:
	// its source had maxIncomingPerPeer moves under way here, or its
	// record would pass Config.MaxIncomingMoveBytes (the source's share or
	// the host's). The source's Relocate got the reason.
	RejectIncomingMoves = "incoming_moves"
)

// Observer receives a host's events: the narrow hook through which metrics
// see the core (package metrics implements it for Prometheus). Methods are
// called on the message path, concurrently, and must be fast; with strings
// and durations only, they cost no allocation. Some run under the host's
// locks (Activated while the new owner is installed in its shard): they
// must not block, and must not call back into the host. Kind is the object
// kind or the channel name.
type Observer interface {
	// Attach is called once, when the host starts, with the source of the
	// host's gauges.
	Attach(host StatsSource)
	// Admitted: a message entered an owner's lane.
	Admitted(kind string, lane mailbox.Lane, payloadBytes int)
	// Rejected: a message was not admitted or did not run (see the Reject
	// reasons); its payload was released undecoded.
	Rejected(kind string, reason string)
	// Handled: a turn ended, after waiting queueWait in the lane and
	// running for run.
	Handled(kind string, queueWait, run time.Duration, outcome Outcome)
	// Activated and Deactivated: an object's owner came or went.
	Activated(kind string)
	Deactivated(kind string)
}

// The leases a host renews, as LeaseObserver names them.
const (
	LeaseStore      = "store"      // the host lease in the Location Store: its objects' turns wait on it
	LeaseMembership = "membership" // this run's lease in the membership: its peers judge it by that
)

// LeaseObserver is an Observer that is told of each lease renewal too
// (package metrics implements it). LeaseRenewed is called as a renewal's
// call returns, on the renewal's own goroutine: lease is LeaseStore or
// LeaseMembership, took how long the call took, err its error (nil: the
// store answered; a lapse it reported is not an error here). A host whose
// Config.Observer implements it calls it; it must be fast.
type LeaseObserver interface {
	LeaseRenewed(lease string, took time.Duration, err error)
}

// StatsSource is what an Observer reads the host's gauges from.
type StatsSource interface {
	// Name returns the host name.
	Name() string
	// Stats returns a snapshot of the host's gauges and counters.
	Stats() Stats
}

// Stats is a snapshot of a host's gauges and counters.
type Stats struct {
	OwnersActive           int           // objects and channel subscribers with an owner here
	QueuedApplication      int64         // application items queued (held included)
	QueuedLifecycle        int64         // lifecycle items queued
	PermitsInUse           int           // host-wide job permits in use
	PermitWaiters          int           // senders waiting for a permit
	PermitsMax             int           // MaxQueuedApplicationJobs
	RequestsInFlight       int           // requests waiting for replies
	HeldOutOfOrder         int           // messages held because an older one of their sender has not arrived
	GapsClosed             int64         // sequence numbers given up on after a host failure (lost with that host)
	Late                   int64         // messages run after a gap before them was given up on
	OldestGap              time.Duration // how long the longest-waiting gap of any object here has waited (0: none)
	OverBound              int64         // arrivals that found their sender past an object's reorder bound (it was told to pause)
	PressureWaits          int64         // sends from outside the handlers that waited for an object's reorder buffer
	PeerWaits              int64         // sends from outside the handlers that waited for credit at the object's host (Config.PeerInbound)
	PeerRefused            int64         // messages from peers refused because this host kept Config.PeerInbound of theirs already
	LinkRefused            int64         // items not sent because the link to their host was past its bound (the host did not take what was sent): a send got ErrPeerBacklog, a reply or advice was dropped
	DroppedOnClose         int64         // accepted messages Close ended unrun (ShuttingDown): queued, held, waiting in a sender, or held by a gateway's new run to send again to a peer it never reached
	Dropped                int64         // stamped messages this host could not deliver (their senders got an error; a skip notice followed)
	Bounced                int64         // messages sent back to their origin to be routed again
	WaitingToRoute         int           // messages waiting here to be routed again: their look-up waits for the Location Store to answer, or a skip notice for a way to its object
	SkipsLost              int64         // skip notices that could not reach their object (their gaps wait for a failure fact)
	Relocations            int64         // moves completed with this host as source or target
	MovesUnderWay          int           // moves this host takes part in now, as source or target
	Captured               int64         // queued messages moved in move records (this host the source)
	Relayed                int64         // messages relayed after relay-ready (this host the source)
	Forwarded              int64         // messages handed on by Message Follow or a route (hops taken here)
	StateWrites            int64         // persistent objects' state writes that landed (Kind.PersistState)
	StateFlushes           int64         // state store calls made: each flush writes every state queued
	StateFenced            int64         // state writes fenced: a newer owner had the object; the activation ended
	StateWriteErrors       int64         // state store calls that failed (their writes are retried; outputs wait)
	OutputsHeld            int           // outputs of persistent objects waiting for their turn's write now
	OutputsDropped         int64         // outputs and queued messages of persistent objects ended as failures (fenced, capture failed)
	Suspicions             int64         // links to a peer that broke and made this host check the peer's lease in the Location Store
	SuspectsConfirmed      int64         // of those, peers the store showed past their lease whose end the check found in the membership before its watch told of it (dropped from the view at once)
	RequestsFailedWithPeer int64         // requests ended with ErrPeerFailed once the host their message was handed to was declared failed, before their deadline (they may have run)
	Jeopardy               bool          // the host is in jeopardy now: its lease ran out before a renewal was answered, and its objects run no turn
	Jeopardies             int64         // times the host went into jeopardy
	JeopardyTime           time.Duration // time the host spent in jeopardy, the current spell included
	LeaseLapses            int64         // renewals that found the host's lease lapsed in the Location Store
	OwnershipChecks        int64         // times the host checked its objects' ownership before they ran again: after a lapse, or a renewal whose answer was lost (it may have found one)
	TakenOver              int64         // objects whose ownership check found them no longer this run's — another host took them over while this host's lease had lapsed, or an activation landed under the run the host had just replaced — dropped here
	DrainStateDropped      int64         // objects whose state moves (PreserveState, not persisted) that a drain or Stop deactivated because every host it tried refused or failed the move: their in-memory state ended (each logged at Warn)
	Rejoins                int64         // times this host joined again as a new run after the membership ended its run (it was paused or starved past its lease), dropping the old run's objects
	LostOnRejoin           int64         // items the old runs' links had not delivered when this host joined again that were not sent again — replies, move records, and messages to peers gone or no longer members meanwhile: lost with the old run (each rejoin logged at Warn)
	SentAgain              int64         // messages the old runs' links had not seen taken when this host joined again, sent again by the new run, first and in order, marked so that their owners drop those they had (Repeats)
	Repeats                int64         // messages whose stamp this host had run (or held) already — sent again by a new run of their sender, or replayed by a member: dropped, not run twice
	Payload                payload.Stats // copy accounting of the host's payload pool
}

type noObserver struct{}

func (noObserver) Attach(StatsSource)                                    {}
func (noObserver) Admitted(string, mailbox.Lane, int)                    {}
func (noObserver) Rejected(string, string)                               {}
func (noObserver) Handled(string, time.Duration, time.Duration, Outcome) {}
func (noObserver) Activated(string)                                      {}
func (noObserver) Deactivated(string)                                    {}
