package pgbridge

import (
	"time"

	"github.com/berthrt/berth/payload"
)

// Errors of the bridge, each of a kind of docs/architecture.md, "Errors" (test with errors.Is on the
// variable or on its kind).
var (
	// ErrLeaseLost: a lease-form settlement or extension found the row's
	// lease taken over (it expired and the row was claimed again, or
	// rescued); it changed nothing.
	ErrLeaseLost = payload.NewError(payload.Rejected, "pgbridge", "lease lost: the row was claimed again")
	// ErrBatchRolledBack: a statement of a row-lock claim failed, so the
	// whole claim transaction rolled back; its rows will be claimed again
	// (a rolled-back batch's one at a time; a one-row claim that the server
	// refused is settled as a counted retry instead).
	ErrBatchRolledBack = payload.NewError(payload.Unavailable, "pgbridge", "batch rolled back; its rows will be redelivered")
	// ErrOutcomeUnknown: a row-lock claim's COMMIT was sent, its answer was
	// lost with the connection, and the server could not be asked whether
	// it committed. The rows are either settled or claimed again.
	ErrOutcomeUnknown = payload.NewError(payload.Unavailable, "pgbridge", "settlement outcome unknown: the connection ended after COMMIT was sent")
	// ErrNoRoute: Routed has no route for the message's type name.
	ErrNoRoute = payload.NewError(payload.NotFound, "pgbridge.Routed", "no route for message type")
	// ErrClosed: the broker is shut down (Close, or Stop has returned;
	// deliveries finishing during Stop still publish).
	ErrClosed = payload.NewError(payload.ShuttingDown, "pgbridge", "broker closed")
)

// OutcomeKind is what a settlement does with a row.
type OutcomeKind uint8

// The outcome kinds.
const (
	// KindAck deletes the row: it was handled.
	KindAck OutcomeKind = iota
	// KindRetry makes the row ready again after the outcome's delay.
	KindRetry
	// KindDrop deletes the row without handling it (counted apart from Ack).
	KindDrop
	// KindDeadLetter moves the row to the dead-letter table.
	KindDeadLetter
)

// String names the kind (the metrics' outcome label).
func (k OutcomeKind) String() string {
	switch k {
	case KindRetry:
		return "retry"
	case KindDrop:
		return "drop"
	case KindDeadLetter:
		return "dead_letter"
	}
	return "ack"
}

// Outcome is a handler's verdict on a row.
type Outcome struct {
	Kind   OutcomeKind
	Delay  time.Duration // KindRetry: not before now + Delay
	Reason string        // KindRetry, KindDeadLetter: stored as last_error / reason
	// delayed: Delay was chosen (RetryAfter); Retry's is the
	// subscription's RetryDelay.
	delayed bool
}

// The outcomes without parameters.
var (
	Ack  = Outcome{Kind: KindAck}
	Drop = Outcome{Kind: KindDrop}
	// Retry makes the row ready again after the subscription's RetryDelay
	// (default Backoff), counting an attempt.
	Retry      = Outcome{Kind: KindRetry}
	DeadLetter = Outcome{Kind: KindDeadLetter}
)

// RetryAfter makes the row ready again after d (0: at once).
func RetryAfter(d time.Duration, reason string) Outcome {
	return Outcome{Kind: KindRetry, Delay: d, Reason: reason, delayed: true}
}

// DeadLetterWith moves the row to the dead-letter table with a reason.
func DeadLetterWith(reason string) Outcome { return Outcome{Kind: KindDeadLetter, Reason: reason} }

// DecodePolicy says how a row whose payload does not decode is settled —
// before any handler runs, counted as a decode failure.
type DecodePolicy uint8

// The decode policies.
const (
	// DecodeDrop deletes it (the default).
	DecodeDrop DecodePolicy = iota
	// DecodeRetry makes it ready again after Subscription.DecodeRetryDelay
	// (for a codec or type that a later deploy will register).
	DecodeRetry
	// DecodeDeadLetter moves it to the dead-letter table.
	DecodeDeadLetter
)

func (p DecodePolicy) outcome(delay time.Duration, err error) Outcome {
	reason := "undecodable: " + err.Error()
	switch p {
	case DecodeRetry:
		return Outcome{Kind: KindRetry, Delay: delay, Reason: reason, delayed: true}
	case DecodeDeadLetter:
		return Outcome{Kind: KindDeadLetter, Reason: reason}
	}
	return Outcome{Kind: KindDrop, Reason: reason}
}
