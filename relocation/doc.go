// Package relocation is berth's live move protocol as pure state machines,
// the move record, the Location Store interface and its in-memory
// implementation (docs/architecture.md, "Relocation"), and the state store
// of persistent objects, fenced by the Location Store's rows (StateStore,
// docs/architecture.md, "Durable state").
//
// Source and Target do no I/O, start no goroutine and read no clock:
// protocol records, action results, store results and ticks go in (Step);
// one ordered list of effects comes out (Output.Effects): records to send
// (Send) and actions, in the order the driver must carry them out.
// PauseClock, pure as well, works out a move's pause from the times a driver
// gives it. The actor package drives each move on a serial lane of its
// own: every input is stepped there, one at a time; the seal with the
// capture (the kind's Capture) runs inside a turn of the owner, in its
// place on the move's lane, and the restore (its Restore) on the lane,
// while the incoming owner runs nothing.
//
// # Invariants
//
//   - A step's effects are carried out in their order: a machine acts
//     before it tells its peer (a target opens its queue, then sends
//     Committed; a source reopens, then sends Abort), and a Finish comes
//     last. An input an action yields at once is stepped after the rest
//     of the step's effects.
//   - The move record is built only after the seal took effect, in the
//     same turn of the owner (SealAndCapture); a capture that fails
//     (CaptureFailed) aborts the move and the object runs on at the
//     source.
//   - The source installs its forwarding route to the target before the
//     owner leaves (InstallFollow, then TakeHeld): a sender that misses
//     the owner finds the route.
//   - The target registers its temporary queue before anything else and
//     runs nothing before it owns the object in the Location Store.
//   - Before relay-ready is accepted the move can be aborted (target
//     failure, checksum mismatch, duplicate-but-different assembly, target
//     death, operator): the target discards its temporary queue unrun, the
//     source reopens in the original order, the store is untouched. After
//     it, the source never reopens.
//   - Only the target writes the owner (NewOwner CAS from the generations
//     the source read); a conflict or a newer owner ends the move with
//     nothing run at the target. One store call at a time: the target
//     asks for the next only after the result of the last.
//   - An opened target keeps the move for its follow window
//     (TargetConfig.FollowFor, on its Tick clock from the opening), then
//     says Forget; ForgetAt tells a driver when a tick can end it.
//   - A missing cutover delays the commit by at most the cutover wait; a
//     resent batch replaces a partial one wholesale; late results never
//     revive a finished move.
//   - No guessed rollback: the source never aborts on a timeout, only on an
//     explicit failure, an operator, or a target that can no longer commit.
//   - What a target keeps is bounded by the bytes it was sent, never by
//     what a record declares: a Prepare's length is bounded by
//     TargetConfig.MaxRecord before anything is kept, chunks are kept as
//     they arrive, in order, within that length (one ahead of its turn,
//     or past the length, fails the move).
//   - One timer gives a move up without a failure: a target whose source,
//     reachable, sends no chunk for TargetConfig.AssemblyTimeout fails the
//     move before relay-ready (a stray Prepare would otherwise hold a
//     temporary queue for its object for ever). Its cost is a failed move
//     — the source aborts, the object stays — never a message.
//   - No clock is compared between hosts: each side's PauseClock times
//     with its own; the target's figures travel in its Committed.
package relocation
