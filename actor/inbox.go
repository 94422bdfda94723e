package actor

import (
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/route"
)

// The owner's receive side (owner.admit and the order snapshot of a
// move), driving its route.Inbox.
//
// Owns: nothing of its own: it runs on the owner's fields guarded by
// owner.seqMu (the Inbox: open, frozen or shut; the senders' order).
// Lock: owner.seqMu, taken after ownerShard.mu and before mailbox.mu and
// ownerTable.heldMu; nothing that can call back into admission (a permit
// given back) runs under it.
// May call: the owner's mailbox, gaps, peers (pushback), requests
// (replies to asks the order ends), the leaves; what
// a step sets free that does not run here (strays) goes back to its caller
// (the router routes it again).
// Invariants: per sender and object, messages run in the order they were
// stamped; a message that arrives early waits (bounded) for the ones
// before it; a gap closes only on a fact (a skip notice, a failure fact
// past its wait).

// Order per sending host (docs/architecture.md, "Order, routing and transports"; the rules are package route's).
//
// With a transport, every message a host sends to an object is stamped — its
// origin (this host), an epoch and a sequence number per object — in the
// step that routes it (stamp), and keeps that stamp however it travels:
// forwarded, relayed, captured in a move record, sent back to its origin.
// Each object owner runs arrivals through its route.Inbox (owner.admit),
// which decides; this file carries its steps out: a message whose turn
// has come enters the mailbox, then those held behind it; one ahead of its
// turn is held, encoded and undecoded, without its job permit; a skip
// notice (a frame with flagSkip, sent by whichever host dropped a stamped
// message: dropped) closes its gap at once. A gap nobody closes waits —
// however long — until a failure fact covers it: the membership reports a
// host gone (failed), or the object was taken over from a crashed owner;
// then it closes after Config.GapTimeout (TakeoverGapTimeout for a
// takeover), counted (Stats.GapsClosed). A sender past the reorder bound
// is logged and counted; nothing is released out of order for it.
//
// While an owner is sealed for a move, or is a move's incoming owner,
// its inbox is frozen: arrivals go to the mailbox's hold unchecked, and
// are checked where the object opens (the target, or the source after an
// abort). The order state travels in the move record, and rests in the
// Location Store row while the object is deactivated.
//
// Hosts without a transport stamp nothing: objects never move there.

// streamIdle is how long a host keeps an idle sending stream; owners keep
// an idle sender's state twice as long (route.Order.Forget), so a sender
// always forgets first.

const (
	// admitWait: lane limits apply; when full, the caller gets ErrFull and
	// a channel to wait on.
	admitWait admitHow = iota
	// admitInline: as admitWait, and an idle owner runs the turn on the
	// calling goroutine (Config.InlineAsk).
	admitInline
	// admitOverflow: no lane limits (the item was granted its permit
	// asynchronously, or comes from a link or a move).
	admitOverflow
)

// Failure facts (route.Fact): what lets a gap close.

// admitHow says how an item enters its owner.
type admitHow uint8

// admit runs e, an application item for owner o, through the owner's
// inbox and admits it (see the top of this file). Nothing that can call
// back into an admission (returning a permit: Permits.Release may grant it
// to a waiting source at once) happens under seqMu. ran and room are those
// of the mailbox's AdmitOrRun and AdmitOrWait. On an error nothing changed
// and e stays the caller's; otherwise e is the owner's (held, or admitted,
// or — a skip notice — ended).
func (o *owner) admit(e *mailbox.Envelope, how admitHow) (ran bool, room <-chan struct{}, stray []*mailbox.Envelope, err error) {
	if o.t.cfg.IdleTimeout > 0 {
		// Idleness counts from the last accepted message (the coarse clock
		// ticks only with a transport).
		if o.t.peers.tr != nil {
			o.lastActive.Store(o.t.routes.coarseNow())
		} else {
			o.lastActive.Store(o.t.nanotime())
		}
	}
	hv := e.Msg.Header()
	st := route.Stamp{Epoch: hv.Epoch(), Seq: hv.Seq()}
	if st.IsZero() || o.kr == nil {
		ran, room, err := o.admitBox(e, how)
		return ran, room, nil, err
	}
	// The origin's bytes are lent by the frame, which may be released as
	// soon as e is admitted: keep a copy (on the stack).
	var originBuf [64]byte
	origin := append(originBuf[:0], hv.Origin()...)
	skip := hv.Flags()&flagSkip != 0
	again := sentAgain(hv.Flags())
	now := o.t.routes.coarseNow()

	o.seqMu.Lock()
	var claimed bool
	var a orderAfter
	switch step, over := o.inbox.Offer(origin, st, skip, again, e, now); step {
	case route.StepRefuse:
		o.seqMu.Unlock()
		return false, nil, nil, mailbox.ErrClosed
	case route.StepKeep:
		// Sealed for a move, or incoming: the hold keeps it, unchecked.
		err = o.mb.AdmitOverflow(e)
		o.seqMu.Unlock()
		return false, nil, nil, err
	case route.StepHeld:
		if p := e.TakePermit(); p != nil {
			a.permits = append(a.permits, p)
		}
		if over {
			a.over = true
			if o.pushBackLocked(origin) {
				a.pushTo, a.push = string(origin), true
			}
		}
	case route.StepSkipped:
		a.stray = append(a.stray, e)
	case route.StepRepeat:
		a.repeats = append(a.repeats, e)
	default:
		if how == admitInline {
			claimed, room, err = o.mb.AdmitOrClaim(e)
		} else {
			room, err = o.admitBoxRoom(e, how)
		}
		if err != nil {
			o.seqMu.Unlock()
			return false, room, nil, err
		}
		o.inbox.Admitted(origin, st, now)
	}
	o.readyLocked(&a, nil)
	o.seqMu.Unlock()
	stray = o.finishOrder(a)
	if claimed {
		o.mb.RunClaimed(e)
		return true, nil, stray, nil
	}
	return false, nil, stray, nil
}

// admitBox admits an item that is not ordered.
func (o *owner) admitBox(e *mailbox.Envelope, how admitHow) (bool, <-chan struct{}, error) {
	if how == admitInline {
		return o.mb.AdmitOrRun(e)
	}
	room, err := o.admitBoxRoom(e, how)
	return false, room, err
}

func (o *owner) admitBoxRoom(e *mailbox.Envelope, how admitHow) (<-chan struct{}, error) {
	if how == admitOverflow {
		return nil, o.mb.AdmitOverflow(e)
	}
	return o.mb.AdmitOrWait(e)
}

// orderAfter is what an order step leaves for after the owner's seqMu:
// items to end (skip notices taken in) or to route again (the owner closed
// meanwhile); permits of held messages to give back; the gaps given up on.
type orderAfter struct {
	stray      []*mailbox.Envelope
	repeats    []*mailbox.Envelope // messages sent again that the owner has already (ran, or held): dropped
	permits    []*mailbox.Permits
	gapsClosed uint64 // sequence numbers given up on, for the log (counted in readyLocked)
	over       bool   // the sender is past the reorder bound
	pushTo     string // a sender told to pause, for the log (pressure.go)
	push       bool   // pauses or resumes queued: send them (owner.sendPushes)
}

// readyLocked takes the held messages whose turn came, in order: skip
// notices (taken in now) go to a.stray to be ended; the others are
// admitted — or, with into, appended to *into (the mailbox reopens with
// them). The counts and the held gauge are noted before any of them is
// admitted, so that a reply from a released message finds them already
// (seqMu, still held, keeps the admissions in order).
func (o *owner) readyLocked(a *orderAfter, into *[]*mailbox.Envelope) {
	var buf [8]*mailbox.Envelope
	ready := buf[:0]
	for {
		e, ok := o.inbox.Next()
		if !ok {
			break
		}
		if e.Msg.Header().Flags()&flagSkip != 0 {
			a.stray = append(a.stray, e)
			continue
		}
		ready = append(ready, e)
	}
	c := o.inbox.Order().TakeCounts()
	if c.GapsClosed > 0 {
		o.t.gapsClosed.Add(int64(c.GapsClosed))
	}
	if c.Late > 0 {
		o.t.late.Add(int64(c.Late))
	}
	if c.Repeats > 0 {
		o.t.repeats.Add(int64(c.Repeats))
	}
	a.gapsClosed += c.GapsClosed
	o.noteHeldLocked()
	for _, e := range ready {
		switch {
		case into != nil:
			*into = append(*into, e)
		case o.mb.AdmitOverflow(e) != nil:
			a.stray = append(a.stray, e)
		}
	}
	if len(ready) > 0 && into == nil {
		if f := o.t.afterRelease.Load(); f != nil {
			(*f)()
		}
	}
	if o.relievedLocked(false) {
		a.push = true
	}
}

// finishOrder finishes an order step outside the owner's lock: permits
// given back, counts, pushback; it returns the strays (messages whose
// object is not here), for the caller to route again.
func (o *owner) finishOrder(a orderAfter) (stray []*mailbox.Envelope) {
	for _, p := range a.permits {
		p.Release()
	}
	if a.over {
		o.t.gaps.overBound(o.ref, a.pushTo)
	}
	if a.push {
		o.sendPushes()
	}
	if a.gapsClosed > 0 { // counted in readyLocked
		o.t.tallies.gapsGivenUp.Add(o.t.log, int64(a.gapsClosed), "object", o.ref.String(), "messages", a.gapsClosed)
	}
	for _, e := range a.repeats {
		// It came here from the old run's link already (it ran, or is
		// held to run), and an Ask's answer may have gone to the old run:
		// the new run, which waits for it, learns at once that it may have
		// run (ErrRejoined); a later answer finds the request ended. Not
		// o.reply: that is the running turn's (a persistent owner's gate
		// holds it for the turn's write), and this runs on the admitting
		// goroutine, outside any turn, promising nothing durable.
		if hv := e.Msg.Header(); len(hv.ReplyTo()) > 0 {
			o.t.requests.routeReply(hv.ReplyTo(), hv.Op(), reply{err: ErrRejoined})
		}
		e.Release()
	}
	for _, e := range a.stray {
		if e.Msg.Header().Flags()&flagSkip != 0 {
			e.Release()
			continue
		}
		stray = append(stray, e)
	}
	return stray
}

// noteHeldLocked records, with o.seqMu held, how many messages o holds
// out of order now: the host's gauge and its list of owners with gaps.
// Lock order: seqMu, then Host.heldMu.
func (o *owner) noteHeldLocked() {
	n := o.inbox.Held()
	if o.heldCount == n {
		return
	}
	o.t.heldMu.Lock()
	o.t.heldOut.Add(int64(n - o.heldCount))
	o.heldCount = n
	if n > 0 {
		if o.t.held == nil {
			o.t.held = map[*owner]struct{}{}
		}
		o.t.held[o] = struct{}{}
	} else {
		delete(o.t.held, o)
	}
	o.t.heldMu.Unlock()
}

// openOrderLocked thaws the owner's inbox: items (already checked, in
// order) go first, then each of unchecked (relayed or held, in arrival
// order) is offered; then the mailbox opens with all of them in order.
// With seqMu held; the caller finishes with orderDone.
func (o *owner) openOrderLocked(items, unchecked []*mailbox.Envelope) orderAfter {
	now := o.t.routes.coarseNow()
	var a orderAfter
	o.inbox.Thaw()
	for _, e := range unchecked {
		hv := e.Msg.Header()
		st := route.Stamp{Epoch: hv.Epoch(), Seq: hv.Seq()}
		switch step, over := o.inbox.Offer(hv.Origin(), st, hv.Flags()&flagSkip != 0, sentAgain(hv.Flags()), e, now); step {
		case route.StepHeld:
			if p := e.TakePermit(); p != nil {
				a.permits = append(a.permits, p)
			}
			if over {
				a.over = true
				if o.pushBackLocked(hv.Origin()) {
					a.push = true
					if a.pushTo == "" {
						a.pushTo = string(hv.Origin())
					}
				}
			}
			continue
		case route.StepSkipped:
			a.stray = append(a.stray, e)
		case route.StepRepeat:
			a.repeats = append(a.repeats, e)
		case route.StepAdmit:
			o.inbox.Admitted(hv.Origin(), st, now)
			items = append(items, e)
		default: // shut meanwhile: route it again
			a.stray = append(a.stray, e)
			continue
		}
		o.readyLocked(&a, &items)
	}
	o.mb.Reopen(items)
	o.readyLocked(&a, nil) // the counts, and what is held now
	return a
}

// orderSnapshotLocked encodes the owner's order state and trail (move
// record, store row); with seqMu held.
func (o *owner) orderSnapshotLocked(now int64) []byte {
	snap := o.inbox.Order().Snapshot(now, func(e *mailbox.Envelope) []byte { return e.Msg.Frame() })
	snap.Trail = o.trail.Snapshot(now)
	snap.Takeover = o.inbox.Takeover(now)
	if len(snap.Senders) == 0 && len(snap.Trail) == 0 && snap.Takeover == (route.TakeoverAge{}) {
		return nil
	}
	return route.AppendSnapshot(nil, snap)
}

// restoreOrderLocked takes in an order snapshot (already decoded); with
// seqMu held. Held frames are copied in (the boundary copy).
func (o *owner) restoreOrderLocked(snap route.Snapshot, now int64) {
	o.inbox.Order().Restore(snap, now, func(_ uint64, frame []byte) (*mailbox.Envelope, bool) {
		e := o.t.envelopeOf(frame)
		return e, e != nil
	})
	o.trail.Restore(snap.Trail, now)
	o.inbox.RestoreTakeover(snap.Takeover, now)
}

// sealForMove freezes o's receive side and seals its mailbox for a move's
// seal, and reports whether senders it pushed back on are relieved (the
// target pushes back again if it must); the caller sends the resumes
// (sendPushes) after it.
func (o *owner) sealForMove() (relieved bool) {
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	o.inbox.Freeze()
	o.mb.Seal()
	return o.relievedLocked(true)
}

// drainForMove takes o's unexecuted queue and what arrived after the seal
// (both in order), and the order state with its held messages, encoded,
// at now: what a move's capture carries.
func (o *owner) drainForMove(now int64) (queued, held []*mailbox.Envelope, order []byte) {
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	queued, held = o.mb.Drain()
	return queued, held, o.orderSnapshotLocked(now)
}

// reopenAfterMove opens o's receive side again after a move from here
// aborted: captured (checked) and held (unchecked) go back in order before
// what its mailbox holds. The caller finishes the order (router.orderDone)
// with what it returns.
func (o *owner) reopenAfterMove(captured, held []*mailbox.Envelope) orderAfter {
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	return o.openOrderLocked(captured, append(held, o.mb.TakeHeld()...))
}

// openAfterMove opens o, the target's new owner, at now: its order state
// restored from snap, from (the source) added to its trail, the captured
// and unchecked messages (then what waited in its hold) taken in order. It
// returns the hosts to tell where the object runs now — those it left
// recently and those that sent to it recently — and what the caller
// finishes the order with (router.orderDone).
func (o *owner) openAfterMove(snap route.Snapshot, from string, captured, unchecked []*mailbox.Envelope, now int64) (tell []string, after orderAfter) {
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	o.restoreOrderLocked(snap, now)
	o.trail.Add(from, now+int64(o.t.cfg.FollowDuration))
	for _, t := range o.trail.Live(now) {
		tell = append(tell, t.Host)
	}
	tell = o.inbox.Order().SenderNames(tell)
	o.incoming.Store(false)
	return tell, o.openOrderLocked(captured, append(unchecked, o.mb.TakeHeld()...))
}

// closeGaps gives up, at now, on the gaps of o's senders that facts
// cover, and reports whether it did; the caller finishes the order with
// what it returns (router.orderDone).
func (o *owner) closeGaps(now int64, facts []route.Fact) (after orderAfter, closed bool) {
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	if o.inbox.CloseGaps(now, facts) == 0 {
		return after, false
	}
	o.readyLocked(&after, nil)
	return after, true
}

// oldestGap returns o's oldest gap at now, if it has one, and the hosts
// its object left recently (which it may wait for).
func (o *owner) oldestGap(now int64) (g route.Gap, awaited []string, ok bool) {
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	if g, ok = o.inbox.Order().OldestGap(now); !ok {
		return g, nil, false
	}
	for _, t := range o.trail.Live(now) {
		awaited = append(awaited, t.Host)
	}
	return g, awaited, true
}

// pushBackLocked notes, with o.seqMu held, that sender is past o's
// reorder bound; when the sender was not told already, it queues the
// pause and reports true: the caller calls sendPushes after the lock.
func (o *owner) pushBackLocked(sender []byte) bool {
	if o.pushed == nil {
		o.pushed = map[string]struct{}{}
	}
	if _, ok := o.pushed[string(sender)]; ok {
		return false
	}
	o.pushed[string(sender)] = struct{}{}
	o.pushQ = append(o.pushQ, pushAdvice{sender: string(sender), pause: true})
	return true
}

// relievedLocked queues, with o.seqMu held, a resume for each pushed
// sender that may go on: its held messages are back to half the bound, or
// (all) the inbox is not open any more. It reports whether it queued one:
// the caller calls sendPushes after the lock.
func (o *owner) relievedLocked(all bool) bool {
	if len(o.pushed) == 0 {
		return false
	}
	queued := false
	ord := o.inbox.Order()
	for s := range o.pushed {
		if all || o.inbox.State() != route.Open || ord.HeldOf([]byte(s)) <= o.t.cfg.ReorderBound/2 {
			o.pushQ = append(o.pushQ, pushAdvice{sender: s})
			delete(o.pushed, s)
			queued = true
		}
	}
	return queued
}

// sendPushes sends o's queued advice in the order it was decided: one
// goroutine at a time sends, and takes what others queue meanwhile. Not
// under seqMu (it takes it between batches).
func (o *owner) sendPushes() {
	o.seqMu.Lock()
	if o.pushing { // the sender of the queue takes what we queued
		o.seqMu.Unlock()
		return
	}
	o.pushing = true
	for len(o.pushQ) > 0 {
		q := o.pushQ
		o.pushQ = nil
		yield := o.yieldBeforePush
		o.seqMu.Unlock()
		if yield != nil {
			yield()
		}
		for _, p := range q {
			o.t.peers.push(o.ref, p.sender, p.pause)
		}
		o.seqMu.Lock()
	}
	o.pushing = false
	o.seqMu.Unlock()
}
