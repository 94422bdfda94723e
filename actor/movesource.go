package actor

import (
	"strconv"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The mover part, the source side: the start and the seal with the
// capture (in the owner's lifecycle turns), the hold that makes the move
// final (takeHeld), its end (finish) and what Close drops of it.
//
// Owns: nothing beyond the moveDriver's fields.
// May call: the owners' methods (seal, drain, leave, reopen), peers,
// requests (the asks a dropped move ends), routes, the router, the leaves.
// Invariants: the Capture runs in the owner's turn; past relay-ready the
// source never reopens, and its object is never activated here again
// until the move ends.

// startSource runs in a lifecycle turn of the owner: it reads the object's
// row (before it takes its place on the move's lane: the lane does not
// wait for the store) and starts the source machine with the preflight.
func (d *moveDriver) startSource() {
	ctx, cancel := d.t.life.storeContext()
	row, err := d.t.store.Get(ctx, d.obj)
	cancel()
	d.lane.runHere(func() {
		if d.ended {
			return
		}
		if err != nil || row.Host != d.t.name {
			d.ended = true
			d.o.moving.Store(false)
			d.t.removeMove(d)
			d.logEnd(MoveRefused, "the store does not show this host as the owner", 0, false)
			d.done <- &payload.Error{Kind: payload.Unavailable, Op: "actor.Host.Relocate", Detail: "the store does not show this host as the owner", Err: err}
			return
		}
		d.row = row.Ownership
		d.src = relocation.NewSource(relocation.SourceConfig{Move: d.id, Object: d.obj, Source: d.t.name, Target: d.peer,
			Owner: row.Ownership, AppVersion: d.t.cfg.AppVersion})
		d.advance(relocation.Start{})
	})
}

// sealAndCapture runs in a lifecycle turn of the owner, so no application
// turn runs: the seal takes effect at this turn boundary, and the move
// record is built now, and only now (the machine's SealAndCapture). The
// owner's receive order freezes with the seal: what arrives from now on is
// held unchecked, and checked where the object opens. A capture that fails
// aborts the move (the machine reopens the owner).
func (d *moveDriver) sealAndCapture() {
	var relieved bool
	o := d.o
	var flushErr error
	if o.gate != nil {
		// A persistent object's writes are durable, and its outputs gone,
		// before its state leaves: once the target owns it, no write of
		// this host lands.
		flushErr = o.gate.flushAll()
	}
	d.lane.runHere(func() {
		if d.src == nil || d.ended {
			return
		}
		relieved = o.sealForMove()
		now := d.t.nanotime()
		d.clock.Sealed(now)
		if f := d.t.times; f != nil {
			f(d.id, false, now)
		}
		rec, err := relocation.MoveRecord{}, flushErr
		if err == nil {
			rec, err = d.capture()
		}
		if err != nil {
			d.t.log.Error("relocation: capture failed; aborting", "object", d.obj.String(), "err", err)
			d.abortErr = err
			d.advance(relocation.CaptureFailed{Err: err})
			return
		}
		d.advance(relocation.Captured{Record: rec})
	})
	if relieved { // a send: off the move's lane
		o.sendPushes()
	}
}

// capture takes the unexecuted queue (undecoded; it passed the order
// check), the order state with its held messages, and the state.
func (d *moveDriver) capture() (relocation.MoveRecord, error) {
	o := d.o
	queued, held, extra := o.drainForMove(d.t.nanotime())
	d.captured, d.held = queued, held
	var rec relocation.MoveRecord
	if d.kr.def().policy == PreserveState && o.ready {
		st, err := d.kr.def().capture(o.state)
		if err != nil {
			return rec, err
		}
		rec.State = st
	}
	rec.Queue = frames(d.captured)
	rec.Extra = extra
	if n := rec.EncodedLen(); int64(n) > d.t.cfg.MaxMoveRecord {
		// Not an error of the state's kind: the move cannot carry it.
		return rec, payload.NewError(payload.CapacityExceeded, "actor.Host.Relocate",
			"the move record of "+d.obj.String()+" would be "+strconv.Itoa(n)+" bytes, more than MaxMoveRecord ("+
				strconv.FormatInt(d.t.cfg.MaxMoveRecord, 10)+")")
	}
	d.t.captured.Add(int64(len(rec.Queue)))
	return rec, nil
}

// takeHeld makes the move final at the source: the object leaves this
// host's owners (for the forwarding route InstallFollow put in place just
// before), then the mailbox closes and what was held is taken for the
// relay. Past relay-ready the source never reopens, so the held and
// captured items end here — and the messages its order held, which the
// move record carries: their frames are copied out for the relays
// (records outlive this host's buffers) and the items released, returning
// their permits.
func (d *moveDriver) takeHeld() [][]byte {
	mt, o := d.t, d.o
	// Until the move ends, the store still names this run: the object is
	// never activated here again meanwhile (router.activate).
	d.kr.leave(o, leavingMove{id: d.id, to: d.peer, gen: d.followGen()})
	late, copies := o.closeBox()
	held := append(d.held, late...)
	out := make([][]byte, 0, len(held))
	for _, e := range held {
		if e.Msg != nil {
			out = append(out, append([]byte(nil), e.Msg.Frame()...))
		}
	}
	// Releasing gives permits back, which may admit a waiting send at once
	// (a look-up, a send): after the driver's lock.
	done := append(append(held, copies...), d.captured...)
	// Past relay-ready these messages are the target's, in the move record
	// or the relays: a request of this host among them is failed with the
	// target (requests.go).
	to := mt.view.runOf(d.peer)
	for _, e := range done {
		if e.Msg == nil {
			continue
		}
		if op, mine := mt.requests.own(e.Msg); mine {
			mt.requests.handedTo(op, to)
		}
	}
	d.later(func() {
		for _, e := range done {
			e.Release()
		}
	})
	d.held, d.captured = nil, nil
	mt.relayed.Add(int64(len(out)))
	return out
}

// finish ends the move on this host.
func (d *moveDriver) finish(f relocation.Finish) {
	if d.tgt != nil && f.Outcome == relocation.Moved {
		return // the target owns the object; the driver stays until Forget
	}
	d.ended = true
	d.t.removeMove(d)
	if d.src != nil {
		d.departed()
		var err error
		out, reason := MoveDone, f.Reason
		switch f.Outcome {
		case relocation.Moved:
			d.t.moved.Add(1)
			reason = ""
		case relocation.NotStarted:
			out = MoveRefused
			err = payload.NewError(payload.Rejected, "actor.Host.Relocate", f.Reason)
		case relocation.Aborted:
			out = MoveAborted
			detail := "move aborted: " + f.Reason
			if d.abortErr != nil {
				// errors.Is finds the capture's own error (its kind) too.
				detail = "move aborted: the capture failed"
				reason = "the capture failed: " + d.abortErr.Error()
			}
			err = &payload.Error{Kind: payload.Unavailable, Op: "actor.Host.Relocate", Detail: detail, Err: d.abortErr}
		case relocation.Abandoned:
			out = MoveAbandoned
			err = payload.NewError(payload.Rejected, "actor.Host.Relocate", "move abandoned: "+f.Reason)
		case relocation.Lost:
			out = MoveLost
			err = payload.NewError(payload.DataLost, "actor.Host.Relocate", f.Reason)
		}
		if f.Outcome == relocation.Moved || f.Outcome == relocation.Lost || f.Outcome == relocation.Abandoned {
			// The messages went with the move record and the relays.
			done := append(d.captured, d.held...)
			d.later(func() {
				for _, e := range done {
					e.Release()
				}
			})
			d.captured, d.held = nil, nil
			d.o.state = nil
			d.t.obs.Deactivated(d.kr.def().name)
			d.t.owners.system.Root.Stop(d.o.pid)
		} else {
			d.o.moving.Store(false)
		}
		var pause time.Duration
		paused := false
		if f.Outcome == relocation.Moved {
			pause, paused = d.clock.Pause(d.t.nanotime())
		}
		d.logEnd(out, reason, pause, paused)
		d.done <- err
		return
	}
	if f.Outcome != relocation.Moved && d.o != nil && !d.conflict {
		d.t.obs.Deactivated(d.kr.def().name)
		d.t.owners.system.Root.Stop(d.o.pid)
	}
}

// departed ends the source's hold on its object's id (takeHeld): the
// target committed (the store names it), or the move ended without it.
func (d *moveDriver) departed() { d.kr.departed(d.obj.ID, d.id) }

// followGen is the owner generation the object has once this move (from
// here) commits: the forwarding route's.
func (d *moveDriver) followGen() uint64 { return d.row.OwnerGen + 1 }

// logEnd notes in the host's move log the end of this move from here
// (its pause, if paused).
func (d *moveDriver) logEnd(out MoveOutcome, reason string, pause time.Duration, paused bool) {
	e := MoveEntry{Ref: Ref{Kind: d.obj.Kind, ID: d.obj.ID}, From: d.t.name, To: d.peer, Started: d.started,
		Ended: time.Now(), Pause: pause, Outcome: out, Reason: reason}
	d.t.record.ended(&e, paused)
}

// abandonOnClose ends a move when its host closes: a waiting Relocate gets
// ShuttingDown; envelopes the move held are ended. It returns how many
// application messages it ended unrun (Stats.DroppedOnClose).
func (d *moveDriver) abandonOnClose() (dropped int) {
	var unrun []*mailbox.Envelope
	var o *owner
	ended := false
	d.lane.runHere(func() {
		if d.ended {
			ended = true
			return
		}
		d.ended = true
		d.markOver()
		d.t.removeMove(d)
		unrun = append(d.captured, d.held...)
		d.captured, d.held = nil, nil
		if d.done != nil {
			d.logEnd(MoveClosed, "the host closed", 0, false)
			d.done <- ErrShuttingDown
		}
		o = d.o
	})
	if ended {
		return 0
	}
	for _, e := range unrun { // replies are sends: off the move's lane
		if isApplication(e) {
			dropped++
		}
		d.t.router.endUnrun(o, "", e, ErrShuttingDown, RejectShuttingDown)
	}
	// The owner the move holds may have left the owner map already (a
	// source past relay-ready): Close's sweeps do not see it, so its actor
	// stops here, or Close would wait for it for ever. (A second Stop of
	// an owner Close does see is harmless.)
	if o != nil && o.pid != nil {
		d.t.owners.system.Root.Stop(o.pid)
	}
	return dropped
}
