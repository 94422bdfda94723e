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
package actor
