package actor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Routing between hosts (DESIGN §8, §9).
//
// Where an object runs is decided by the Location Store. A host looks an
// object up in this order: its own owners; its forwarding routes (objects
// that moved away from it, kept for FollowDuration — Message Follow); its
// route cache (at most RouteCacheTTL old, shorter than Message Follow);
// the store. An object with no live owner is reserved and activated where
// the message is (one activation per object across the hosts sharing the
// store). A forwarded message keeps its operation id, reply route and
// deadline; each hop raises its owner generation; at most MaxHops hops.

// Defaults for routing.
const (
	DefaultFollowDuration = 30 * time.Second
	DefaultRouteCacheTTL  = 15 * time.Second
	// MaxHops bounds Message Follow: a message forwarded more often ends
	// with Unavailable.
	MaxHops = 8
)

// flagError marks a reply frame that carries an error.
const flagError uint8 = 2

// place is where an object runs: a local owner, or another host.
type place struct {
	o    *owner
	host string
	gen  uint64 // the owner generation the route knows (0: unknown)
}

type routeEntry struct {
	host    string
	gen     uint64
	expires int64 // nanotime
}

// routeTable maps objects to hosts: the route cache, or the forwarding
// routes of objects that moved away.
type routeTable struct {
	mu sync.RWMutex
	m  map[relocation.Object]routeEntry
}

func (t *routeTable) get(obj relocation.Object) (routeEntry, bool) {
	t.mu.RLock()
	e, ok := t.m[obj]
	t.mu.RUnlock()
	if !ok || nanotime() >= e.expires {
		return routeEntry{}, false
	}
	return e, true
}

func (t *routeTable) put(obj relocation.Object, host string, gen uint64, ttl time.Duration) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[relocation.Object]routeEntry{}
	}
	if old, ok := t.m[obj]; !ok || gen >= old.gen || nanotime() >= old.expires {
		t.m[obj] = routeEntry{host: host, gen: gen, expires: nanotime() + int64(ttl)}
	}
	t.mu.Unlock()
}

func (t *routeTable) drop(obj relocation.Object) {
	t.mu.Lock()
	delete(t.m, obj)
	t.mu.Unlock()
}

// dropHost forgets every route to host.
func (t *routeTable) dropHost(host string) {
	t.mu.Lock()
	for k, e := range t.m {
		if e.host == host {
			delete(t.m, k)
		}
	}
	t.mu.Unlock()
}

// forgetRoutes drops this host's cached and forwarding routes for obj: the
// next lookup asks the store.
func (h *Host) forgetRoutes(obj relocation.Object) {
	h.routes.drop(obj)
	h.follows.drop(obj)
}

// forgetHost drops every route of this host that leads to host.
func (h *Host) forgetHost(host string) {
	h.routes.dropHost(host)
	h.follows.dropHost(host)
}

// routeHint tells a host where an object runs now (sent back by a host
// that had to forward a message for it).
type routeHint struct {
	host string
	gen  uint64
}

var storeCtx = context.Background()

// peerLive reports whether host holds a live lease of generation gen.
func (h *Host) peerLive(host string, gen uint64) bool {
	l, ok, err := h.store.Lease(storeCtx, host)
	return err == nil && ok && l.Gen == gen && time.Now().Before(l.Deadline)
}

// locate returns where object id of the kind runs, activating it here when
// no live host owns it (one activation per object across the store).
func (kr *kindRuntime) locate(id string, internal bool) (place, error) {
	sh := kr.shard(id)
	sh.mu.RLock()
	o := sh.m[id]
	sh.mu.RUnlock()
	if o != nil {
		return place{o: o}, nil
	}
	h := kr.host
	obj := relocation.Object{Kind: kr.spec.name, ID: id}
	if e, ok := h.follows.get(obj); ok && e.host != h.name {
		return place{host: e.host, gen: e.gen}, nil
	}
	if e, ok := h.routes.get(obj); ok && e.host != h.name {
		return place{host: e.host, gen: e.gen}, nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o = sh.m[id]; o != nil {
		return place{o: o}, nil
	}
	if (!internal && !h.acceptsExternal()) || (internal && !h.acceptsInternal()) {
		return place{}, ErrShuttingDown
	}
	row, err := h.store.Get(storeCtx, obj)
	switch {
	case err == nil && row.State != relocation.Preserved && row.Host != h.name && h.peerLive(row.Host, row.LeaseGen):
		h.routes.put(obj, row.Host, row.OwnerGen, h.cfg.RouteCacheTTL)
		return place{host: row.Host, gen: row.OwnerGen}, nil
	case err != nil && !errors.Is(err, relocation.ErrNoRow):
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "location store", Err: err}
	}
	if h.draining.Load() {
		if other := h.net.pickHost(h, kr.spec.name); other != "" {
			return place{host: other}, nil
		}
	}
	row, err = h.store.Reserve(storeCtx, obj, h.name)
	if err == nil {
		row, err = h.store.Commit(storeCtx, obj, row.Ownership)
	}
	if err != nil {
		var ce *relocation.ConflictError
		if errors.As(err, &ce) && ce.Current.Host != "" && ce.Current.Host != h.name {
			h.routes.put(obj, ce.Current.Host, ce.Current.OwnerGen, h.cfg.RouteCacheTTL)
			return place{host: ce.Current.Host, gen: ce.Current.OwnerGen}, nil
		}
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "cannot activate " + obj.String(), Err: err}
	}
	o = h.newOwner(kr.spec, kr, Ref{Kind: kr.spec.name, ID: id})
	o.row = row.Ownership
	o.prev = sh.passivating[id]
	if sh.m == nil {
		sh.m = map[string]*owner{}
	}
	sh.m[id] = o
	return place{o: o}, nil
}

// errHostGone: the host a route names is no longer on the network.
var errHostGone = payload.NewError(payload.Unavailable, "actor", "the host is not on the network")

// sendRemote hands m to the link to host. Tell completes here: the
// transport accepted it. With a non-nil ctx (a send from outside the
// handlers) it first waits for room on the link. If the host is gone or
// leaving, errHostGone is returned (the caller looks the object up
// again); on any failure m stays the caller's.
//
// With note, the route to host is noted for that object (noteSendLocked)
// and the message carries the fence that gives; the note and the message's
// place on the link are one step under the sent table's lock, so no fence
// that another goroutine sends on a later switch passes the message.
func (h *Host) sendRemote(ctx context.Context, host string, m *payload.Message, note *relocation.Object) error {
	var l *link
	if h.net != nil {
		l = h.net.linkTo(h, host)
	}
	if l == nil {
		return errHostGone
	}
	if ctx != nil {
		if err := l.waitRoom(ctx, h.cfg.SendTimeout, h.done); err != nil {
			return err
		}
	}
	if note == nil {
		return l.sendMessage(m, linkItem{})
	}
	h.sent.mu.Lock()
	defer h.sent.mu.Unlock()
	fence, via := h.noteSendLocked(*note, host)
	return l.sendMessage(m, linkItem{fenceSeq: fence, fenceVia: via})
}

// receive handles one item off a link, on the link's goroutine. Nothing
// here waits for a job permit: messages for local owners queue in the
// link's permit source, in order.
func (h *Host) receive(l *link, it linkItem) {
	switch {
	case it.hint != nil:
		if it.hint.host != h.name { // a move to here is known here already
			h.routes.put(it.obj, it.hint.host, it.hint.gen, h.cfg.RouteCacheTTL)
		}
	case it.fence != nil:
		h.onFence(l, it.obj, it.fence)
	case it.left:
		ps := &pendingSend{mark: &fenceMark{left: l.from.name}}
		ps.targets = ps.one[:]
		l.in.enqueue(ps) // behind everything admitted off this link
		return
	case it.rec != nil:
		h.onRecord(l.from.name, it.obj, it.rec)
	default:
		h.onFrame(l, it)
	}
}

// bounceTo hands a frame back to the host it came from, which routes it
// again; it reports false (keeping buf with the caller) if that host is
// gone too.
func (h *Host) bounceTo(prev string, buf payload.Buffer) bool {
	ph := h.bounceHost(prev)
	if ph == nil {
		return false
	}
	ph.bounced(buf)
	return true
}

// bounceHost returns the running host named prev, other than h, or nil.
func (h *Host) bounceHost(prev string) *Host {
	if prev == "" || h.net == nil {
		return nil
	}
	ph := h.net.host(prev)
	if ph == nil || ph == h || !ph.acceptsInternal() {
		return nil
	}
	return ph
}

// bounced takes back a frame this host sent that its destination left
// before receiving: it is routed again (replies and messages alike).
func (h *Host) bounced(buf payload.Buffer) {
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
	m, err := h.reg.Open(buf)
	if err != nil {
		buf.Release()
		return
	}
	h.redispatchMessage(m)
}

// dropItem ends an item that can no longer be delivered (the link closed).
func (h *Host) dropItem(it linkItem) {
	if !it.buf.IsZero() {
		h.obs.Rejected("", RejectUndeliverable)
		it.buf.Release()
	}
}

func (h *Host) onFrame(l *link, it linkItem) {
	buf := it.buf
	hv, _, err := payload.DecodeHeader(buf.Bytes())
	if err != nil {
		h.log.Warn("malformed frame from a link dropped", "from", l.from.name, "err", err)
		buf.Release()
		return
	}
	if hv.Flags()&flagReply != 0 {
		op := hv.Op()
		if hv.Flags()&flagError != 0 {
			rerr := decodeWireError(h, buf)
			buf.Release()
			h.requests.complete(op, reply{err: rerr})
			return
		}
		h.requests.complete(op, reply{buf: buf})
		return
	}
	m, err := h.reg.Open(buf)
	if err != nil {
		h.failFrame(hv.ReplyTo(), hv.Op(), err)
		buf.Release()
		return
	}
	kr := h.kinds[string(hv.TargetName())]
	if kr == nil || hv.Scope() != payload.ScopeObject {
		h.failMessage(m, payload.NewError(payload.NotFound, "actor", "host "+h.name+" has no kind "+string(hv.TargetName())))
		return
	}
	id := string(hv.TargetID())
	p, err := kr.locate(id, true)
	if err != nil {
		if ph := h.bounceHost(l.from.name); ph != nil && errors.Is(err, ErrShuttingDown) {
			ph.bounced(m.TakeBuffer()) // this host is closing: the sender routes it again
			return
		}
		h.failMessage(m, err)
		return
	}
	if it.fenceSeq != 0 && it.fenceOf == "" {
		it.fenceOf = l.from.name
	}
	behind := h.fences.outCount.Load() != 0 // messages released here may be ahead
	if p.o != nil || !l.in.idle() || behind {
		// Admit here — or, if earlier messages off this link still wait
		// for permits or in the release queue, queue behind them even to
		// be forwarded, so none overtakes another.
		ps := &pendingSend{m: m, from: l.from.name, src: l,
			fence: linkItem{fenceSeq: it.fenceSeq, fenceVia: it.fenceVia, fenceOf: it.fenceOf}}
		ps.one[0] = target{kr: kr, id: id}
		ps.targets = ps.one[:]
		key := fenceKey{obj: relocation.Object{Kind: kr.spec.name, ID: id}, sender: it.fenceOf}
		if p.o != nil && it.fenceSeq != 0 {
			switch h.holdForFence(key, it.fenceVia, heldForFence{seq: it.fenceSeq, l: l, ps: ps, o: p.o}) {
			case fenceHeld:
				return
			case fencePass:
				ps.fencePassed = true
			}
		}
		if behind && h.queueBehind(key, l, heldForFence{l: l, ps: ps}) {
			return
		}
		if p.o != nil || !l.in.idle() {
			l.in.enqueue(ps)
			return
		}
	}
	h.forwardFenced(l.from.name, kr, id, m, p, it)
}

// forward hands a message on to where its object runs now (Message
// Follow), keeping its identity, reply route and deadline, raising its hop
// count and owner generation; it tells the previous hop where the object is.
func (h *Host) forward(prev string, kr *kindRuntime, id string, m *payload.Message, p place) {
	h.forwardFenced(prev, kr, id, m, p, linkItem{})
}

// forwardFenced is forward keeping the fence the message carries (so the
// final owner still orders it behind its sender's older messages).
func (h *Host) forwardFenced(prev string, kr *kindRuntime, id string, m *payload.Message, p place, fence linkItem) {
	hv := m.Header()
	hops := int(hv.Hops()) + 1
	if hops > MaxHops || (hops > 1 && p.gen != 0 && p.gen <= hv.Generation()) {
		h.failMessage(m, payload.NewError(payload.Unavailable, "actor", "route loop or too many hops for "+kr.spec.name+"/"+id))
		return
	}
	gen := p.gen
	if gen < hv.Generation() {
		gen = hv.Generation()
	}
	route, op := string(hv.ReplyTo()), hv.Op()
	obj := relocation.Object{Kind: kr.spec.name, ID: id}
	buf := m.TakeBuffer()
	if err := payload.SetForward(buf.Bytes(), uint8(hops), gen); err != nil {
		buf.Release()
		return
	}
	var l *link
	var err error
	for try := 0; ; try++ {
		l = nil
		if h.net != nil {
			l = h.net.linkTo(h, p.host)
		}
		if l == nil {
			break
		}
		err = l.send(linkItem{buf: buf, fenceSeq: fence.fenceSeq, fenceVia: fence.fenceVia, fenceOf: fence.fenceOf})
		if !errors.Is(err, errHostGone) || try == 3 {
			break
		}
		// The host is leaving: look the object up again (the routes to it
		// are gone) and hand the frame on there, or to an owner here.
		h.forgetRoutes(obj)
		np, lerr := kr.locate(id, true)
		if lerr != nil {
			err = lerr
			break
		}
		if np.o != nil {
			if m, oerr := h.reg.Open(buf); oerr == nil {
				h.redispatchMessage(m)
			} else {
				buf.Release()
			}
			return
		}
		p = np
	}
	if l == nil && h.bounceTo(prev, buf) {
		return // this host is leaving: the previous hop routes it again
	}
	if l == nil || err != nil {
		buf.Release()
		h.routes.drop(obj)
		h.failFrame([]byte(route), op, payload.NewError(payload.Unavailable, "actor", "host "+p.host+" is not reachable"))
		return
	}
	h.forwarded.Add(1)
	if prev != "" && prev != p.host {
		if back := h.net.linkTo(h, prev); back != nil {
			_ = back.send(linkItem{obj: obj, hint: &routeHint{host: p.host, gen: p.gen}})
		}
	}
}

// failMessage ends a message that cannot be delivered: a request gets err.
func (h *Host) failMessage(m *payload.Message, err error) {
	hv := m.Header()
	h.failFrame(hv.ReplyTo(), hv.Op(), err)
	m.Release()
}

func (h *Host) failFrame(route []byte, op payload.OpID, err error) {
	h.obs.Rejected("", RejectUndeliverable)
	if len(route) > 0 {
		h.routeReply(route, op, reply{err: err})
	} else {
		h.log.Debug("one-way message could not be delivered", "err", err)
	}
}

// wireError is how an error reply travels between hosts: its kind and
// text. Errors other than berth kinds arrive as their text only.
type wireError struct {
	Kind uint8  `json:"k"`
	Text string `json:"t"`
}

func encodeWireError(h *Host, op payload.OpID, err error) (payload.Buffer, error) {
	return payload.Encode(h.pool, h.reg, payload.Header{Op: op, Flags: flagReply | flagError},
		wireError{Kind: uint8(payload.KindOf(err)), Text: err.Error()})
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
	return &payload.Error{Kind: k, Op: "remote", Detail: we.Text}
}

// pickHost returns another running host on the network that hosts kind,
// for a draining host to send new activations to ("" if none).
func (n *Network) pickHost(self *Host, kind string) string {
	if n == nil {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	best, bestLoad := "", int64(-1)
	for name, h := range n.hosts {
		if h == self || h.draining.Load() || h.kinds[kind] == nil {
			continue
		}
		if load := h.owners.Load(); bestLoad < 0 || load < bestLoad || (load == bestLoad && name < best) {
			best, bestLoad = name, load
		}
	}
	return best
}

// peerGone: a host left the network (stopped or killed). After a graceful
// leave, messages held for fences that travel through it keep waiting
// (the fences were passed on). Otherwise they are released now if nothing
// more can come from it (it crashed, or never sent here), else when its
// last item, on its link here, has been handled.
func (h *Host) peerGone(name string, graceful, releaseNow bool) {
	h.forgetHost(name)
	switch {
	case graceful:
		h.fenceDeparted(name)
	case releaseNow:
		h.releaseFences(name)
	}
	h.moveEvent(name, relocation.TargetDead{})
}

// linkUp: the link to a host was healed.
func (h *Host) linkUp(name string) {
	h.moveEvent(name, relocation.LinkUp{})
}
