package actor

import (
	"errors"
	"runtime/debug"
	"slices"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// The mover part, the target side: the incoming owner (sealed, its
// messages held: the temporary queue), the restore, the opening, and the
// discard of an abandoned move's owner.
//
// Owns: nothing beyond the moveDriver's fields.
// May call: the owners' methods (add, open, remove), routes, peers, the
// router, the leaves.
// Invariants: the incoming owner runs nothing until the opening; what it
// held goes on, in order, to wherever the object runs if the move is
// abandoned.

// registerTemp installs the incoming owner, sealed: messages sent here
// directly wait in its hold — the temporary queue.
func (d *moveDriver) registerTemp() {
	o := d.kr.addIncoming(d.obj.ID)
	if o == nil {
		d.conflict = true
		return
	}
	d.o = o
	// The owner is found before any route from now on: the routes this
	// host kept for the object are dropped after the shard's lock.
	d.t.routes.forget(d.obj, true)
}

// restore rebuilds the state through the kind's policy; nothing runs yet.
func (d *moveDriver) restore(rec relocation.MoveRecord) error {
	if d.conflict || d.o == nil {
		return errors.New("host " + d.t.name + " already hosts " + d.obj.String())
	}
	o := d.o
	snap, err := route.DecodeSnapshot(rec.Extra)
	if err != nil {
		return err
	}
	d.snap = snap
	if d.kr.def().persist && len(rec.State) == 0 {
		// The source had not made the state yet (its activation ran no
		// turn): the store holds the object's last durable state, which
		// the first turn here loads.
		return nil
	}
	var st any
	func() {
		defer func() {
			if r := recover(); r != nil {
				d.t.log.Error("restore panicked", "object", d.obj.String(), "panic", r, "stack", string(debug.Stack()))
				err = payload.NewError(payload.InternalFailure, "actor", "restore panicked")
			}
		}()
		if d.kr.def().policy == PreserveState && d.kr.def().restore != nil && len(rec.State) > 0 {
			st, err = d.kr.def().restore(&o.ctx, d.obj.ID, rec.State)
		} else {
			st, err = d.kr.def().factory(&o.ctx, d.obj.ID)
		}
	}()
	if err != nil {
		return err
	}
	o.state, o.ready = st, true
	return nil
}

// open makes the target the owner: captured work, the relays, then the
// temporary queue, in that order — the relays and the temporary queue
// checked against the order state that came with the record. Then every
// host the object left recently learns where it went.
func (d *moveDriver) open(a relocation.OpenQueue) {
	mt, o := d.t, d.o
	mt.events.count(EventMovedIn, d.peer, 1)
	o.row = a.Owner
	o.epoch.Store(d.epoch)
	var captured, unchecked []*mailbox.Envelope
	for _, f := range a.Captured {
		if e := mt.owners.envelopeOf(f); e != nil {
			captured = append(captured, e)
		}
	}
	for _, f := range a.Relayed {
		if e := mt.owners.envelopeOf(f); e != nil {
			unchecked = append(unchecked, e)
		}
	}
	// Told where the object runs now: the hosts it left recently (they
	// forward to here, not down a chain) and the hosts that sent to it
	// recently (they send here, not to where it was).
	tell, after := o.openAfterMove(d.snap, d.peer, captured, unchecked, d.t.nanotime())
	d.snap = route.Snapshot{}
	opened := d.t.nanotime()
	d.clock.Opened(opened)
	if f := d.t.times; f != nil {
		f(d.id, true, opened)
	}
	mt.moved.Add(1)
	obj, gen := d.obj, a.Owner.OwnerGen
	d.later(func() {
		mt.router.orderDone(o, after)
		for i, host := range tell {
			if host != mt.name && host != d.peer && !slices.Contains(tell[:i], host) {
				mt.peers.sendHint(host, obj, mt.name, gen)
			}
		}
	})
}

// discardTemp drops the incoming owner; the messages it held (and extra,
// for an abandoned move) go on, after the driver's lock, to wherever the
// object runs.
func (d *moveDriver) discardTemp(extra [][]byte, reason string) {
	if d.o == nil || d.conflict {
		return
	}
	o := d.o
	d.kr.remove(o)
	queued, outOfOrder := o.closeBox()
	held := append(queued, outOfOrder...)
	o.state, o.ready = nil, false
	d.t.tallies.queueDiscard.Add(d.t.log, int64(len(held)), "object", d.obj.String(), "reason", reason, "messages", len(held))
	d.later(func() {
		for _, e := range held {
			d.t.router.redispatch(e)
		}
		for _, f := range extra {
			d.t.router.redispatchFrame(f)
		}
	})
}

func frames(items []*mailbox.Envelope) [][]byte {
	out := make([][]byte, 0, len(items))
	for _, e := range items {
		if e.Msg != nil {
			out = append(out, e.Msg.Frame())
		}
	}
	return out
}
