package route

// InboxState is where an Inbox is in its life.
type InboxState uint8

// Inbox states.
const (
	// Open: arrivals are checked against the order and released, held or
	// skipped.
	Open InboxState = iota
	// Frozen: the object is sealed for a move, or is a move's incoming
	// owner: arrivals are kept unchecked, in arrival order, and checked
	// where the object opens (Thaw).
	Frozen
	// Shut: the object's mailbox closed for good; arrivals are refused
	// and go back to their router.
	Shut
)

// String returns the state's name.
func (s InboxState) String() string {
	switch s {
	case Open:
		return "open"
	case Frozen:
		return "frozen"
	case Shut:
		return "shut"
	}
	return "state(?)"
}

// Step is what an Inbox tells its driver to do with an arriving message.
type Step uint8

// Steps.
const (
	// StepAdmit: the message's turn has come (or it is late): the driver
	// admits it to the object's queue and, if that worked, calls
	// Admitted; if admission failed nothing changed.
	StepAdmit Step = iota + 1
	// StepHeld: the message is ahead of its turn and the inbox holds it
	// (the driver gives its job permit back). Then Next.
	StepHeld
	// StepSkipped: a skip notice was taken in (or was behind and means
	// nothing); the driver ends the notice. Then Next.
	StepSkipped
	// StepKeep: the inbox is frozen: the driver keeps the message
	// unchecked (the mailbox's hold) for Thaw.
	StepKeep
	// StepRefuse: the inbox is shut: the driver routes the message again.
	StepRefuse
	// StepRepeat: the inbox has the message's stamp already, released or
	// held (Order.Repeat): it was sent again, or replayed. The driver
	// drops it, without running it. Counted (Counts.Repeats).
	StepRepeat
)

// String returns the step's name.
func (s Step) String() string {
	switch s {
	case StepAdmit:
		return "admit"
	case StepHeld:
		return "held"
	case StepSkipped:
		return "skipped"
	case StepKeep:
		return "keep"
	case StepRefuse:
		return "refuse"
	case StepRepeat:
		return "repeat"
	}
	return "none"
}

// Inbox is an object owner's whole receive side (see the package doc):
// its state (open, frozen, shut), its Order, and the failure fact of a
// takeover. It decides; its driver moves the messages. The zero value is
// an open, empty inbox. Not safe for concurrent use.
type Inbox[T any] struct {
	order    Order[T]
	state    InboxState
	takeover Fact // zero: the object was not taken over from a crashed owner
}

// State returns the inbox's state.
func (in *Inbox[T]) State() InboxState { return in.state }

// Order returns the inbox's order, for what the Inbox does not wrap
// (snapshots, counts, the expected-next table).
func (in *Inbox[T]) Order() *Order[T] { return &in.order }

// Offer says what to do with an arriving message of sender stamped st
// (skip: it is a skip notice; again: a new run of its sender sent it
// again, and this inbox may have had it from the old run). An unstamped
// message is StepAdmit while open; a message the order has already
// (released or held: Order.Repeat) is StepRepeat — one sent again, or a
// stamp that came twice (a member replaying a frame: a stamp never runs
// twice in its sender's current epoch). On StepHeld and StepSkipped the inbox
// has taken item; the driver then takes what became ready with Next. Over
// reports, on StepHeld, whether sender is past its bound (Order.MaxHeld):
// the driver pushes back on it; nothing is released out of order, and
// nothing but a repeat is dropped.
func (in *Inbox[T]) Offer(sender []byte, st Stamp, skip, again bool, item T, now int64) (step Step, over bool) {
	switch in.state {
	case Shut:
		return StepRefuse, false
	case Frozen:
		return StepKeep, false
	}
	if st.IsZero() {
		return StepAdmit, false
	}
	v := in.order.Check(sender, st)
	if v != Release && (again || !skip) && in.order.Repeat(sender, st) {
		in.order.Dropped()
		return StepRepeat, false
	}
	if skip {
		in.order.Skip(sender, st, item, now)
		if v == Hold { // held in its place
			return StepHeld, in.order.Over(sender)
		}
		return StepSkipped, false
	}
	if v == Hold {
		return StepHeld, in.order.Hold(sender, st, item, now)
	}
	return StepAdmit, false
}

// Admitted records that a message Offer answered StepAdmit was admitted.
// Messages held behind it whose turn has come become ready (Next).
func (in *Inbox[T]) Admitted(sender []byte, st Stamp, now int64) {
	in.order.Released(sender, st, now)
}

// Next takes the next message that became ready, in order. The driver
// admits it (or ends it, if it is a skip notice).
func (in *Inbox[T]) Next() (T, bool) { return in.order.Next() }

// Freeze stops checking arrivals (StepKeep) until Thaw: the object is
// sealed for a move or is a move's incoming owner. A shut inbox stays
// shut.
func (in *Inbox[T]) Freeze() {
	if in.state == Open {
		in.state = Frozen
	}
}

// Thaw opens a frozen inbox: the driver then offers, in order, what it
// kept meanwhile (relayed or held messages), admitting what Offer says
// to — at the object's new place after a move, or at its source after an
// abort.
func (in *Inbox[T]) Thaw() {
	if in.state == Frozen {
		in.state = Open
	}
}

// Shut closes the inbox for good and returns every message it held, each
// sender's in order (the order state is kept, for the object's store
// row).
func (in *Inbox[T]) Shut() []T {
	in.state = Shut
	return in.order.TakeHeld()
}

// TakenOver records that the object was taken over at now from an owner
// that crashed: its gaps open now or opening within window close after
// wait — the messages they miss died with that owner. So does, whenever
// it opens, the gap before a sender's first message here (none of its
// stream was released by this activation): its older messages were
// addressed to the crashed owner — a sender whose last messages went
// there and who sends again only after the window would otherwise wait
// for them for ever.
func (in *Inbox[T]) TakenOver(now, window, wait int64) {
	in.takeover = Fact{At: now, Window: window, Wait: wait}
}

// Takeover returns the inbox's takeover fact as of now, for a Snapshot
// (the zero TakeoverAge: none).
func (in *Inbox[T]) Takeover(now int64) TakeoverAge {
	f := in.takeover
	if f == (Fact{}) {
		return TakeoverAge{}
	}
	return TakeoverAge{Ago: max(now-f.At, 0), Window: f.Window, Wait: f.Wait}
}

// RestoreTakeover takes in a Snapshot's takeover fact (none: nothing
// changes): the object's order state came from an owner that had taken it
// over from a crashed one.
func (in *Inbox[T]) RestoreTakeover(t TakeoverAge, now int64) {
	if t != (TakeoverAge{}) {
		in.takeover = Fact{At: now - t.Ago, Window: t.Window, Wait: t.Wait}
	}
}

// CloseGaps gives up, on the inbox's own takeover fact and the host's
// failure facts, on every gap they cover whose wait has passed (see
// Fact). A frozen inbox closes nothing: what it misses may be in the
// move. It returns how many senders it released; the driver takes them
// with Next.
func (in *Inbox[T]) CloseGaps(now int64, facts []Fact) int {
	if in.state != Open {
		return 0
	}
	if f := in.takeover; f != (Fact{}) {
		if open, ok := in.order.oldestOpen(); ok && open <= f.At+f.Window {
			facts = append(facts[:len(facts):len(facts)], f)
		}
		n := in.order.CloseGaps(now, facts...)
		return n + in.order.closeFirstGaps(now, f.Wait)
	}
	return in.order.CloseGaps(now, facts...)
}

// Held returns how many messages the inbox holds out of order.
func (in *Inbox[T]) Held() int { return in.order.Held() }
