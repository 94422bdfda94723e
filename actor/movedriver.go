package actor

import (
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The mover part, a move's driver: its inputs run one at a time on its
// lane (step, advance), the machine's records are sent and its actions
// carried out in the order it gave them (stepMachine, send, flush,
// apply), and the work a step asks for besides runs after the machine
// took the step's inputs (later).
//
// Owns: nothing beyond the moveDriver's fields, touched only on its lane.
// May call: the owners' and the router's methods, peers, the leaves; the
// Location Store on the move's store lane only.
// Invariants: one input at a time per move; no input waits for another
// move's work; the user's code never runs on the caller's goroutine.

// step runs one input on the move's lane: at once on the caller's
// goroutine if the lane is idle (no hand-off), else queued behind the
// lane's work. It never waits for other work, and runs no user code on
// the caller's goroutine: the one input that leads to the user's code
// (the restore) hands that part on to the lane's goroutine (apply).
func (d *moveDriver) step(in relocation.Input) {
	d.lane.tryHere(func() { d.advance(in) })
}

// advance, on the lane, feeds one input to the machine and carries out
// its effects in order, feeding immediate results back; then it runs the
// work the step queued, in order. The store call the machine asks for
// runs on the move's own store lane — never on the move's lane, so
// records keep being taken while it waits, and never behind other work (a
// peer's slow lane may hold look-ups) — and its result comes back to the
// lane as the machine's next input. The machine asks for the next call
// only after that result (one store call at a time is its rule).
func (d *moveDriver) advance(in relocation.Input) {
	d.stepMachine(in)
	op := d.storeOp
	d.storeOp = nil
	d.noteOver()
	d.flush()
	if op != nil {
		d.storeLane.add(func() {
			ctx, cancel := d.t.life.storeContext()
			epoch := d.t.gate.epochNow() // as an activation's (router.activate)
			var row relocation.Row
			var err error
			if d.t.gate.isBetweenRuns() {
				// The host is becoming a new run (leaseKeeper.newRun): the
				// commit waits for the new run's lease, asked again at the
				// next tick as a store that did not answer. (The machine
				// then counts this attempt as maybe written; it was not,
				// so a later conflict's row is never this move's own and
				// that check changes nothing.)
				err = payload.NewError(payload.Unavailable, "actor", "the host is joining the cluster again as a new run")
			} else {
				row, err = d.t.store.NewOwner(ctx, op.Object, op.Expect, op.NewHost)
			}
			cancel()
			d.lane.tryHere(func() {
				d.epoch = epoch
				d.advance(relocation.StoreResult{Row: row, Err: err})
			})
		})
	}
}

// noteOver notes, once, that a target move opened or ended: the tick
// skips it until its follow window ends, and it no longer counts among
// its source's moves under way here.
func (d *moveDriver) noteOver() {
	if d.tgt == nil || d.over.Load() || !(d.tgt.Done() || d.ended) {
		return
	}
	d.forgetAt.Store(d.tgt.ForgetAt()) // before over: the tick reads over first
	d.markOver()
	d.notIncoming()
}

// markOver notes that a target move opened or ended (once), and wakes the
// later moves of its object that wait for it (behindOther).
func (d *moveDriver) markOver() {
	if d.over.CompareAndSwap(false, true) && d.overCh != nil {
		close(d.overCh)
	}
}

// stepMachine steps the machine with in, and with the inputs its actions
// yield at once, each after the rest of the effects of the step that
// yielded it.
func (d *moveDriver) stepMachine(in relocation.Input) {
	if r, ok := in.(relocation.Receive); ok {
		d.clock.Received(r.Record, d.t.nanotime())
	}
	queue := []relocation.Input{in}
	for len(queue) > 0 && !d.ended {
		in := queue[0]
		queue = queue[1:]
		var out relocation.Output
		if d.src != nil {
			out = d.src.Step(in)
		} else if d.tgt != nil {
			out = d.tgt.Step(in)
		} else {
			return
		}
		// In the machine's order: a target opens its queue before it
		// sends Committed, so that when the Committed arrives the object
		// already runs here (the source's Relocate returns then).
		for _, e := range out.Effects {
			switch e := e.(type) {
			case relocation.Send:
				d.send(e.Record)
			case relocation.Action:
				if next := d.apply(e); next != nil {
					queue = append(queue, next)
				}
			}
		}
	}
}

// send sends one record of the machine to the peer, with the pause
// clock's figures (a target's Committed); after a record of the step was
// not sent, the rest are not either (flush acts on it).
func (d *moveDriver) send(r relocation.Record) {
	if d.gone || d.refused {
		if a, ok := r.(*relocation.Abort); ok && d.refused {
			d.t.oweAbort(d.peer, d.obj, a)
		}
		return
	}
	// A target that opened or ended is no longer under way here before
	// its source can hear of it: the source's next move to this host must
	// not find it counted (maxIncomingPerPeer).
	d.noteOver()
	r = d.clock.Sent(r, d.t.nanotime())
	gone, refused := d.t.peers.sendRecords(d.peer, d.obj, &d.enc, r)
	d.gone, d.refused = gone, refused
	if a, ok := r.(*relocation.Abort); ok && refused {
		d.t.oweAbort(d.peer, d.obj, a)
	}
}

// flush runs the queued work, until none is left (work may queue more),
// then acts on a record the step could not send.
func (d *moveDriver) flush() {
	for len(d.after) > 0 {
		after := d.after
		d.after = nil
		for _, f := range after {
			f()
		}
	}
	gone, refused := d.gone, d.refused
	d.gone, d.refused = false, false
	switch {
	case gone:
		d.advance(d.peerDead())
	case refused && d.src != nil:
		// The target does not take what this host sends it: the move
		// cannot go on, and is aborted as an operator would (the source
		// machine keeps the object unless the move is past its point of
		// no return). A target's refused record is the source's to
		// recover from (its records resend, its phases have deadlines).
		d.advance(relocation.OperatorAbort{Reason: "the link to " + d.peer + " is past its bound: it does not take what is sent to it"})
	}
}

// later queues f to run once the machine has taken the step's inputs and
// the step's records went out (flush).
func (d *moveDriver) later(f func()) { d.after = append(d.after, f) }

// peerDead is the input for "the peer left the network": a source learns
// its target died; a target treats it as an abort from its source (ignored
// past relay-ready: the cutover wait commits).
func (d *moveDriver) peerDead() relocation.Input {
	if d.tgt != nil {
		return relocation.Receive{Record: &relocation.Abort{Move: d.id, Reason: "source host gone"}}
	}
	return relocation.TargetDead{}
}

// apply carries out one action; it returns an input to feed back at once,
// or nil.
func (d *moveDriver) apply(a relocation.Action) relocation.Input {
	switch a := a.(type) {
	// Source actions.
	case relocation.SealAndCapture:
		// In a lifecycle turn of the owner (sealAndCapture): the lane goes
		// on meanwhile; Captured or CaptureFailed comes from that turn.
		e := mailbox.NewEnvelope()
		e.Lane = mailbox.Lifecycle
		e.Control = moveSeal{d}
		if err := d.o.mb.AdmitOverflow(e); err != nil {
			e.Release()
			return relocation.OperatorAbort{Reason: "the owner closed"}
		}
	case relocation.ReopenOwner:
		o := d.o
		after := o.reopenAfterMove(d.captured, d.held)
		d.captured, d.held = nil, nil
		d.later(func() { d.t.router.orderDone(o, after) })
	case relocation.InstallFollow:
		// Before TakeHeld, which the machine asks for next: a sender that
		// misses the owner once it left must find the route (the store
		// still names this host until the target commits; the sender
		// would otherwise activate the object here again).
		d.t.routes.learn(d.obj, a.Target, d.followGen(), true)
	case relocation.TakeHeld:
		return relocation.HeldTaken{Frames: d.takeHeld()}
	case relocation.DropFollow:
		d.t.routes.forget(d.obj, true)
	// Target actions.
	case relocation.RegisterTempQueue:
		d.registerTemp()
	case relocation.RestoreObject:
		// The user's Restore (or the factory) runs on the move's lane,
		// under no lock; the incoming owner runs nothing yet (sealed), so
		// the state is its alone. It runs on the lane's own goroutine:
		// the step that asks for it is the move record's last chunk,
		// which tryHere may be running on the transport's delivery
		// goroutine, and a slow Restore there would hold up every item
		// behind it on the link. serial.next runs it right after this
		// step, before any input queued meanwhile, and Restored comes
		// back as the next input: the machine sees its inputs in the
		// order it would have had the restore run here (the chunk's step
		// ends with this action and sends nothing; the move's records
		// that the link brings later queue behind the restore on the
		// lane, as they would behind a restore run here). The rest of
		// what the link brings meanwhile needs no restore done: the
		// object's messages wait in the incoming owner's hold, which the
		// Prepare registered on the delivery goroutine itself (a new
		// move's lane is idle), and other objects' have nothing to do
		// with the move. On the lane's goroutine already, next costs no
		// hand-off. (In a turn of the owner it would cost the move a
		// hand-off to a dispatcher goroutine every time, which a starved
		// host pays in scheduler quanta while the object's messages pile
		// up at its source.)
		rec := a.Record
		d.lane.next(func() { d.advance(relocation.Restored{Err: d.restore(rec)}) })
	case relocation.DiscardTempQueue:
		d.discardTemp(nil, a.Reason)
	case relocation.StoreNewOwner:
		d.storeOp = &a
	case relocation.OpenQueue:
		d.open(a)
	case relocation.DeliverLate:
		d.t.log.Warn("relocation: relays after the commit delivered late", "object", d.obj.String(), "messages", len(a.Frames))
		o, frames := d.o, a.Frames
		d.later(func() {
			for _, f := range frames {
				if e := d.t.owners.envelopeOf(f); e != nil {
					if _, _, err := d.t.router.admit(o, e, admitOverflow); err != nil {
						d.t.router.redispatch(e)
					}
				}
			}
		})
	case relocation.Forget:
		// The follow window ended: records of the move that come later
		// find none (a relay goes on to the object's owner).
		d.ended = true
		d.t.removeMove(d)
	case relocation.Abandon:
		d.discardTemp(append(append([][]byte(nil), a.Captured...), a.Relayed...), a.Reason)
	case relocation.Finish:
		d.finish(a)
	case relocation.Log:
		d.t.peerLogs.relocation.Info(d.t.log, "relocation: "+a.Msg, "object", d.obj.String(), "peer", d.peer)
	}
	return nil
}
