package mailbox

import (
	"sync"

	"github.com/berthrt/berth/payload"
)

// Lane is one of an owner's two queues.
type Lane uint8

// The lanes.
const (
	// Application carries ordinary messages; each holds a job permit until
	// its handler starts.
	Application Lane = iota
	// Lifecycle carries relocation and lifecycle control; it never waits for
	// application permits and runs first (at most LifecycleBurst in a row).
	Lifecycle
)

// String returns "application" or "lifecycle".
func (l Lane) String() string {
	if l == Lifecycle {
		return "lifecycle"
	}
	return "application"
}

// Envelope is one queue item: an encoded message (or a control item) with
// its lane, its sequence number and the resources it holds. Envelopes are
// pooled; get one with NewEnvelope.
//
// The mailbox owns an admitted envelope: after the item's turn it releases
// the item's byte reservation, returns its permit if the turn did not, and
// calls Release, which releases the message. An envelope that was not
// admitted stays with the caller, who releases it.
type Envelope struct {
	// Msg is the encoded message, or nil for a control item.
	Msg *payload.Message
	// Control is a control item's content when Msg is nil.
	Control any
	// Attach is per-item data of the layer above (reply handling, timing).
	Attach any
	// Lane is the lane the item goes to.
	Lane Lane
	// Seq is the owner's sequence number, assigned at admission.
	Seq uint64

	// Admitted is when the item was admitted, in the clock of the layer
	// above (for queue-wait measurements); the mailbox does not read it.
	Admitted int64

	reserved int64
	permits  *Permits // non-nil while the item holds a permit
	box      *Mailbox // set while the item's turn runs
	live     bool
}

// Mailbox returns the mailbox running the item's turn; nil outside a turn.
func (e *Envelope) Mailbox() *Mailbox { return e.box }

var envelopes = sync.Pool{New: func() any { return new(Envelope) }}

// NewEnvelope returns an empty envelope from the pool.
func NewEnvelope() *Envelope {
	e := envelopes.Get().(*Envelope)
	e.live = true
	return e
}

// HoldPermit records that the item holds one permit of p (taken by the
// sender before admission). The permit goes back with ReturnPermit, or with
// Release if it is still held then.
func (e *Envelope) HoldPermit(p *Permits) {
	if e.permits != nil {
		panic("mailbox: envelope already holds a permit")
	}
	e.permits = p
}

// HasPermit reports whether the item still holds a permit.
func (e *Envelope) HasPermit() bool { return e.permits != nil }

// ReturnPermit returns the item's permit, if it still holds one. The owner
// calls it immediately before the handler's first instruction.
func (e *Envelope) ReturnPermit() {
	if p := e.permits; p != nil {
		e.permits = nil
		p.Release()
	}
}

// TakePermit detaches the item's permit, if it holds one, and returns it:
// the caller now returns it (Permits.Release) when it sees fit.
func (e *Envelope) TakePermit() *Permits {
	p := e.permits
	e.permits = nil
	return p
}

// Size returns the bytes the item reserves in its lane: payload size + 256.
func (e *Envelope) Size() int64 {
	if e.Msg == nil {
		return ItemOverhead
	}
	return int64(e.Msg.Len()) + ItemOverhead
}

// Release ends the item: it returns the permit if still held, releases the
// message, and recycles the envelope. Every terminal path of an item ends
// here, exactly once; a second Release panics.
func (e *Envelope) Release() {
	if !e.live {
		panic("mailbox: Envelope released twice")
	}
	e.ReturnPermit()
	if e.Msg != nil {
		e.Msg.Release()
	}
	*e = Envelope{}
	envelopes.Put(e)
}
