package actor

import (
	"context"
	"errors"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
)

// Routing between hosts (docs/architecture.md, "Relocation", "Order, routing and transports"; the rules are package route's).
//
// Where an object runs is decided by the Location Store. A host looks an
// object up in this order: its own owners; its route table (forwarding
// routes of objects that moved away from it, kept for FollowDuration —
// Message Follow — and cached look-ups, at most RouteCacheTTL old); the
// store. An object with no live owner is reserved and activated where the
// message is (one activation per object across the hosts sharing the
// store). Store calls run outside every lock, one at a time per object
// (singleflight).
//
// A message at a host the object is not on goes to the newest owner that
// host knows (route.Forward): a move's target tells every host the object
// left recently where it went, so that is one hop, not a chain. A
// forwarded message keeps its stamp, operation id, reply route and
// deadline; each hop raises its owner generation. A host forwards only
// towards a newer generation than the message has already been sent
// towards; when it knows none, it asks the store; when the store knows
// none either (the object is mid-move), or after MaxHops, the message goes
// back to its origin, which looks the object up afresh and sends it again.
// A message is never dropped for routing reasons while every host is up;
// one that went back to its origin MaxBounces times ends with Unavailable
// (counted: Stats.Dropped), and a skip notice closes its gap.

// Defaults for routing.
const (
	DefaultFollowDuration = 30 * time.Second
	DefaultRouteCacheTTL  = 15 * time.Second
	// MaxHops is Message Follow's loop guard: a message forwarded this
	// often goes back to its origin to be routed afresh.
	MaxHops = route.MaxHops
)

// flagError marks a reply frame that carries an error.
const flagError uint8 = 2

// place is where an object runs: a local owner, or another host.
type place struct {
	o    *owner
	host string
	gen  uint64 // the owner generation the route knows (0: unknown)
	// stored: the place comes from the store, not the route table.
	stored bool
}

// routeHint tells a host where an object runs now.
type routeHint struct {
	host string
	gen  uint64
}

// peerLive reports whether host holds a live lease of generation gen.
func (rt *router) peerLive(host string, gen uint64) bool {
	h := rt.h
	ctx, cancel := h.storeContext()
	defer cancel()
	l, ok, err := h.store.Lease(ctx, host)
	return err == nil && ok && l.Gen == gen && l.Remaining > 0 // by the store's clock: no clocks compared
}

// locate returns where object id of the kind runs, activating it here when
// no live host owns it (one activation per object across the store).
func (kr *kindRuntime) locate(id string, mode lookupMode) (place, error) {
	if p, ok := kr.locateCached(id); ok {
		return p, nil
	}
	return kr.lookup(id, mode)
}

// locateCached is locate without the store: it finds a local owner or a
// route to another host, and reports false where locate would ask the
// store.
func (kr *kindRuntime) locateCached(id string) (place, bool) {
	if o := kr.local(id); o != nil {
		return place{o: o}, true
	}
	h := kr.host
	if e, ok := h.routes.lookup(relocation.Object{Kind: kr.spec.name, ID: id}); ok && e.Host != h.name {
		return place{host: e.Host, gen: e.Gen}, true
	}
	return place{}, false
}

// lookup asks the store where object id runs, and activates it here if no
// live host owns it. Concurrent look-ups of one object on this host share
// one store call; no lock is held across it.
func (kr *kindRuntime) lookup(id string, mode lookupMode) (place, error) {
	key := kr.spec.name + "\x00" + id
	if mode != fromOutside {
		key += "\x00" + string(rune('0'+mode))
	}
	v, err, _ := kr.host.router.lookups.Do(key, func() (any, error) { return kr.resolve(id, mode) })
	if err != nil {
		return place{}, err
	}
	return v.(place), nil
}

func (kr *kindRuntime) resolve(id string, mode lookupMode) (place, error) {
	h := kr.host
	if o := kr.local(id); o != nil {
		return place{o: o}, nil
	}
	if (mode == fromOutside && !h.acceptsExternal()) || (mode != fromOutside && !h.acceptsInternal()) {
		return place{}, ErrShuttingDown
	}
	obj := relocation.Object{Kind: kr.spec.name, ID: id}
	ctx, cancel := h.storeContext()
	defer cancel()
	row, err := h.store.Get(ctx, obj)
	switch {
	case err == nil && row.State != relocation.Preserved && row.Host != h.name && h.router.peerLive(row.Host, row.LeaseGen):
		h.routes.learn(obj, row.Host, row.OwnerGen, false)
		return place{host: row.Host, gen: row.OwnerGen, stored: true}, nil
	case err != nil && !errors.Is(err, relocation.ErrNoRow):
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "location store", Err: err}
	}
	// A row that is not Preserved and names no live host but this one
	// (which has no owner for it): its owner crashed (or was this host's
	// previous run), and an activation takes the object over.
	takeover := err == nil && row.State != relocation.Preserved
	if h.cfg.Gateway {
		// Never here: the kind's placement among the hosts that serve it.
		other := h.router.placeNew(kr.spec, id)
		if other == "" || other == h.name {
			return place{}, payload.NewError(payload.Unavailable, "actor", "no host serves kind "+kr.spec.name+" (this host is a gateway)")
		}
		h.routes.learn(obj, other, 0, false)
		return place{host: other, stored: true}, nil
	}
	if h.drainer.draining.Load() {
		if other := h.peers.pickHost(kr.spec.name); other != "" {
			return place{host: other, stored: true}, nil
		}
	} else if mode != fromLink {
		// A send from this host activates the object where the kind's
		// placement says; that host activates it (fromLink).
		if other := h.router.placeNew(kr.spec, id); other != "" && other != h.name {
			// Later sends from here go the same way (a cached route) until
			// the store names the owner: a second look-up before the
			// activation is committed would place it again, maybe
			// elsewhere (the store then keeps one, at the cost of a hop).
			h.routes.learn(obj, other, 0, false)
			return place{host: other, stored: true}, nil
		}
	}
	// The activation itself is one flight per object on this host, whatever
	// the look-ups' modes: two of them (a local send and a message off a
	// link) must not both reserve and commit.
	v, err, _ := h.router.lookups.Do(kr.spec.name+"\x00"+id+"\x00activate", func() (any, error) { return kr.activate(id, takeover) })
	if err != nil {
		return place{}, err
	}
	return v.(place), nil
}

// activate reserves and commits object id for this host in the store and
// installs its owner; if another live host owns it, it returns that host.
// takeover: its row named a crashed owner (its gaps are messages that
// died with it: TakeoverGapTimeout).
func (kr *kindRuntime) activate(id string, takeover bool) (place, error) {
	h := kr.host
	if o := kr.local(id); o != nil {
		return place{o: o}, nil // a flight that ended just before this one
	}
	obj := relocation.Object{Kind: kr.spec.name, ID: id}
	ctx, cancel := h.storeContext()
	defer cancel()
	row, err := h.store.Reserve(ctx, obj, h.name)
	if err == nil {
		row, err = h.store.Commit(ctx, obj, row.Ownership)
	}
	if err != nil {
		var ce *relocation.ConflictError
		if errors.As(err, &ce) && ce.Current.Host != "" && ce.Current.Host != h.name {
			h.routes.learn(obj, ce.Current.Host, ce.Current.OwnerGen, false)
			return place{host: ce.Current.Host, gen: ce.Current.OwnerGen, stored: true}, nil
		}
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "cannot activate " + obj.String(), Err: err}
	}
	var snap route.Snapshot
	if len(row.Order) > 0 {
		if snap, err = route.DecodeSnapshot(row.Order); err != nil {
			h.log.Warn("order state in the store row is malformed; starting without it", "object", obj.String(), "err", err)
		}
	}
	sh := kr.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o := sh.m[id]; o != nil {
		return place{o: o}, nil // an incoming move's owner, or a racing activation
	}
	o := h.owners.newOwner(kr.spec, kr, Ref{Kind: kr.spec.name, ID: id})
	o.row = row.Ownership
	o.prev = sh.passivating[id]
	if takeover {
		// The crashed owner is a failure fact for this object (not yet
		// published: no lock needed).
		o.inbox.TakenOver(nanotime(), h.gaps.factWindow(), int64(h.cfg.TakeoverGapTimeout))
	}
	if len(snap.Senders) > 0 {
		o.restoreOrderLocked(snap, nanotime()) // not yet published: no lock needed
	}
	if sh.m == nil {
		sh.m = map[string]*owner{}
	}
	sh.m[id] = o
	return place{o: o}, nil
}

// sendRemote hands m, a message this host sends to t's object, to the
// transport for host, stamping it first (once). Tell completes here: the
// transport accepted it. With a non-nil ctx (a send from outside the
// handlers) it first waits for room on the link. If the host is gone or
// leaving, errHostGone is returned (the caller looks the object up
// again); on any failure m stays the caller's.
func (ad *admission) sendRemote(ctx context.Context, host string, t target, m *payload.Message) error {
	h := ad.h
	if mx := h.peers.view.maxMessage(host); mx > 0 && int64(m.Len()) > mx {
		return mailbox.ErrTooLarge // the destination's lanes are smaller than this host's
	}
	if ctx != nil {
		if err := h.peers.waitRoom(ctx, host, len(m.Frame())); err != nil {
			return err
		}
	}
	if h.peers.backlogged(host) {
		return ErrPeerBacklog // not stamped: no gap is left
	}
	h.admit.stamp(t, m)
	return h.peers.sendMessage(host, m, transport.Frame)
}

// malformedItem drops an item off a link that does not decode (counted as
// a protocol rejection). A lost hint is advice; a lost record is recovered
// by the relocation protocol; a lost control item ends its Relocate by the
// caller's deadline.
func (pr *peers) malformedItem(from string, err error) {
	h := pr.h
	h.obs.Rejected("", RejectProtocol)
	h.peerLogs.malformed.Warn(h.log, "malformed item from a link dropped", "from", from, "err", err)
}

// bounced takes back a frame this host sent that its destination left
// before receiving: it is routed again (replies and messages alike).
func (iq *inbounds) bounced(buf payload.Buffer) {
	h := iq.h
	hv, _, err := payload.DecodeHeader(buf.Bytes())
	if err != nil || !h.acceptsInternal() {
		h.obs.Rejected("", RejectUndeliverable)
		buf.Release()
		return
	}
	if hv.Flags()&flagReply != 0 {
		buf.Release() // the asker left; nobody waits for this reply
		return
	}
	h.redispatchBuffer(buf)
}

// onFrame handles a message or reply frame from peer from.
func (iq *inbounds) onFrame(ib *inbound, from string, buf payload.Buffer) {
	h := iq.h
	// The header is decoded once, by Open; only a frame that Open refuses
	// is decoded again, to tell a malformed header from a reply or an
	// unknown content type.
	m, err := h.reg.Open(buf)
	if err != nil {
		h.in.onUnopened(from, buf, err)
		return
	}
	hv := m.Header()
	if hv.Flags()&flagReply != 0 {
		op, flags := hv.Op(), hv.Flags()
		h.requests.onReply(op, flags, m.TakeBuffer())
		return
	}
	if hv.Scope() == payload.ScopeObject && hv.Hops() == 0 && string(hv.Origin()) != from {
		// A frame not forwarded yet comes from its origin: a peer's
		// link is authenticated as that peer (transport/tcp), and the
		// origin orders the object's messages, so a first-hop frame
		// naming another origin is refused (back to the peer, if it
		// asked for an answer there).
		h.obs.Rejected("", RejectProtocol)
		h.peerLogs.malformed.Warn(h.log, "frame on its first hop naming another origin than the peer it came from dropped",
			"from", from, "origin", string(hv.Origin()))
		if string(hv.ReplyTo()) == from {
			h.router.failFrame(hv.ReplyTo(), hv.Op(), payload.NewError(payload.ProtocolError, "actor",
				"a message on its first hop must name the sending host ("+from+") as its origin"))
		}
		m.Release()
		return
	}
	kr := h.owners.kinds[string(hv.TargetName())]
	if kr == nil || hv.Scope() != payload.ScopeObject {
		h.router.failMessage(m, payload.NewError(payload.NotFound, "actor", "host "+h.name+" has no kind "+string(hv.TargetName())))
		return
	}
	// What this host keeps of the peer's messages is bounded
	// (peerbudget.go): past the bound the message is refused, and a
	// stamped one's skip notice goes its way instead.
	m, skip := h.in.takeFromPeer(ib, kr, m)
	if m == nil {
		return
	}
	hv = m.Header()     // m may be the skip notice in its place now
	n := budgetBytes(m) // what it counts in the budget
	id := string(hv.TargetID())
	// A forwarded message names the host that sent it first: its
	// sequence numbers order the object's messages, and each origin takes
	// a place in the object's order state. Only a member takes one —
	// asked afresh on the slow lane when this host's view does not know
	// it yet (it may have joined a moment ago) — so an object's senders
	// are bounded by the membership.
	var unknown string
	if o := hv.Origin(); string(o) != from && !h.peers.view.known(string(o)) {
		unknown = string(o)
	}
	if unknown != "" || kr.local(id) == nil {
		// Where the object runs may take a store call (or a forward that
		// needs one): that runs on the link's slow lane, so that a slow
		// store never stalls the messages behind it for objects that are
		// here. Order between the two ways is restored by the messages'
		// sequence numbers.
		ib.slow.add(func() {
			switch {
			case unknown != "" && !h.peers.knownHost(unknown):
				h.in.unknownOrigin(from, m)
			case h.in.routeIn(ib, kr, id, m, n, skip):
				return // it waits for a permit, in the budget
			}
			ib.budget.release(n, skip)
		})
		return
	}
	// The object is here: admit it (the permit source keeps the order of
	// the messages off this link; admission finds the owner again).
	h.in.admitIn(ib, kr, id, m, n, skip)
}

// unknownOrigin drops message m from peer from, forwarded in the name of
// an origin the membership does not know: counted, logged (rate-limited),
// a request answered with ProtocolError — and no skip notice, which would
// give the unknown origin a place in the object's order state.
func (iq *inbounds) unknownOrigin(from string, m *payload.Message) {
	h := iq.h
	hv := m.Header()
	h.obs.Rejected(string(hv.TargetName()), RejectProtocol)
	h.peerLogs.malformed.Warn(h.log, "forwarded frame naming an origin that is no member dropped",
		"from", from, "origin", string(hv.Origin()))
	if route := hv.ReplyTo(); len(route) > 0 {
		h.requests.routeReply(route, hv.Op(), reply{err: payload.NewError(payload.ProtocolError, "actor",
			"the message names an origin that is no member of the cluster")})
	}
	m.Release()
}

// onUnopened handles a frame from peer from that Open refused (err): a
// malformed header is dropped, a reply goes to its asker (who decodes it),
// a message is failed back to its sender.
func (iq *inbounds) onUnopened(from string, buf payload.Buffer, err error) {
	h := iq.h
	hv, _, herr := payload.DecodeHeader(buf.Bytes())
	switch {
	case herr != nil:
		h.obs.Rejected("", RejectProtocol)
		h.peerLogs.malformed.Warn(h.log, "malformed frame from a link dropped", "from", from, "err", herr)
		buf.Release()
	case hv.Flags()&flagReply != 0:
		h.requests.onReply(hv.Op(), hv.Flags(), buf)
	default:
		h.router.dropped(&hv)
		h.router.failFrame(hv.ReplyTo(), hv.Op(), err)
		buf.Release()
	}
}

// onReply completes the request op with a reply frame from a link.
func (rq *requestTable) onReply(op payload.OpID, flags uint8, buf payload.Buffer) {
	h := rq.h
	if flags&flagError != 0 {
		rerr := decodeWireError(h, buf)
		buf.Release()
		h.requests.complete(op, reply{err: rerr})
		return
	}
	h.requests.complete(op, reply{buf: buf})
}

// admitIn queues message m from a peer (ib) for object id to be admitted
// here, in order behind the earlier ones; it counts n bytes in the peer's
// budget (a skip notice's allowance if skip) until its admission begins.
func (iq *inbounds) admitIn(ib *inbound, kr *kindRuntime, id string, m *payload.Message, n int64, skip bool) {
	ps := &pendingSend{m: m, relayed: true, bytes: uint32(n), skip: skip} // n ≤ budgetBytes(…)
	ps.one[0] = target{kr: kr, id: id}
	ps.targets = ps.one[:]
	ib.in.enqueue(ps)
}

// routeIn admits message m from a peer (ib) for object id here, or
// forwards it to where the object runs. It reports whether m went on to
// wait for a permit (admitIn), still counted as n bytes in the peer's
// budget; otherwise the caller counts it out.
func (iq *inbounds) routeIn(ib *inbound, kr *kindRuntime, id string, m *payload.Message, n int64, skip bool) bool {
	h := iq.h
	p, err := kr.locate(id, fromLink)
	if err != nil {
		if errors.Is(err, ErrShuttingDown) {
			h.router.backOrFail(m, err) // this host is closing: the origin routes it again
			return false
		}
		h.router.failMessage(m, err)
		return false
	}
	if p.o != nil || !ib.in.idle() {
		// Admit here — or, if earlier messages off this link still wait
		// for permits, queue behind them even to be forwarded, so that
		// none overtakes another.
		h.in.admitIn(ib, kr, id, m, n, skip)
		return true
	}
	// A forward goes onto the link to the object's host: wait (on this
	// slow lane, whose messages stay in the peer's budget meanwhile) for
	// room there, so that what the peer sends through this host is
	// bounded by that link's flow control and the peer's budget — at most
	// SendTimeout, then it goes all the same (nothing is dropped for it).
	h.in.waitLinkRoom(p.host)
	h.router.forward(kr, id, m, p)
	return false
}

// waitLinkRoom waits until the link to host has room (Transport.WaitRoom),
// at most SendTimeout, or until this host closes.
func (iq *inbounds) waitLinkRoom(host string) {
	h := iq.h
	if host == "" || h.peers.tr.WaitRoom(doneCtx, host) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.life.ctx, h.cfg.SendTimeout)
	defer cancel()
	_ = h.peers.tr.WaitRoom(ctx, host)
}

// forward hands a message on towards where its object runs now (Message
// Follow, route.Forward), keeping its identity, stamp, reply route and
// deadline; it tells the message's origin where the object is.
func (rt *router) forward(kr *kindRuntime, id string, m *payload.Message, p place) {
	h := rt.h
	obj := relocation.Object{Kind: kr.spec.name, ID: id}
	for try := 0; ; try++ {
		hv := m.Header()
		hop := route.Hop{Hops: hv.Hops(), Gen: hv.Generation(), Bounces: bouncesOf(hv.Flags())}
		d := route.Forward(hop, route.Entry{Host: p.host, Gen: p.gen}, !p.stored, h.name)
		if d.Action == route.Resolve {
			if !p.stored {
				var ok bool
				if p, ok = h.router.lookupAgain(kr, id, m); !ok {
					return
				}
			}
			// The look-up activates an object that no live host owns, so
			// the store's answer names another host.
			d = route.Placed(hop, p.host, p.gen, h.name)
		}
		switch {
		case d.Action == route.Fail:
			h.router.failMessage(m, payload.NewError(payload.Unavailable, "actor", obj.String()+" moved too often to be reached"))
			return
		case d.Action == route.ToOrigin, d.Host == h.name:
			h.router.backOrFailBounded(m, hop, payload.NewError(payload.Unavailable, "actor", "no route to "+obj.String()))
			return
		}
		origin := string(hv.Origin()) // m is gone once sent
		err := h.router.sendHop(m, d.Host, hop.Hops+1, d.Gen)
		if err == nil {
			h.stats.forwarded.Add(1)
			if origin != "" && origin != h.name && origin != d.Host {
				h.peers.sendHint(origin, obj, d.Host, d.Gen)
			}
			return
		}
		if errors.Is(err, ErrPeerBacklog) {
			// The next host does not take what this host sends it: no
			// look-up helps. A skip notice waits for room (its gap has
			// no other fact to close it while every host is up).
			if hv.Flags()&flagSkip == 0 || !h.gaps.deferSkip(m) {
				h.router.failMessage(m, err)
			}
			return
		}
		// The host is leaving or gone: look again (routes to it are gone).
		if try == 3 && hv.Flags()&flagSkip != 0 && h.gaps.deferSkip(m) {
			// A skip notice is the only fact that closes its gap while
			// every host is up: it waits until the object is handed on.
			return
		}
		if try == 3 {
			h.router.backOrFailBounded(m, hop, payload.NewError(payload.Unavailable, "actor", "host "+d.Host+" is not reachable"))
			return
		}
		var ok bool
		if p, ok = h.router.lookupAgain(kr, id, m); !ok {
			return
		}
	}
}

// lookupAgain forgets this host's routes for object id and asks the store
// where it runs. If it runs here (or the look-up fails), m is admitted
// (or sent back to its origin) and ok is false; otherwise the caller
// sends m to the returned place.
func (rt *router) lookupAgain(kr *kindRuntime, id string, m *payload.Message) (p place, ok bool) {
	h := rt.h
	h.routes.forget(relocation.Object{Kind: kr.spec.name, ID: id}, true)
	p, err := kr.lookup(id, fromLink)
	switch {
	case err != nil:
		h.router.backOrFail(m, err)
		return p, false
	case p.o != nil:
		h.router.admitHere(p.o, m)
		return p, false
	}
	return p, true
}

// backOrFail sends m back to its origin (sendBack), or ends it with err if
// this host is closing.
func (rt *router) backOrFail(m *payload.Message, err error) {
	h := rt.h
	if !h.router.sendBack(m) {
		h.router.failMessage(m, err)
	}
}

// backOrFailBounded is backOrFail for a message that already went back
// to its origin hop.Bounces times: at MaxBounces it ends with err instead
// (a message of this host comes back here at once, so without the bound a
// route that stays broken would loop).
func (rt *router) backOrFailBounded(m *payload.Message, hop route.Hop, err error) {
	h := rt.h
	if hop.Bounces >= route.MaxBounces {
		h.router.failMessage(m, err)
		return
	}
	h.router.backOrFail(m, err)
}

// sendHop sends m on to host as one more hop, towards owner generation
// gen. On failure m stays the caller's, unchanged.
func (rt *router) sendHop(m *payload.Message, host string, hops uint8, gen uint64) error {
	h := rt.h
	hv := m.Header()
	oldHops, oldGen := hv.Hops(), hv.Generation()
	_ = payload.SetForward(m.Frame(), hops, gen)
	if err := h.peers.sendMessage(host, m, transport.Frame); err != nil {
		_ = payload.SetForward(m.Frame(), oldHops, oldGen)
		return err
	}
	return nil
}

// admitHere admits a forwarded or re-routed message to a local owner; if
// the owner closed meanwhile, it is routed again.
func (rt *router) admitHere(o *owner, m *payload.Message) {
	h := rt.h
	e := newEnvelope(m)
	for try := 0; ; try++ {
		_, _, err := o.admit(e, admitOverflow)
		if err == nil {
			return
		}
		var p place
		hv := m.Header()
		kr := h.owners.kinds[string(hv.TargetName())]
		if try < 3 {
			p, err = kr.locate(string(hv.TargetID()), fromLink)
		} else {
			err = payload.NewError(payload.Unavailable, "actor", "owner closed")
		}
		if err == nil && p.o != nil {
			o = p.o
			continue
		}
		e.Msg = nil
		e.Release()
		if err != nil {
			h.router.failMessage(m, err)
		} else {
			h.router.forward(kr, string(hv.TargetID()), m, p)
		}
		return
	}
}

// sendBack sends m back to its origin, which routes it afresh (onBounce).
// If this host is the origin, or the origin takes no messages any more
// (it left), this host routes it afresh itself. It reports false (m stays
// the caller's) if this host is closing.
func (rt *router) sendBack(m *payload.Message) bool {
	h := rt.h
	if h.peers.tr == nil || !h.acceptsInternal() {
		return false
	}
	hv := m.Header()
	if origin := string(hv.Origin()); origin != "" && origin != h.name {
		if h.peers.sendMessage(origin, m, transport.Bounce) == nil {
			return true
		}
	}
	h.router.onBounce(m.TakeBuffer())
	return true
}

// onBounceFrom takes a bounce off the link from peer from: a message of
// this host (its origin) coming back to be routed afresh. A bounce of
// another origin's message is dropped, counted: routing it here would
// send it on as this host's own, in another host's name.
func (iq *inbounds) onBounceFrom(from string, buf payload.Buffer) {
	h := iq.h
	if hv, _, err := payload.DecodeHeader(buf.Bytes()); err != nil || string(hv.Origin()) != h.name {
		h.obs.Rejected("", RejectProtocol)
		h.peerLogs.malformed.Warn(h.log, "bounce of a message this host did not send dropped", "from", from)
		buf.Release()
		return
	}
	h.router.onBounce(buf)
}

// onBounce routes afresh a message of this host that came back (its
// route went round a loop, or past MaxHops, or through a host that left):
// the routes for its object are forgotten, it starts again at hop 0 with
// one more bounce, and an Ask whose deadline passed ends.
func (rt *router) onBounce(buf payload.Buffer) {
	h := rt.h
	h.stats.bouncedMsgs.Add(1)
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
	m, err := h.reg.Open(buf)
	if err != nil {
		h.router.dropped(&hv)
		buf.Release()
		return
	}
	hv2 := m.Header()
	if dl := hv2.DeadlineUnixNano(); dl != 0 && wallNano() > dl {
		h.router.failMessage(m, ErrRequestTimeout)
		return
	}
	if kr := h.owners.kinds[string(hv2.TargetName())]; kr != nil {
		h.routes.forget(relocation.Object{Kind: kr.spec.name, ID: string(hv2.TargetID())}, true)
	}
	h.redispatchMessage(m)
}

// sendHint tells host to that obj runs on host at with owner generation
// gen.
func (pr *peers) sendHint(to string, obj relocation.Object, at string, gen uint64) {
	h := pr.h
	_ = h.peers.sendItem(to, transport.Hint, appendHint(nil, obj, routeHint{host: at, gen: gen})) // advice: lost with a gone peer
}

// failMessage ends a message that cannot be delivered: a request gets err;
// a skip notice follows a stamped message.
func (rt *router) failMessage(m *payload.Message, err error) {
	h := rt.h
	hv := m.Header()
	h.router.dropped(hv)
	h.router.failFrame(hv.ReplyTo(), hv.Op(), err)
	m.Release()
}

func (rt *router) failFrame(route []byte, op payload.OpID, err error) {
	h := rt.h
	h.obs.Rejected("", RejectUndeliverable)
	if len(route) > 0 {
		h.requests.routeReply(route, op, reply{err: err})
	} else {
		h.peerLogs.undeliverable.Warn(h.log, "one-way message could not be delivered", "err", err)
	}
}

// wireError is how an error reply travels between hosts: its kind and
// text. Errors other than berth kinds arrive as their text only.
// wireError is a HandlerError between hosts.
type wireError struct {
	Kind  uint8    `json:"k"`
	Text  string   `json:"t"`
	Codes []string `json:"c,omitempty"`
}

func encodeWireError(h *Host, op payload.OpID, err error) (payload.Buffer, error) {
	he := handlerError(err)
	return payload.Encode(h.pool, h.reg, payload.Header{Op: op, Flags: flagReply | flagError},
		wireError{Kind: uint8(he.Kind), Text: he.Msg, Codes: he.Codes})
}

func decodeWireError(h *Host, buf payload.Buffer) error {
	m, err := h.reg.Open(buf.Retain())
	if err != nil {
		return err
	}
	defer m.Release()
	we, err := payload.Value[wireError](m)
	if err != nil {
		return err
	}
	k := payload.Kind(we.Kind)
	if k == 0 {
		k = payload.InternalFailure
	}
	return &HandlerError{Kind: k, Msg: we.Text, Codes: we.Codes}
}

// peerGone: a host left the network (stopped or killed).
func (iq *inbounds) peerGone(name string) {
	h := iq.h
	h.routes.forgetHost(name)
	h.gaps.pressure.resumeBy(name)
	h.moveEvent(name, relocation.TargetDead{})
	h.remotePeerGone(name)
}
