package actor

import (
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
)

// The router part, the terminal paths: a message that cannot go on goes
// back to its origin to be routed there (bounded), or fails — a request
// gets an error reply, a stamped message is announced dropped with a skip
// notice, the payload is released.
//
// Owns: nothing of its own.
// May call: requests (error replies), peers (bounces, skip notices), the
// owners (an item's kind and owner), gaps (messages waiting to be routed
// again), the leaves.
// Invariants: every message routed here ends once: delivered on, bounced,
// or failed with its sender told.

// backOrFail sends m back to its origin (sendBack), or ends it with err if
// this host is closing.
func (rt *router) backOrFail(m *payload.Message, err error) {
	if !rt.sendBack(m) {
		rt.failMessage(m, err)
	}
}

// backOrFailBounded is backOrFail for a message that already went back
// to its origin hop.Bounces times: at MaxBounces it ends with err instead
// (a message of this host comes back here at once, so without the bound a
// route that stays broken would loop).
func (rt *router) backOrFailBounded(m *payload.Message, hop route.Hop, err error) {
	if hop.Bounces >= route.MaxBounces {
		rt.failMessage(m, err)
		return
	}
	rt.backOrFail(m, err)
}

// sendBack sends m back to its origin, which routes it afresh (onBounce).
// If this host is the origin, or the origin takes no messages any more
// (it left), this host routes it afresh itself. It reports false (m stays
// the caller's) if this host is closing.
func (rt *router) sendBack(m *payload.Message) bool {
	if rt.peers.tr == nil || !rt.life.acceptsInternal() {
		return false
	}
	hv := m.Header()
	if origin := string(hv.Origin()); origin != "" && origin != rt.name {
		if rt.peers.sendMessage(origin, m, transport.Bounce) == nil {
			return true
		}
	}
	rt.onBounce(m.TakeBuffer())
	return true
}

// onBounce routes afresh a message of this host that came back (its
// route went round a loop, or past MaxHops, or through a host that left):
// the routes for its object are forgotten, it starts again at hop 0 with
// one more bounce, and an Ask whose deadline passed ends.
func (rt *router) onBounce(buf payload.Buffer) {
	rt.bouncedMsgs.Add(1)
	b := buf.Bytes()
	hv, _, err := payload.DecodeHeader(b)
	if err != nil {
		buf.Release()
		return
	}
	bounces := bouncesOf(hv.Flags())
	if bounces < route.MaxBounces {
		bounces++
	}
	_ = payload.SetFlags(b, hv.Flags()&^bounceMask|bounces<<bounceShift)
	_ = payload.SetForward(b, 0, 0)
	m, err := rt.reg.Open(buf)
	if err != nil {
		rt.dropped(&hv)
		buf.Release()
		return
	}
	hv2 := m.Header()
	if dl := hv2.DeadlineUnixNano(); dl != 0 && wallNano() > dl {
		rt.failMessage(m, ErrRequestTimeout)
		return
	}
	if kr := rt.owners.kind(string(hv2.TargetName())); kr != nil {
		rt.routes.forget(relocation.Object{Kind: kr.def().name, ID: string(hv2.TargetID())}, true)
	}
	rt.redispatchMessage(m)
}

// failMessage ends a message that cannot be delivered: a request gets err;
// a skip notice follows a stamped message. A skip notice that found no
// way for now (err Unavailable) waits to be routed again (waitToRoute):
// nothing else closes its gap while every host is up.
func (rt *router) failMessage(m *payload.Message, err error) {
	hv := m.Header()
	if hv.Flags()&flagSkip != 0 {
		if payload.KindOf(err) == payload.Unavailable && rt.gaps.waitToRoute(m) {
			return
		}
		rt.skipsLost.Add(1)
		if rt.life.acceptsInternal() {
			rt.peerLogs.undeliverable.Warn(rt.log, "a skip notice could not be delivered: its gap waits for a failure fact", "object", string(hv.TargetName())+"/"+string(hv.TargetID()), "err", err)
		}
		m.Release()
		return
	}
	rt.dropped(hv)
	rt.failFrame(hv.ReplyTo(), hv.Op(), err)
	m.Release()
}

func (rt *router) failFrame(route []byte, op payload.OpID, err error) {
	rt.obs.Rejected("", RejectUndeliverable)
	if len(route) > 0 {
		rt.requests.routeReply(route, op, reply{err: err})
	} else {
		rt.peerLogs.undeliverable.Warn(rt.log, "one-way message could not be delivered", "err", err)
	}
}

// dropped is called when this host ends a stamped message without
// delivering it to its object (a routing failure, a rejected send): it
// sends a skip notice with the message's stamp after it, so that the
// owner does not wait for it. Best effort: a skip notice that cannot be
// placed ends, and its gap waits for a failure fact.
func (rt *router) dropped(hv *payload.HeaderView) {
	if buf, ok := rt.skipNotice(hv); ok {
		rt.redispatchBuffer(buf)
	}
}

// skipNotice returns the skip notice of a stamped message this host
// drops, counted (Stats.Dropped); false for a message that needs none.
func (rt *router) skipNotice(hv *payload.HeaderView) (payload.Buffer, bool) {
	if hv.Seq() == 0 || hv.Flags()&flagSkip != 0 || hv.Scope() != payload.ScopeObject || !rt.life.acceptsInternal() {
		return payload.Buffer{}, false
	}
	rt.droppedMsgs.Add(1)
	buf, err := payload.Encode(rt.pool, rt.reg, payload.Header{
		Type:   "berth.skip",
		Target: payload.Target{Scope: payload.ScopeObject, Name: string(hv.TargetName()), ID: string(hv.TargetID())},
		Op:     hv.Op(),
		Flags:  flagSkip,
		Origin: string(hv.Origin()),
		Epoch:  hv.Epoch(),
		Seq:    hv.Seq(),
	}, struct{}{})
	return buf, err == nil
}

// reject ends an item that was never admitted (the sender gets the error;
// a stamped one is announced dropped).
func (rt *router) reject(kind string, e *mailbox.Envelope, reason string) {
	rt.obs.Rejected(kind, reason)
	if e.Msg != nil {
		rt.dropped(e.Msg.Header())
	}
	e.Release()
}

// endUnrun ends an admitted or granted item that will not run: a request
// gets err as its reply; the payload is released undecoded; a stamped one
// is announced dropped.
func (rt *router) endUnrun(o *owner, kind string, e *mailbox.Envelope, err error, reason string) {
	if o != nil {
		kind = o.spec.name
	}
	rt.obs.Rejected(kind, reason)
	if e.Msg != nil {
		hv := e.Msg.Header()
		rt.dropped(hv)
		if route := hv.ReplyTo(); len(route) > 0 {
			rt.requests.routeReply(route, hv.Op(), reply{err: err})
		}
	}
	e.Release()
}
