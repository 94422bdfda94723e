// Package actor is berth's user API: a Host that hosts stateful objects and
// channels, typed handlers, and Tell, Ask and Publish.
//
// An object kind is a state type, a factory and typed handlers:
//
//	carts := actor.NewKind("cart", func(ctx *actor.Context, id string) (*Cart, error) {
//		return &Cart{Items: map[string]int{}}, nil
//	})
//	actor.Handle(carts, func(ctx *actor.Context, c *Cart, m AddItem) error { ... })
//	actor.HandleRequest(carts, func(ctx *actor.Context, c *Cart, q CountItems) (int, error) { ... })
//
// Every object has exactly one owner on a host: a protoactor-go actor whose
// mailbox (package mailbox) holds encoded, reference-counted messages
// (package payload). An object activates on its first message — once per
// host — and may passivate when idle (Config.IdleTimeout).
//
// # The path of a message
//
// A send from outside a handler waits, cancellably, for one of the host's
// job permits, then enters the owner's application lane in one atomic
// admission span (waiting up to SendTimeout for room). The owner runs one
// turn at a time; its turn decodes the payload into the handler's declared
// type at most once, returns the permit immediately before the handler's
// first instruction, runs the handler (a panic is recovered and becomes an
// InternalFailure reply), sends the reply, and releases the payload exactly
// once — on every path, including rejection, timeout, cancellation and
// shutdown. A send from inside a handler never waits for a permit while
// holding the gate: if none is free it queues behind the owner's earlier
// sends and is admitted, in order, when a permit is handed to it.
//
// # Invariants
//
//   - One activation per object per host; one turn per owner at a time.
//   - Per sender and owner, messages run in the order they were sent.
//   - Ask completes exactly once: reply, error, deadline, cancellation or
//     shutdown, whichever comes first; late replies are released and dropped.
//   - At most MaxRequestsInFlight requests wait for replies per host.
//   - No payload is decoded before its owner's turn starts, or at all if
//     it is rejected.
//   - After Stop or Close returns, no goroutine of the host is running.
//
// # Several hosts and live relocation
//
// Hosts joined by a transport (Config.Transport: transport/inproc's Network
// in one process), sharing a Location Store (Config.Store) and a membership
// (Config.Membership), activate each object once across all of them and
// route messages to wherever it runs. They reach each other only through
// the transport — items of bytes, in order per pair of hosts, and link
// events — and learn each other only from the membership (peers.go): no
// host reads another's memory, so the same code runs over any transport.
// No Location Store call runs on a transport's delivery goroutine, under
// an owner's lock, in a move's step (a move's store calls have a lane of
// their own), or on a goroutine that grants a job permit. No code of a
// kind runs on a transport's delivery goroutine either: handlers, the
// factory and the deactivate hook run in the owner's turns, a move's
// Capture in the seal's turn and its Restore on the move's own lane, so a
// slow one stalls its object, never a link.
//
// Host.Relocate moves a live object — its queued messages,
// undecoded, and its state per the kind's policy (DisableRelocation by
// default, RecreateOnRelocation, PreserveState) — to another host while
// messages keep flowing; Host.Drain moves every object off a host and stops
// it. Invariants, with every host up:
//
//   - No message is lost or run twice across a move; every Ask completes
//     exactly once. No message is dropped for routing reasons, whatever the
//     move rate: a message that reaches a host its object left goes to the
//     newest owner that host knows, and one that cannot be placed goes
//     back to the host that sent it, which looks the object up afresh.
//   - Per sending host and object, messages run in the order sent — by all
//     the host's goroutines together, whatever way each message took: each
//     carries a sequence number, and the owner holds one that came ahead
//     of its turn (encoded, without its job permit) until the older ones
//     arrived (see inbox.go and package route).
//   - A message held during a move is decoded only when it runs: at the
//     target after the commit, or at the source after an abort.
//   - Before relay-ready is accepted a move may abort and the object resumes
//     at the source, queue order intact, store untouched; after it, the
//     source never runs the object again.
//   - Only the target writes the new owner to the Location Store.
//   - What a host keeps of one peer's messages is bounded
//     (Config.PeerInbound): the peer's outside senders wait for credit
//     below half of it, and past it a message is refused — an Ask hears of
//     it (ErrPeerBacklog), a one-way message leaves a skip notice and is
//     counted — never queued without end (peerbudget.go). What a host
//     keeps to send a peer is bounded by its transport's hard bound
//     (transport.Backlogger): no message is numbered for its order on a
//     link at the bound — the send gets ErrPeerBacklog — so a refused
//     send leaves no gap. Every item of a
//     link is the authenticated peer's: a first-hop message names it as
//     its origin, a forwarded one names a member, a move's records come
//     from its peer, a bounce carries a message of the receiving host.
//
// Location transparency: a handler error (HandlerError), a lane limit, a
// deadline or a cancellation looks the same to the sender whether the
// object runs on its host or another. Host.Locate and Host.Relocate work
// from any host (Relocate asks the owner's host). An object that no live
// host owns activates where its kind's Placement says (PlaceLocal, the
// sender's host, by default). Stop on a network moves objects that
// relocate away first (unless Config.StopDeactivates), stops its peers
// routing to it at once, and finishes in bounded time under load: their
// new messages wait in their senders until the object is handed on.
//
// Durable state (Kind.PersistState, docs/architecture.md, "Durable
// state"): a persistent object's state is loaded on activation and
// written after each turn, many objects in one store call; a turn's
// outputs (replies, the messages its handler sends) leave only once its
// write is durable, so an acknowledged update is never lost, whatever
// crashes; writes are fenced by the owner generation, so a former owner
// never overwrites a newer one's state.
//
// Not covered: messages on their way to or queued at a host that crashes
// are lost; a sender's messages behind such a loss wait GapTimeout, then
// run (Stats.GapsClosed) — TakeoverGapTimeout (250 ms) where the object
// was taken over from the crashed owner; relays that arrive after the target's
// CutoverWait ran out (the link from the source down that long) run late
// (Stats.Late). See docs/operations.md, "Guarantees in full", for the full list, and LOCK_ORDER.md for
// the package's locks.
package actor
