// Package route holds berth's routing and ordering rules as pure code: no
// goroutines, no clock (time is an input, in nanoseconds on any fixed
// epoch), no locks, no store calls and no I/O. Like package relocation, it
// decides and its driver (package actor) acts. None of its types is safe
// for concurrent use; the driver serializes access.
//
// # Order per sender: sequence numbers
//
// Every message a host sends to an object carries a [Stamp]: the sending
// host (its origin), an epoch and a sequence number, per (sending host,
// object). [Streams] hands stamps out on the sending side; a stream starts
// at sequence 1 in a fresh epoch and is forgotten once idle for its idle
// time, after which the next message starts a new epoch.
//
// The object's owner keeps an [Inbox]: its receive side as one machine.
// The inbox is open (arrivals are checked), frozen (the object is sealed
// for a move or is a move's incoming owner: arrivals are kept unchecked,
// in arrival order, and checked where the object opens) or shut (its
// mailbox closed for good: arrivals are routed again, held messages are
// handed back). Inside it an [Order] keeps, per sending host, the epoch it
// is in and the next sequence number it expects, and a reorder buffer of
// messages that arrived ahead of their turn. Invariants:
//
//   - A message is released (handed to the owner's queue) only when every
//     message of its sender's stream before it has been released, skipped
//     (a skip notice: the sender or a forwarding host knows it was
//     dropped), or given up on after a host failure (below).
//   - A gap closes only on a fact. Without a skip notice, it closes only
//     when a failure [Fact] covers it — the membership reported a host
//     gone (its lease expired, or it left without handing on its work)
//     while the gap was open or shortly before it opened (the fact's
//     window), or the object was taken over from a crashed owner — and
//     then only after the fact's wait, for what is still on live links.
//     Which host could hold the missing message is not known at the
//     owner (a message may have crossed any host that forwarded for the
//     object), so any host failure counts: a gap never closes while every
//     host is up, however long a move, a follow path or a starved process
//     takes. No timer stands in for a failure.
//   - The reorder buffer's bound (MaxHeld per sender) is back-pressure:
//     past it the inbox still holds the message and reports the sender
//     over its bound, and the driver pushes back on that sender. Nothing
//     is released out of order and nothing is dropped because of it.
//   - A frozen inbox closes no gap: what it misses may be in the move.
//   - Messages of one sender are released in sequence order; a message
//     that arrives after its gap was given up on, or of an epoch older
//     than the one the owner is in, is released at once and counted late.
//     So a message runs late only after a host failure.
//   - Nothing is delivered twice. The one message that can come twice is
//     one sent again: a new run of its sender (a gateway that joins again
//     after the membership ended its run) sends again what its old run's
//     links had not seen taken, and a link may have delivered some of it.
//     Such a message ([Inbox.Offer]'s again) that the order has already
//     in the sender's current epoch — released, or held ahead of a gap —
//     is dropped ([StepRepeat], counted). Where that cannot be told — below a gap given up on, in
//     an older epoch, or in state restored from a snapshot written before
//     snapshots carried where the order is unsure — it is checked as any
//     other message, and runs late rather than being dropped on a doubt.
//   - A newer epoch of a sender means the sender forgot its stream: the
//     owner expects sequence 1 of it, and releases what still waited in
//     the older epoch first.
//   - The order state (the expected-next table and the buffer) travels
//     with the object: in the move record when it moves, in its Location
//     Store row when it is deactivated ([AppendSnapshot],
//     [DecodeSnapshot]). A held message keeps the time its gap opened, so
//     a failure fact at the new place covers it as it would have at the
//     old one. An owner forgets a sender only after it has been idle for
//     longer than the sender's stream idle time, so a stream the owner
//     forgot has been forgotten by its sender too.
//
// # After a failure: streams that restart
//
// A host that failed takes with it the messages it held. Its objects are
// taken over by other hosts, which have no order state for the senders of
// the crashed owner: the first message of each sender may come after
// older ones still on their way, and a takeover's gap waits (the fact's
// wait) for them. But the sender knows where each of its messages went
// (their first hops; [Streams.NextTo], [Streams.Handed]). When every
// message of a stream's epoch was handed to host runs that have failed
// since, none of them can still arrive anywhere: each was processed where
// it went, or died there — a failed run forwards nothing more, and what
// it sent before it failed was received before its links broke. So the
// stream starts a new epoch: its next message is sequence 1, with no gap
// at the owner, and runs at once. A stream any of whose messages went to
// a run that has not failed (a host that may still forward or bounce it)
// keeps its epoch, and the owner's gap rules apply as before. This is
// what bounds the wait after a crash by what can still be in flight on
// live links, rather than by a timer per object per sender.
//
// Counting is the only local proof that every older message has arrived:
// Message Follow is a shifting, possibly circular set of paths (an object
// can come back to a host that forwarded older messages away), which no
// marker sent along one fixed path can flush.
//
// # Routes and Message Follow
//
// A [Table] is a host's knowledge of where objects run: cached lookups
// (short-lived) and forwarding routes of objects that moved away from the
// host (Message Follow). A newer owner generation always wins. A [Trail]
// lists the hosts an object left recently, which still forward for it;
// when the object's next move commits, each of them is told where it went,
// so a message reaching any of them is forwarded straight to the newest
// owner instead of down a growing chain. [Forward] decides, for a message
// at a host the object is not on, where it goes next; its hop bound is a
// loop guard only: a message past it goes back to its origin, which
// resolves the object afresh.
package route
