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
	// Sealed: the seal took effect at a turn boundary; no application turn
	// will start.
	Sealed struct{}
	// Captured: the move record was built (after the seal, never before).
	Captured struct{ Record MoveRecord }
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
)

func (Receive) input()       {}
func (Tick) input()          {}
func (LinkUp) input()        {}
func (Start) input()         {}
func (Sealed) input()        {}
func (Captured) input()      {}
func (HeldTaken) input()     {}
func (OperatorAbort) input() {}
func (TargetDead) input()    {}
func (Restored) input()      {}
func (StoreResult) input()   {}

// Action is something the driver must do for a machine.
type Action interface{ action() }

// Source actions.
type (
	// SealOwner: seal the owner at the next turn boundary, then step Sealed.
	SealOwner struct{}
	// CaptureMove: build the move record (state through the kind's policy,
	// the unexecuted queue in order, undecoded), then step Captured.
	CaptureMove struct{}
	// ReopenOwner: put the captured work back, then the hold, in their
	// original order, and reopen the owner. The store is not touched.
	ReopenOwner struct{}
	// TakeHeld: close the owner's mailbox to new turns for good, take what
	// was held, route later arrivals to Message Follow, then step HeldTaken.
	TakeHeld struct{}
	// InstallFollow: keep only a forwarding route to the target.
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

func (SealOwner) action()         {}
func (CaptureMove) action()       {}
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
func (Abandon) action()           {}
func (Finish) action()            {}
func (Log) action()               {}

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

// Output is what one step produced: records to send to the peer, in
// order, and actions for the driver, in order.
type Output struct {
	Send    []Record
	Actions []Action
}

func (o *Output) send(r ...Record) { o.Send = append(o.Send, r...) }
func (o *Output) act(a ...Action)  { o.Actions = append(o.Actions, a...) }
func (o *Output) log(msg string)   { o.Actions = append(o.Actions, Log{Msg: msg}) }
func (o *Output) finish(oc Outcome, reason string) {
	o.Actions = append(o.Actions, Finish{Outcome: oc, Reason: reason})
}

// Defaults for the target.
const (
	// DefaultCutoverWait: a target that got no cutover this long after its
	// relay-ready commits anyway (and logs it).
	DefaultCutoverWait = 1000 * time.Millisecond
	// DefaultCommitDeadline: how long the target retries transient store
	// failures with the same identity.
	DefaultCommitDeadline = 10 * time.Second
	// DefaultAssemblyTimeout: a target whose source, reachable all along,
	// sent no chunk of the move record this long gives the move up
	// (before relay-ready: the source aborts and the object stays there).
	DefaultAssemblyTimeout = 30 * time.Second
	// DefaultReadyTimeout: a target in relay-ready whose source, reachable
	// all along, sent nothing (no relay, no cutover) this long commits with
	// what it has, as after CutoverWait with the source cut off.
	DefaultReadyTimeout = 30 * time.Second
)
