package relocation

import "time"

// Input is an event a state machine steps on: a protocol record that
// arrived, a result of an action or a store operation, a tick of the clock,
// or a report about the link. Machines do no I/O and read no clock; time
// comes in with Tick.
type Input interface{ input() }

// Inputs of both machines.
type (
	// Receive: a protocol record arrived from the peer.
	Receive struct{ Record Record }
	// Tick: the driver's clock, in nanoseconds on any fixed epoch.
	Tick struct {
		Now int64
		// SourceReachable (target): the link from the source is up and
		// delivering. The cutover wait counts only time without it: it is
		// for a cutover that was lost, not one that is slow to come.
		SourceReachable bool
	}
	// LinkUp: the link to the peer was re-established after a failure; the
	// machine resends what its phase needs.
	LinkUp struct{}
)

// Inputs of the source.
type (
	// Start begins the move with the preflight.
	Start struct{}
	// Captured answers SealAndCapture: the owner is sealed (no application
	// turn starts any more) and the move record was built in the same
	// turn, after the seal, never before.
	Captured struct{ Record MoveRecord }
	// CaptureFailed answers SealAndCapture when the move record could not
	// be built (the kind's Capture failed, or the record is too large): the
	// move aborts and the object runs on here, as after an operator's
	// abort.
	CaptureFailed struct{ Err error }
	// HeldTaken: the owner's mailbox closed and these frames were held
	// since the seal, in order. Later arrivals go to Message Follow.
	HeldTaken struct{ Frames [][]byte }
	// OperatorAbort: an operator asked to abort the move.
	OperatorAbort struct{ Reason string }
	// TargetDead: the target host can no longer commit (it was killed, or
	// its lease expired). Only this — not a broken link — makes the source
	// abort on its own, so the target and the source never both own the
	// object.
	TargetDead struct{}
)

// Inputs of the target.
type (
	// Restored: the factory and Restore ran on the move record's state
	// (Err nil), or failed.
	Restored struct{ Err error }
	// StoreResult: the result of the last store operation.
	StoreResult struct {
		Row Row
		Err error
	}
	// Superseded: a move of the same object to this host began from an
	// owner later than this move's (Owner, from that move's Prepare; see
	// Ownership.After): the row has moved on past the one this move would
	// replace, so this move can never commit. Before relay-ready the
	// target fails at once (Failed to its source, its temporary queue
	// discarded): its source cannot have handed it anything. From
	// relay-ready on it does nothing: only its source's Abort, or its
	// cutover and the commit the store then refuses, says whether the
	// messages it holds are its source's or the object's new owner's.
	Superseded struct{ Owner Ownership }
)

func (Receive) input()       {}
func (Tick) input()          {}
func (LinkUp) input()        {}
func (Start) input()         {}
func (Captured) input()      {}
func (CaptureFailed) input() {}
func (HeldTaken) input()     {}
func (OperatorAbort) input() {}
func (TargetDead) input()    {}
func (Restored) input()      {}
func (StoreResult) input()   {}
func (Superseded) input()    {}

// Effect is one thing a step asks the driver to do: a record to send to
// the peer (Send) or an Action. An Output's effects are in the order the
// driver must carry them out.
type Effect interface{ effect() }

// Send: send Record to the peer, in its place among the effects.
type Send struct{ Record Record }

// Action is something the driver must do for a machine other than sending
// a record. An action whose result the machine waits for (a capture, a
// restore, a store call, the hold) is answered by an input: at once, or
// later, from an owner's turn or a store call.
type Action interface {
	Effect
	action()
}

// Source actions.
type (
	// SealAndCapture: in one lifecycle turn of the owner (no application
	// turn runs meanwhile), seal it at that turn boundary and build the
	// move record (state through the kind's policy, the unexecuted queue
	// in order, undecoded); then step Captured, or CaptureFailed.
	SealAndCapture struct{}
	// ReopenOwner: put the captured work back, then the hold, in their
	// original order, and reopen the owner. The store is not touched.
	ReopenOwner struct{}
	// TakeHeld: close the owner's mailbox to new turns for good, take what
	// was held, route later arrivals to Message Follow, then step HeldTaken.
	TakeHeld struct{}
	// InstallFollow: route the object's messages to the target (a
	// forwarding route), before the owner leaves this host's owners: a
	// sender that misses the owner finds the route, and does not activate
	// the object here again.
	InstallFollow struct{ Target string }
	// DropFollow: the move was abandoned after relay-ready; remove the
	// forwarding route so senders look the owner up in the store again.
	DropFollow struct{}
)

// Target actions.
type (
	// RegisterTempQueue: register a temporary queue for the object before
	// anything else, so direct arrivals wait there.
	RegisterTempQueue struct{ Object Object }
	// RestoreObject: run the factory and Restore on the state, keep the
	// captured queue; nothing runs yet. Then step Restored.
	RestoreObject struct{ Record MoveRecord }
	// DiscardTempQueue: the move failed or was aborted; drop the temporary
	// queue (and any restored state) unrun — its messages end as the
	// driver's policy for an unknown owner says.
	DiscardTempQueue struct{ Reason string }
	// StoreNewOwner: perform the Location Store CAS, then step StoreResult.
	StoreNewOwner struct {
		Object  Object
		Expect  Ownership
		NewHost string
	}
	// OpenQueue: the target owns the object. Run, in order, the captured
	// work, the pre-boundary relays, then the temporary queue.
	OpenQueue struct {
		Captured, Relayed [][]byte
		Owner             Ownership // the row the commit wrote
	}
	// DeliverLate: pre-boundary relays that arrived after the queue opened.
	DeliverLate struct{ Frames [][]byte }
	// Forget: the follow window after the opening (TargetConfig.FollowFor)
	// has ended: the driver forgets the move. A record of it that comes
	// later finds no move (a relay is sent on to the object's owner).
	Forget struct{}
	// Abandon: the store said the object belongs to someone else (conflict
	// or newer owner) or could not be written in time; nothing of the move
	// ran here. The captured work and the relays it got are handed back so
	// the driver can send them on to the object's owner.
	Abandon struct {
		Reason            string
		Captured, Relayed [][]byte
	}
)

// Finish ends a machine's move with an outcome. Either machine.
type Finish struct {
	Outcome Outcome
	Reason  string
}

// Log asks the driver to log a notable event (not an error of the driver).
type Log struct{ Msg string }

func (SealAndCapture) action()    {}
func (ReopenOwner) action()       {}
func (TakeHeld) action()          {}
func (InstallFollow) action()     {}
func (DropFollow) action()        {}
func (RegisterTempQueue) action() {}
func (RestoreObject) action()     {}
func (DiscardTempQueue) action()  {}
func (StoreNewOwner) action()     {}
func (OpenQueue) action()         {}
func (DeliverLate) action()       {}
func (Forget) action()            {}
func (Abandon) action()           {}
func (Finish) action()            {}
func (Log) action()               {}

func (Send) effect()              {}
func (SealAndCapture) effect()    {}
func (ReopenOwner) effect()       {}
func (TakeHeld) effect()          {}
func (InstallFollow) effect()     {}
func (DropFollow) effect()        {}
func (RegisterTempQueue) effect() {}
func (RestoreObject) effect()     {}
func (DiscardTempQueue) effect()  {}
func (StoreNewOwner) effect()     {}
func (OpenQueue) effect()         {}
func (DeliverLate) effect()       {}
func (Forget) effect()            {}
func (Abandon) effect()           {}
func (Finish) effect()            {}
func (Log) effect()               {}

// Outcome is how a move ended.
type Outcome uint8

// Outcomes.
const (
	// Moved: the target owns the object.
	Moved Outcome = iota + 1
	// NotStarted: the preflight failed; the source was not disturbed.
	NotStarted
	// Aborted: aborted before relay-ready; the source owns and runs the
	// object again, the store untouched.
	Aborted
	// Abandoned: the target's store CAS lost (conflict, newer owner, or no
	// success within the deadline).
	Abandoned
	// Lost: the target died after relay-ready was accepted; the source never
	// reopens, so the object's queued work is gone with the target.
	Lost
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Moved:
		return "moved"
	case NotStarted:
		return "not-started"
	case Aborted:
		return "aborted"
	case Abandoned:
		return "abandoned"
	case Lost:
		return "lost"
	}
	return "none"
}

// Output is what one step produced: the effects for the driver — records
// to send and actions — in the one order it must carry them out. A
// machine acts before it tells its peer (a target opens its queue before
// it sends Committed; a source reopens before it sends Abort), and a
// Finish comes last. The input an action is answered by at once (a
// failed admission, say) is stepped after the rest of the effects.
type Output struct {
	Effects []Effect
}

func (o *Output) send(r ...Record) {
	for _, rec := range r {
		o.Effects = append(o.Effects, Send{Record: rec})
	}
}
func (o *Output) act(a ...Action) {
	for _, act := range a {
		o.Effects = append(o.Effects, act)
	}
}
func (o *Output) log(msg string) { o.Effects = append(o.Effects, Log{Msg: msg}) }
func (o *Output) finish(oc Outcome, reason string) {
	o.Effects = append(o.Effects, Finish{Outcome: oc, Reason: reason})
}

// Defaults for the target.
const (
	// DefaultCutoverWait: a target that got no cutover this long after its
	// relay-ready commits anyway (and logs it).
	DefaultCutoverWait = 1000 * time.Millisecond
	// DefaultCommitDeadline: how long the target retries transient store
	// failures with the same identity before it logs that the move waits
	// for the store (it goes on asking).
	DefaultCommitDeadline = 10 * time.Second
	// DefaultAssemblyTimeout: a target whose source, reachable all along,
	// sent no chunk of the move record this long gives the move up
	// (before relay-ready: the source aborts and the object stays there).
	DefaultAssemblyTimeout = 30 * time.Second
	// DefaultReadyTimeout: a target in relay-ready whose source, reachable
	// all along, sent nothing (no relay, no cutover) this long commits with
	// what it has, as after CutoverWait with the source cut off.
	DefaultReadyTimeout = 30 * time.Second
	// DefaultFollowFor: how long a target that opened keeps the move (it
	// answers a source that resends, it delivers late relays) before it
	// forgets it.
	DefaultFollowFor = 30 * time.Second
)
