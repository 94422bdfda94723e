package actor

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
)

// The inbound part (inbounds): what comes from other hosts.
//
// Owns: the transport's handler (hostHandler) and the dispatch of every
// item it delivers: frames and replies, bounces, hints, relocation
// records, control items, credit and pressure notices, link events.
// Lock: none of its own but the per-peer leaves; the transport's delivery
// goroutine takes only leaf locks, never calls the Location Store, never
// waits for a move and runs no code of a kind: a message whose object is
// not here goes to the peer's slow lane, a move's record to the move's own
// lane (whose restore, the user's Restore or factory, runs on the lane's
// own goroutine).
// May call: the mover and remote moves, admission, the router, the
// owners (a kind, an object here), requests, suspicions (a link down),
// peers and the leaves.
// Invariants: everything off a link is attributed to the authenticated
// peer, not to a name it carries; a malformed item is dropped and
// counted, never panics; a peer's messages are admitted in the order they
// arrived (its permit source), those for objects elsewhere in order on
// its slow lane.

// bounced takes back a frame this host sent that its destination left
// before receiving: it is routed again (replies and messages alike).
func (iq *inbounds) bounced(buf payload.Buffer) {
	hv, _, err := payload.DecodeHeader(buf.Bytes())
	if err != nil || !iq.life.acceptsInternal() {
		iq.obs.Rejected("", RejectUndeliverable)
		buf.Release()
		return
	}
	if hv.Flags()&flagReply != 0 {
		buf.Release() // the asker left; nobody waits for this reply
		return
	}
	iq.router.redispatchBuffer(buf)
}

// onFrame handles a message or reply frame from peer from.
func (iq *inbounds) onFrame(ib *inbound, from string, buf payload.Buffer) {
	// The header is decoded once, by Open; only a frame that Open refuses
	// is decoded again, to tell a malformed header from a reply or an
	// unknown content type.
	m, err := iq.reg.Open(buf)
	if err != nil {
		iq.onUnopened(from, buf, err)
		return
	}
	hv := m.Header()
	if hv.Flags()&flagReply != 0 {
		op, flags := hv.Op(), hv.Flags()
		iq.requests.onReply(op, flags, m.TakeBuffer())
		return
	}
	if hv.Scope() == payload.ScopeObject && hv.Hops() == 0 && string(hv.Origin()) != from {
		// A frame not forwarded yet comes from its origin: a peer's
		// link is authenticated as that peer (transport/tcp), and the
		// origin orders the object's messages, so a first-hop frame
		// naming another origin is refused (back to the peer, if it
		// asked for an answer there).
		iq.obs.Rejected("", RejectProtocol)
		iq.peerLogs.malformed.Warn(iq.log, "frame on its first hop naming another origin than the peer it came from dropped",
			"from", from, "origin", string(hv.Origin()))
		if string(hv.ReplyTo()) == from {
			iq.router.failFrame(hv.ReplyTo(), hv.Op(), payload.NewError(payload.ProtocolError, "actor",
				"a message on its first hop must name the sending host ("+from+") as its origin"))
		}
		m.Release()
		return
	}
	if hv.Scope() == payload.ScopeObject && hv.Hops() > 0 && iq.fromGateway(from, "forwarded frame") {
		// A gateway hosts no object, so it forwards none: a frame it
		// says it forwards would restate another host's origin.
		m.Release()
		return
	}
	kr := iq.owners.kind(string(hv.TargetName()))
	if kr == nil || hv.Scope() != payload.ScopeObject {
		iq.router.failMessage(m, payload.NewError(payload.NotFound, "actor", "host "+iq.name+" has no kind "+string(hv.TargetName())))
		return
	}
	// What this host keeps of the peer's messages is bounded
	// (peerbudget.go): past the bound the message is refused, and a
	// stamped one's skip notice goes its way instead.
	m, skip := iq.takeFromPeer(ib, kr, m)
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
	if o := hv.Origin(); string(o) != from && !iq.view.known(string(o)) {
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
			case unknown != "" && !iq.peers.knownHost(unknown):
				iq.unknownOrigin(from, m)
			case iq.routeIn(ib, kr, id, m, n, skip):
				return // it waits for a permit, in the budget
			}
			ib.budget.release(n, skip)
		})
		return
	}
	// The object is here: admit it (the permit source keeps the order of
	// the messages off this link; admission finds the owner again).
	iq.admitIn(ib, kr, id, m, n, skip)
}

// unknownOrigin drops message m from peer from, forwarded in the name of
// an origin the membership does not know: counted, logged (rate-limited),
// a request answered with ProtocolError — and no skip notice, which would
// give the unknown origin a place in the object's order state.
func (iq *inbounds) unknownOrigin(from string, m *payload.Message) {
	hv := m.Header()
	iq.obs.Rejected(string(hv.TargetName()), RejectProtocol)
	iq.peerLogs.malformed.Warn(iq.log, "forwarded frame naming an origin that is no member dropped",
		"from", from, "origin", string(hv.Origin()))
	if route := hv.ReplyTo(); len(route) > 0 {
		iq.requests.routeReply(route, hv.Op(), reply{err: payload.NewError(payload.ProtocolError, "actor",
			"the message names an origin that is no member of the cluster")})
	}
	m.Release()
}

// onUnopened handles a frame from peer from that Open refused (err): a
// malformed header is dropped, a reply goes to its asker (who decodes it),
// a message is failed back to its sender.
func (iq *inbounds) onUnopened(from string, buf payload.Buffer, err error) {
	hv, _, herr := payload.DecodeHeader(buf.Bytes())
	switch {
	case herr != nil:
		iq.obs.Rejected("", RejectProtocol)
		iq.peerLogs.malformed.Warn(iq.log, "malformed frame from a link dropped", "from", from, "err", herr)
		buf.Release()
	case hv.Flags()&flagReply != 0:
		iq.requests.onReply(hv.Op(), hv.Flags(), buf)
	default:
		iq.router.dropped(&hv)
		iq.router.failFrame(hv.ReplyTo(), hv.Op(), err)
		buf.Release()
	}
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
	p, err := iq.router.locate(kr, id, fromLink)
	if err != nil {
		switch {
		case errors.Is(err, ErrShuttingDown):
			iq.router.backOrFail(m, err) // this host is closing: the origin routes it again
		case payload.KindOf(err) == payload.Unavailable:
			// This host cannot place the object for now (the store out
			// of its reach, its own lease not renewed yet): the origin
			// routes the message again, within the bounce bound — it
			// is not dropped on a stall here.
			iq.router.backOrFailBounded(m, route.Hop{Bounces: bouncesOf(m.Header().Flags())}, err)
		default:
			iq.router.failMessage(m, err)
		}
		return false
	}
	if p.o != nil || !ib.in.idle() {
		// Admit here — or, if earlier messages off this link still wait
		// for permits, queue behind them even to be forwarded, so that
		// none overtakes another.
		iq.admitIn(ib, kr, id, m, n, skip)
		return true
	}
	// A forward goes onto the link to the object's host: wait (on this
	// slow lane, whose messages stay in the peer's budget meanwhile) for
	// room there, so that what the peer sends through this host is
	// bounded by that link's flow control and the peer's budget — at most
	// SendTimeout, then it goes all the same (nothing is dropped for it).
	iq.waitLinkRoom(p.host)
	iq.router.forward(kr, id, m, p)
	return false
}

// waitLinkRoom waits until the link to host has room (Transport.WaitRoom),
// at most SendTimeout, or until this host closes.
func (iq *inbounds) waitLinkRoom(host string) {
	if host == "" || iq.peers.tr.WaitRoom(doneCtx, host) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(iq.life.context(), iq.cfg.SendTimeout)
	defer cancel()
	_ = iq.peers.tr.WaitRoom(ctx, host)
}

// onBounceFrom takes a bounce off the link from peer from: a message of
// this host (its origin) coming back to be routed afresh. A bounce of
// another origin's message is dropped, counted: routing it here would
// send it on as this host's own, in another host's name.
func (iq *inbounds) onBounceFrom(from string, buf payload.Buffer) {
	if hv, _, err := payload.DecodeHeader(buf.Bytes()); err != nil || string(hv.Origin()) != iq.name {
		iq.obs.Rejected("", RejectProtocol)
		iq.peerLogs.malformed.Warn(iq.log, "bounce of a message this host did not send dropped", "from", from)
		buf.Release()
		return
	}
	iq.router.onBounce(buf)
}

// peerGone: a host left the network (stopped or killed).
func (iq *inbounds) peerGone(name string) {
	iq.routes.forgetHost(name)
	iq.pressure.resumeBy(name)
	iq.moves.moveEvent(name, relocation.TargetDead{})
	iq.moves.forgetPreflights(name)
	iq.moves.remotePeerGone(name)
}

// hostHandler receives what h's transport delivers. Items wait until the
// host has its transport (ready: Attach has returned), so that what they
// send back finds it; events do not wait (Attach reports the peers that
// are up while it runs) and send nothing.
type hostHandler struct {
	in       *inbounds
	attached *atomic.Bool // the host has its transport (peers.attached)
	ready    <-chan struct{}
}

// handler returns the transport.Handler of a new attachment, whose items
// wait for ready.
func (iq *inbounds) handler(attached *atomic.Bool) func(ready <-chan struct{}) transport.Handler {
	return func(ready <-chan struct{}) transport.Handler {
		return hostHandler{in: iq, attached: attached, ready: ready}
	}
}

// Deliver implements transport.Handler.
func (x hostHandler) Deliver(from string, it transport.Item) {
	if !x.attached.Load() {
		<-x.ready
	}
	x.in.deliver(from, it)
}

// Returned implements transport.Handler.
func (x hostHandler) Returned(to string, it transport.Item) {
	if !x.attached.Load() {
		<-x.ready
	}
	x.in.returned(to, it)
}

// Event implements transport.Handler.
func (x hostHandler) Event(e transport.Event) { x.in.linkEvent(e) }

// deliver handles one item from peer from, on the transport's goroutine
// for that peer. Its Data is lent for the call: a frame is copied into the
// host's payload pool (no allocation in the steady state).
func (iq *inbounds) deliver(from string, it transport.Item) {
	switch it.Kind {
	case transport.Frame:
		ib := iq.inboundFrom(from)
		taken := ib.budget.takenN.Load()
		iq.onFrame(ib, from, iq.keep(it))
		if ib.budget.takenN.Load() == taken { // not kept: settled at once (credit, peerbudget.go)
			ib.budget.unkept(budgetLen(len(it.Data)))
		}
	case transport.Reply:
		iq.onFrame(iq.inboundFrom(from), from, iq.keep(it))
	case transport.Bounce:
		iq.onBounceFrom(from, iq.keep(it))
	case transport.Record:
		if iq.fromGateway(from, it.Kind.String()) {
			return
		}
		decode := relocation.DecodeRecord // copies what it keeps: the bytes are lent
		if it.Owned {
			decode = relocation.DecodeRecordOwned // the bytes are this host's
		}
		obj, rec, err := decode(it.Data)
		if err != nil {
			iq.peers.malformedItem(from, err)
			return
		}
		iq.moves.onRecord(from, obj, rec)
	case transport.Hint:
		if iq.fromGateway(from, it.Kind.String()) {
			return
		}
		obj, hint, err := decodeHint(it.Data)
		if err != nil {
			iq.peers.malformedItem(from, err)
			return
		}
		iq.router.hint(obj, hint.host, hint.gen)
	case transport.Control:
		ctl, err := decodeControl(it.Data)
		if err != nil {
			iq.peers.malformedItem(from, err)
			return
		}
		switch c := ctl.(type) {
		case *loadReport:
			iq.view.setLoad(from, c.load)
			return
		case *pressureItem:
			if iq.fromGateway(from, "pause") {
				return
			}
			iq.onPressure(from, c)
			return
		case *creditReport:
			iq.onCredit(from, c)
			return
		case *creditAsk:
			iq.onCreditAsk(from)
			return
		}
		if iq.fromGateway(from, "control item") {
			return
		}
		iq.moves.onRemoteControl(from, ctl)
	default:
		iq.peers.malformedItem(from, payload.NewError(payload.ProtocolError, "actor", "item of unknown kind "+it.Kind.String()))
	}
}

// fromGateway reports whether from authenticated as a gateway
// (transport.RoleGateway), and if so drops its item of kind what, counted:
// a gateway sends messages, asks and replies (and its flow control and
// load report), nothing a node does — no relocation record, route hint,
// pause or relocation request. Only items other than frames ask.
func (iq *inbounds) fromGateway(from, what string) bool {
	if iq.peers.peerRole(from) != transport.RoleGateway {
		return false
	}
	iq.peers.malformedItem(from, payload.NewError(payload.Rejected, "actor",
		"a "+what+" from "+from+", whose certificate names it a gateway: a gateway sends messages, asks and replies only"))
	return true
}

// keep returns a frame item's bytes as a buffer of this host: adopted if
// the item is Owned, else copied into the payload pool (the bytes are
// lent).
func (iq *inbounds) keep(it transport.Item) payload.Buffer {
	if it.Owned {
		return iq.pool.Adopt(it.Data, nil)
	}
	return iq.pool.Copy(it.Data)
}

// returned takes back a frame this host sent to peer to that left before
// receiving it: a message is routed again, a reply dropped (the asker
// left).
func (iq *inbounds) returned(_ string, it transport.Item) {
	switch it.Kind {
	case transport.Frame, transport.Bounce:
		iq.bounced(iq.keep(it))
	}
}

// linkEvent applies a transport event.
func (iq *inbounds) linkEvent(e transport.Event) {
	switch e.Kind {
	case transport.Up:
		// The peer hears this host's load from the tick: no send
		// from here (this may run inside Attach, before Start has the
		// transport).
		iq.view.linkUp(e.Peer)
		iq.moves.moveEvent(e.Peer, relocation.LinkUp{})
	case transport.Down:
		iq.view.linkDown(e.Peer)
		iq.suspects.suspect(e.Peer) // a suspicion: the Location Store's lease decides
	case transport.Leaving:
		// The peer is about to leave: route to it no more by the caches
		// (ask the store again); what is on its way there is still taken.
		iq.view.linkLeaving(e.Peer)
		iq.routes.forgetHost(e.Peer)
	case transport.Gone:
		iq.view.linkGone(e.Peer)
		// A new run of the peer counts its credit here from zero.
		ib := iq.inboundFrom(e.Peer)
		ib.credit.reset()
		ib.budget.restart()
		iq.peerGone(e.Peer)
	}
}

// newRun starts every peer's credit and budget afresh for this host's new
// run (lease.go, newRun): its peers count the new run from zero.
func (iq *inbounds) newRun() {
	iq.m.Range(func(_, v any) bool {
		ib := v.(*inbound)
		ib.credit.reset()
		ib.budget.restart()
		return true
	})
}

// inbound is what this host keeps per peer: the permit source that
// admits the peer's messages in order, the slow lane for those whose
// object is not here, and the budget and credit of peerbudget.go.
type inbound struct {
	peer   string
	in     outbox
	slow   serial
	budget peerBudget // what of the peer's messages in and slow keep
	// credit is what this host sent the peer and the peer reported
	// settled; its window is this host's own until the peer reports its
	// (the hosts of a cluster are usually configured alike, and each
	// reports its window to a peer that came up).
	credit peerCredit
}

// inboundPending returns how many messages from peers wait for permits
// (one per peer that has any) or for their look-up on a slow lane.
func (iq *inbounds) inboundPending() int {
	n := 0
	iq.m.Range(func(_, v any) bool {
		ib := v.(*inbound)
		if !ib.in.idle() {
			n++
		}
		n += ib.slow.pending()
		return true
	})
	return n
}

// pending returns how many items wait on the links to or from this host,
// or on its slow lanes.
func (iq *inbounds) pending() int {
	in, out := iq.peers.tr.Pending()
	return in + out + iq.inboundPending()
}

// pendingIn returns how many items wait on, or are being handled off, the
// links to this host.
func (iq *inbounds) pendingIn() int {
	in, _ := iq.peers.tr.Pending()
	return in + iq.inboundPending()
}

// inbounds is what this host keeps per sending peer (inbound).
type inbounds struct {
	peerRefused atomic.Int64 // peers\' messages refused past their budget (Stats.PeerRefused)
	view        *peerView    // what this host knows of its peers (the peers' leaf)
	*hostEnv
	life     *lifecycle
	svc      *services
	store    relocation.Store
	pressure *pressureSet
	routes   *routes
	peers    *peers
	suspects *suspicions
	gaps     *gapFacts
	requests *requestTable
	owners   *ownerTable
	router   *router
	admit    *admission
	moves    *moveTable
	m        sync.Map                // per sending peer: *inbound
	last     atomic.Pointer[inbound] // the last inboundFrom's answer
}

// inboundFrom returns the inbound state of peer from, made on first use
// (a look-up takes no lock).
func (iq *inbounds) inboundFrom(from string) *inbound {
	if last := iq.last.Load(); last != nil && last.peer == from {
		return last // the peer of the last look-up: no hashing
	}
	v, ok := iq.m.Load(from)
	if !ok {
		ib := &inbound{peer: from, slow: serial{wg: iq.lanes}}
		ib.in.adm = iq.admit
		ib.in.budget = &ib.budget
		ib.budget.setLimits(iq.cfg.PeerInbound)
		ib.credit.winN.Store(int64(iq.cfg.PeerInbound.Items / 2))
		ib.credit.winB.Store(iq.cfg.PeerInbound.Bytes / 2)
		ib.budget.send = func(r *creditReport) {
			// Advice: lost with a gone peer, which counts afresh on that fact.
			_ = iq.peers.sendItem(from, transport.Control, appendControl(nil, r))
		}
		v, _ = iq.m.LoadOrStore(from, ib)
	}
	ib := v.(*inbound)
	iq.last.Store(ib) // only on a change of peer: the hit above stores nothing
	return ib
}

// creditAt returns this host's credit at peer (peerCredits).
func (iq *inbounds) creditAt(peer string) *peerCredit { return &iq.inboundFrom(peer).credit }

// reportWindow tells peer, which came up, this host's window for its
// messages (peerCredits; peerbudget.go).
func (iq *inbounds) reportWindow(peer string) { iq.inboundFrom(peer).budget.report(true) }

// takeFromPeer counts message m off ib's link, for an object of kind kr,
// in the peer's budget, and returns it with whether it is a skip notice
// taken in the skip notices' allowance. Past the bound it refuses m
// (refuseFromPeer) and returns the skip notice that takes its place, or
// nil when nothing is left to route: m needed no skip notice, or its skip
// notice was handed on here. A skip notice for an object here is taken in
// at once (it needs no permit, and its order keeps at most ReorderBound
// of them); one for an object elsewhere counts in the skip notices'
// allowance, and past that goes back to its origin to be routed there
// (never routed here: that may take a store call) — or, if this host is
// its origin or the origin is gone, is dropped, counted.
func (iq *inbounds) takeFromPeer(ib *inbound, kr *kindRuntime, m *payload.Message) (_ *payload.Message, skip bool) {
	if ib.budget.take(budgetBytes(m), false) {
		return m, false
	}
	s := iq.refuseFromPeer(ib, m)
	if s == nil {
		return nil, false
	}
	if o := kr.local(string(s.Header().TargetID())); o != nil {
		e := newEnvelope(s)
		if _, _, err := iq.router.admit(o, e, admitOverflow); err == nil {
			return nil, false
		}
		e.Msg = nil // the owner closed meanwhile: the skip notice goes the other way
		e.Release()
	}
	if ib.budget.take(budgetBytes(s), true) {
		return s, true
	}
	if origin := string(s.Header().Origin()); origin != iq.name && iq.peers.sendMessage(origin, s, transport.Bounce) == nil {
		return nil, false
	}
	iq.peerRefused.Add(1) // a gone origin's gaps close on that fact
	s.Release()
	return nil, false
}

// refuseFromPeer ends message m from ib's peer, past its budget: an Ask
// gets ErrPeerBacklog, the refusal is counted and logged (rate-limited),
// and a stamped message's skip notice is returned (nil if none), for the
// caller to route in m's place. m is released.
func (iq *inbounds) refuseFromPeer(ib *inbound, m *payload.Message) *payload.Message {
	hv := m.Header()
	iq.peerRefused.Add(1)
	iq.obs.Rejected(string(hv.TargetName()), RejectPeerBacklog)
	iq.peerLogs.backlog.Warn(iq.log, "message from a peer refused: this host keeps Config.PeerInbound of its messages already",
		"from", ib.peer, "messages", ib.budget.takenN.Load()-ib.budget.relN.Load())
	if route := hv.ReplyTo(); len(route) > 0 {
		iq.requests.routeReply(route, hv.Op(), reply{err: ErrPeerBacklog})
	}
	var skip *payload.Message
	if buf, ok := iq.router.skipNotice(hv); ok {
		if s, err := iq.reg.Open(buf); err == nil {
			skip = s
		} else {
			buf.Release()
		}
	}
	m.Release()
	return skip
}

// onCredit applies a credit report from peer from.
func (iq *inbounds) onCredit(from string, r *creditReport) {
	iq.creditAt(from).apply(r)
}

// onCreditAsk answers a peer that waits for credit.
func (iq *inbounds) onCreditAsk(from string) {
	iq.inboundFrom(from).budget.asked()
}

// onPressure applies a pressure item from peer from.
func (iq *inbounds) onPressure(from string, p *pressureItem) {
	if !p.paused {
		iq.pressure.resume(p.obj, from)
		return
	}
	// Only for an object this host sends to (a sending stream: it stamped
	// a message for it lately), only from the object's owner, and a
	// bounded number per peer: a member cannot pause sends this host does
	// not make, nor another member's object, nor make it keep pauses
	// without end.
	if !iq.routes.sending(p.obj) {
		iq.refusePause(from, p.obj, payload.ProtocolError, "this host sends nothing to it")
		return
	}
	switch iq.pauserOwns(from, p.obj) {
	case ownsYes:
		iq.takePause(from, p.obj)
	case ownsNo:
		iq.refusePause(from, p.obj, payload.Rejected, "this host runs the object itself")
	default:
		// The routes name another owner or none (the pause may have come
		// before the forwarder's route hint): the Location Store decides.
		if !iq.pressure.check(p.obj, from) {
			iq.refusePause(from, p.obj, payload.CapacityExceeded,
				"it has "+strconv.Itoa(maxPauseChecksPerPeer)+" pauses waiting for the Location Store here already")
			return
		}
		lane := &serial{wg: iq.lanes}
		lane.add(func() { iq.checkPause(from, p.obj) })
	}
}

// owns is what this host knows of whether a pause's sender owns the
// object: yes (its route names the sender), no (the object runs here),
// another (its route names another host, which may lag a move), or
// unknown (no route).
type owns int

const (
	ownsUnknown owns = iota
	ownsYes
	ownsNo
	ownsAnother
)

// pauserOwns reports what this host's own knowledge shows of host by as
// obj's owner.
func (iq *inbounds) pauserOwns(by string, obj relocation.Object) owns {
	if kr := iq.owners.kind(obj.Kind); kr != nil && kr.local(obj.ID) != nil {
		return ownsNo
	}
	e, ok := iq.routes.lookup(obj)
	switch {
	case !ok:
		return ownsUnknown
	case e.Host == by:
		return ownsYes
	}
	return ownsAnother
}

// checkPause takes by's pause of obj if the Location Store names by the
// owner (one look-up; a store that cannot answer refuses the pause, which
// is advice: the owner's reorder bound still holds), unless a resume came
// meanwhile. Off the link.
func (iq *inbounds) checkPause(by string, obj relocation.Object) {
	ctx, cancel := iq.life.storeContext()
	row, err := iq.store.Get(ctx, obj)
	cancel()
	if !iq.pressure.checked(obj, by) {
		return // resumed meanwhile, or by is gone
	}
	switch {
	case err != nil:
		iq.refusePause(by, obj, payload.Unavailable, "the Location Store could not say who owns it: "+err.Error())
	case row.Host != by:
		iq.refusePause(by, obj, payload.Rejected, "the Location Store names "+strconv.Quote(row.Host)+" its owner")
	case !iq.routes.sending(obj):
		iq.refusePause(by, obj, payload.ProtocolError, "this host sends nothing to it")
	default:
		iq.takePause(by, obj)
	}
}

// takePause takes by's pause of obj, within maxPausesPerPeer.
func (iq *inbounds) takePause(by string, obj relocation.Object) {
	if !iq.pressure.pause(obj, by, true) {
		iq.refusePause(by, obj, payload.CapacityExceeded, "it has "+strconv.Itoa(maxPausesPerPeer)+" objects paused here already")
	}
}

// refusePause drops by's pause of obj, counted as a rejected item.
func (iq *inbounds) refusePause(by string, obj relocation.Object, code payload.Kind, why string) {
	iq.peers.malformedItem(by, payload.NewError(code, "actor", "a pause of "+obj.String()+" from "+by+": "+why))
}

// pauseJobs registers the ending of stale pauses on the host's tick.
func (iq *inbounds) pauseJobs(tick *schedule) {
	tick.every("end the pauses that no longer hold", time.Second, func(time.Time) bool { iq.endStalePauses(); return false })
}

// endStalePauses ends the pauses of other hosts that no longer hold: this
// host stopped sending to the object (its stream idled out: a pause lasts
// at most the streams' idle time after the last send it held back), or
// it learnt that another host owns it, or it runs it itself.
func (iq *inbounds) endStalePauses() {
	for _, k := range iq.pressure.pauses(iq.name) {
		if o := iq.pauserOwns(k.by, k.obj); o == ownsNo || o == ownsAnother || !iq.routes.sending(k.obj) {
			iq.pressure.resume(k.obj, k.by)
		}
	}
}
