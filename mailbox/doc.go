// Package mailbox is the owner queue of berth: per-owner mailboxes with two
// lanes, the admission span, seal/hold/drain for relocation, and the
// host-wide job permits.
//
// # Invariants
//
//   - Admission is atomic: owner present and not closed, lane room, sequence
//     number, append, schedule — or nothing changes.
//   - At most one turn of an owner runs at a time (the gate); there is no
//     goroutine per owner.
//   - Lifecycle items run first, at most LifecycleBurst in a row while
//     application items wait.
//   - An application item reserves its payload size + ItemOverhead bytes in
//     its lane until its turn ends, and holds one job permit until the owner
//     returns it immediately before the handler's first instruction.
//   - Every admitted item ends in Envelope.Release exactly once: the message
//     is released after its turn (or by whoever takes it out of a closed
//     mailbox), never while a handler uses it.
//   - While sealed, no application turn starts and application arrivals are
//     held encoded; nothing is decoded by Drain, TakeHeld or Reopen.
//   - Permit waiting is FIFO, cancellable, and leaves the count unchanged on
//     cancellation; TryAcquire never overtakes a waiter; permits are never
//     waited for while holding a gate (asynchronous sources use Enqueue).
package mailbox
