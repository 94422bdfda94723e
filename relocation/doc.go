// Package relocation is berth's live move protocol as pure state machines,
// the move record, the Location Store interface and its in-memory
// implementation (docs/architecture.md, "Relocation").
//
// Source and Target do no I/O, start no goroutine and read no clock:
// protocol records, action results, store results and ticks go in (Step);
// records to send and actions for the driver come out (Output). The actor
// package drives them on the owner's lifecycle lane.
//
// # Invariants
//
//   - The move record is built only after the seal took effect.
//   - The target registers its temporary queue before anything else and
//     runs nothing before it owns the object in the Location Store.
//   - Before relay-ready is accepted the move can be aborted (target
//     failure, checksum mismatch, duplicate-but-different assembly, target
//     death, operator): the target discards its temporary queue unrun, the
//     source reopens in the original order, the store is untouched. After
//     it, the source never reopens.
//   - Only the target writes the owner (NewOwner CAS from the generations
//     the source read); a conflict or a newer owner ends the move with
//     nothing run at the target.
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
package relocation
