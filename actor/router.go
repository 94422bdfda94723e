package actor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
	"golang.org/x/sync/singleflight"
)

// The router part (router): where objects run, and the terminal paths of
// messages that cannot run here.
//
// Owns: the look-ups (store calls, one flight per object: singleflight),
// activation here, forwarding, bounces back to the origin, skip notices,
// the stray and redispatched messages, ending unrun messages with their
// error.
// Lock: none across a store call or a send; look-ups that may call the
// store run on look-up lanes (serial) or off the transport's goroutines.
// May call: owners (and their receive side, owner.admit), gaps, requests,
// peers and the leaves.
// Invariants: a message is never dropped for routing reasons while every
// host is up; one that cannot be delivered ends with a typed error at its
// sender, is counted, and its gap is closed by a skip notice.

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

// peerLive reports whether host holds a live lease of generation gen. A
// run this host already saw past its lease (a confirmed suspicion) is not
// asked about again: a lease that ran out never comes back.
func (rt *router) peerLive(host string, gen uint64) bool {
	if rt.view.isDead(host, gen) {
		return false
	}
	ctx, cancel := rt.life.storeContext()
	defer cancel()
	l, ok, err := rt.store.Lease(ctx, host)
	return err == nil && ok && l.Gen == gen && l.Remaining > 0 // by the store's clock: no clocks compared
}

// locate returns where object id of the kind runs, activating it here when
// no live host owns it (one activation per object across the store).
func (rt *router) locate(kr *kindRuntime, id string, mode lookupMode) (place, error) {
	if p, ok := rt.locateCached(kr, id); ok {
		return p, nil
	}
	return rt.lookup(kr, id, mode)
}

// locateCached is locate without the store: it finds a local owner or a
// route to another host, and reports false where locate would ask the
// store.
func (rt *router) locateCached(kr *kindRuntime, id string) (place, bool) {
	if o := kr.local(id); o != nil {
		return place{o: o}, true
	}
	if e, ok := rt.routes.lookup(relocation.Object{Kind: kr.def().name, ID: id}); ok && e.Host != rt.name {
		return place{host: e.Host, gen: e.Gen}, true
	}
	return place{}, false
}

// lookup asks the store where object id runs, and activates it here if no
// live host owns it. Concurrent look-ups of one object on this host share
// one store call; no lock is held across it.
func (rt *router) lookup(kr *kindRuntime, id string, mode lookupMode) (place, error) {
	key := kr.def().name + "\x00" + id
	if mode != fromOutside {
		key += "\x00" + string(rune('0'+mode))
	}
	v, err, _ := rt.lookups.Do(key, func() (any, error) { return rt.resolve(kr, id, mode) })
	if err != nil {
		return place{}, err
	}
	return v.(place), nil
}

// errStoreAway marks a look-up or an activation that failed because the
// Location Store could not answer for now: out of reach, slower than
// Config.StoreTimeout, or refusing because this host's lease was not
// renewed yet. The message waits to be routed again (waitToRoute): a
// stall, not a loss.
var errStoreAway = errors.New("the Location Store cannot answer for now")

// storeAway marks a store error errStoreAway if the store may answer
// later (payload.Unavailable, a deadline); other errors stay as they are.
func storeAway(err error) error {
	if payload.KindOf(err) == payload.Unavailable || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errStoreAway, err)
	}
	return err
}

func (rt *router) resolve(kr *kindRuntime, id string, mode lookupMode) (place, error) {
	if p, ok := kr.here(id); ok {
		return p, nil
	}
	if (mode == fromOutside && !rt.life.acceptsExternal()) || (mode != fromOutside && !rt.life.acceptsInternal()) {
		return place{}, ErrShuttingDown
	}
	obj := relocation.Object{Kind: kr.def().name, ID: id}
	ctx, cancel := rt.life.storeContext()
	defer cancel()
	row, err := rt.store.Get(ctx, obj)
	switch {
	case err == nil && row.State != relocation.Preserved && row.Host != rt.name && rt.peerLive(row.Host, row.LeaseGen):
		rt.routes.learn(obj, row.Host, row.OwnerGen, false)
		return place{host: row.Host, gen: row.OwnerGen, stored: true}, nil
	case err != nil && !errors.Is(err, relocation.ErrNoRow):
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "location store", Err: storeAway(err)}
	}
	// A row that is not Preserved and names no live host but this one
	// (which has no owner for it): its owner crashed (or was this host's
	// previous run), and an activation takes the object over.
	takeover := err == nil && row.State != relocation.Preserved
	var crashed string // the owner it takes over from
	if takeover {
		crashed = row.Host
	}
	if rt.cfg.Gateway {
		// Never here: the kind's placement among the hosts that serve it.
		other := rt.placeNew(kr.spec, id)
		if other == "" || other == rt.name {
			return place{}, payload.NewError(payload.Unavailable, "actor", "no host serves kind "+kr.def().name+" (this host is a gateway)")
		}
		rt.routes.learn(obj, other, 0, false)
		return place{host: other, stored: true}, nil
	}
	if rt.life.isDraining() {
		if other := rt.peers.pickHost(kr.def().name); other != "" {
			return place{host: other, stored: true}, nil
		}
	} else if mode != fromLink {
		// A send from this host activates the object where the kind's
		// placement says; that host activates it (fromLink).
		if other := rt.placeNew(kr.spec, id); other != "" && other != rt.name {
			// Later sends from here go the same way (a cached route) until
			// the store names the owner: a second look-up before the
			// activation is committed would place it again, maybe
			// elsewhere (the store then keeps one, at the cost of a hop).
			rt.routes.learn(obj, other, 0, false)
			return place{host: other, stored: true}, nil
		}
	}
	// The activation itself is one flight per object on this host, whatever
	// the look-ups' modes: two of them (a local send and a message off a
	// link) must not both reserve and commit.
	v, err, _ := rt.lookups.Do(kr.def().name+"\x00"+id+"\x00activate", func() (any, error) { return rt.activate(kr, id, crashed) })
	if err != nil {
		return place{}, err
	}
	return v.(place), nil
}

// activate reserves and commits object id for this host in the store and
// installs its owner; if another live host owns it, it returns that host.
// crashed: the owner its row named, which crashed (its gaps are messages
// that died with it: TakeoverGapTimeout); "" if none.
func (rt *router) activate(kr *kindRuntime, id string, crashed string) (place, error) {
	obj := relocation.Object{Kind: kr.def().name, ID: id}
	ctx, cancel := rt.life.storeContext()
	defer cancel()
again:
	// A flight that ended just before this one, or a move from here past
	// relay-ready: the store names this run until its target commits, and
	// the Reserve below would find the row "already ours".
	p, ok, departed := kr.lookHere(id)
	if ok {
		kr.follow(id, p)
		return p, nil
	}
	// The lapses seen so far: if one is seen before the owner is
	// installed, the row may be another host's by then, and the owner's
	// first turn waits for a check (lease.go).
	epoch := rt.gate.epochNow()
	if rt.gate.isBetweenRuns() { // after the epoch (leaseKeeper.newRun)
		// Placed again later, as when the store cannot answer (errStoreAway).
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "cannot activate " + obj.String(),
			Err: fmt.Errorf("%w: the host is joining the cluster again as a new run", errStoreAway)}
	}
	row, err := rt.store.Reserve(ctx, obj, rt.name)
	if err == nil && row.State != relocation.Active {
		// An Active row that Reserve returns is this run's already: no
		// write (a write would change the version a move's commit from
		// here expects).
		row, err = rt.store.Commit(ctx, obj, row.Ownership)
	}
	if err != nil {
		var ce *relocation.ConflictError
		if errors.As(err, &ce) && ce.Current.Host != "" && ce.Current.Host != rt.name {
			rt.routes.learn(obj, ce.Current.Host, ce.Current.OwnerGen, false)
			return place{host: ce.Current.Host, gen: ce.Current.OwnerGen, stored: true}, nil
		}
		return place{}, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "cannot activate " + obj.String(), Err: storeAway(err)}
	}
	var snap route.Snapshot
	if len(row.Order) > 0 {
		if snap, err = route.DecodeSnapshot(row.Order); err != nil {
			rt.log.Warn("order state in the store row is malformed; starting without it", "object", obj.String(), "err", err)
		}
	}
	a := activation{row: row.Ownership, epoch: epoch, snap: snap, tookOver: crashed != ""}
	if a.tookOver {
		a.window, a.gapTimeout = rt.gaps.factWindow(), int64(rt.cfg.TakeoverGapTimeout)
	}
	p, found, changed := kr.install(id, departed, a)
	switch {
	case changed:
		// A move from here may have ended since the look before the
		// store: the row Reserve found "already ours" may be its target's
		// by now. Ask again.
		goto again
	case found:
		kr.follow(id, p)
		return p, nil // an incoming move's owner, a racing activation, or a move from here
	}
	if a.tookOver {
		rt.events.count(EventTookOver, crashed, 1)
	}
	return p, nil
}

// forward hands a message on towards where its object runs now (Message
// Follow, route.Forward), keeping its identity, stamp, reply route and
// deadline; it tells the message's origin where the object is.
func (rt *router) forward(kr *kindRuntime, id string, m *payload.Message, p place) {
	obj := relocation.Object{Kind: kr.def().name, ID: id}
	for try := 0; ; try++ {
		hv := m.Header()
		hop := route.Hop{Hops: hv.Hops(), Gen: hv.Generation(), Bounces: bouncesOf(hv.Flags())}
		d := route.Forward(hop, route.Entry{Host: p.host, Gen: p.gen}, !p.stored, rt.name)
		if d.Action == route.Resolve {
			if !p.stored {
				var ok bool
				if p, ok = rt.lookupAgain(kr, id, m); !ok {
					return
				}
			}
			// The look-up activates an object that no live host owns, so
			// the store's answer names another host.
			d = route.Placed(hop, p.host, p.gen, rt.name)
		}
		switch {
		case d.Action == route.Fail:
			rt.failMessage(m, payload.NewError(payload.Unavailable, "actor", obj.String()+" moved too often to be reached"))
			return
		case d.Action == route.ToOrigin, d.Host == rt.name:
			rt.backOrFailBounded(m, hop, payload.NewError(payload.Unavailable, "actor", "no route to "+obj.String()))
			return
		}
		origin := string(hv.Origin())  // m is gone once sent
		op, mine := rt.requests.own(m) // a request of this host notes where it went (requests.go)
		var to peerRun
		if mine {
			to = rt.view.runOf(d.Host)
		}
		err := rt.sendHop(m, d.Host, hop.Hops+1, d.Gen)
		if err == nil {
			if mine {
				rt.requests.handedTo(op, to)
			}
			rt.forwarded.Add(1)
			if origin != "" && origin != rt.name && origin != d.Host {
				rt.peers.sendHint(origin, obj, d.Host, d.Gen)
			}
			return
		}
		if errors.Is(err, ErrPeerBacklog) {
			// The next host does not take what this host sends it: no
			// look-up helps. A skip notice waits for room (its gap has
			// no other fact to close it while every host is up).
			if hv.Flags()&flagSkip == 0 || !rt.gaps.waitToRoute(m) {
				rt.failMessage(m, err)
			}
			return
		}
		// The host is leaving or gone: look again (routes to it are gone).
		if try == 3 && hv.Flags()&flagSkip != 0 && rt.gaps.waitToRoute(m) {
			// A skip notice is the only fact that closes its gap while
			// every host is up: it waits until the object is handed on.
			return
		}
		if try == 3 {
			rt.backOrFailBounded(m, hop, payload.NewError(payload.Unavailable, "actor", "host "+d.Host+" is not reachable"))
			return
		}
		var ok bool
		if p, ok = rt.lookupAgain(kr, id, m); !ok {
			return
		}
	}
}

// lookupAgain forgets this host's routes for object id and asks the store
// where it runs. If it runs here (or the look-up fails), m is admitted
// (or sent back to its origin) and ok is false; otherwise the caller
// sends m to the returned place.
func (rt *router) lookupAgain(kr *kindRuntime, id string, m *payload.Message) (p place, ok bool) {
	rt.routes.forget(relocation.Object{Kind: kr.def().name, ID: id}, true)
	p, err := rt.lookup(kr, id, fromLink)
	switch {
	case err != nil:
		rt.backOrFail(m, err)
		return p, false
	case p.o != nil:
		rt.admitHere(p.o, m)
		return p, false
	}
	return p, true
}

// sendHop sends m on to host as one more hop, towards owner generation
// gen. On failure m stays the caller's, unchanged.
func (rt *router) sendHop(m *payload.Message, host string, hops uint8, gen uint64) error {
	hv := m.Header()
	oldHops, oldGen := hv.Hops(), hv.Generation()
	_ = payload.SetForward(m.Frame(), hops, gen)
	// A message of this host, handed on from here: its stream notes where
	// it went (route.Streams.Handed) once it is sent (read now: a sent
	// message is released).
	mine := hv.Seq() != 0 && string(hv.Origin()) == rt.name
	var obj relocation.Object
	var st route.Stamp
	var to peerRun
	if mine { // another host's message needs none of it
		obj = relocation.Object{Kind: string(hv.TargetName()), ID: string(hv.TargetID())}
		st = route.Stamp{Epoch: hv.Epoch(), Seq: hv.Seq()}
		to = rt.view.runOf(host)
	}
	if err := rt.peers.sendMessage(host, m, transport.Frame); err != nil {
		_ = payload.SetForward(m.Frame(), oldHops, oldGen)
		return err
	}
	if mine {
		rt.routes.handed(obj, st, to)
	}
	return nil
}

// admitHere admits a forwarded or re-routed message to a local owner; if
// the owner closed meanwhile, it is routed again.
func (rt *router) admitHere(o *owner, m *payload.Message) {
	e := newEnvelope(m)
	for try := 0; ; try++ {
		_, _, err := rt.admit(o, e, admitOverflow)
		if err == nil {
			return
		}
		var p place
		hv := m.Header()
		kr := rt.owners.kind(string(hv.TargetName()))
		if try < 3 {
			p, err = rt.locate(kr, string(hv.TargetID()), fromLink)
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
			rt.failMessage(m, err)
		} else {
			rt.forward(kr, string(hv.TargetID()), m, p)
		}
		return
	}
}

// router is how this host finds where objects run: concurrent store
// look-ups of one object are one call, and admissions that may call the
// store wait on look-up lanes, not on a peer's slow lane.
type router struct {
	view *peerView // what this host knows of its peers (the peers' leaf)
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	events   *eventLog
	gate     *leaseGate
	store    relocation.Store
	routes   *routes
	peers    *peers
	gaps     *gapFacts
	requests *requestTable
	owners   *ownerTable
	lanes    [lookupLanes]serial // admissions that may call the store
	lookups  singleflight.Group  // concurrent store look-ups of one object

	// Counters of Stats, this part's own.
	skipsLost   atomic.Int64 // skip notices ended without reaching their object (Stats.SkipsLost)
	bouncedMsgs atomic.Int64 // messages sent back to their origin to be routed again (Stats.Bounced)
	droppedMsgs atomic.Int64 // stamped messages not delivered; a skip notice followed (Stats.Dropped)
	forwarded   atomic.Int64 // messages forwarded from here (Stats.Forwarded)
}

// lookupLane returns the lane on which admissions to t's object that may
// call the Location Store run, off the goroutine that granted the permit.
func (rt *router) lookupLane(t target) *serial {
	return &rt.lanes[objHash(t.obj())%lookupLanes]
}

// handOn sends msgs, in order, to wherever object id runs now, on the
// object's look-up lane (the look-ups may call the store): the messages
// of an activation another host took over (kindRuntime.endTaken).
func (rt *router) handOn(kr *kindRuntime, id string, msgs []*payload.Message) {
	rt.lookupLane(target{kr: kr, id: id}).add(func() {
		for _, m := range msgs {
			rt.redispatchMessage(m)
		}
	})
}

// hint applies a route hint: obj runs on host with owner generation gen.
// A host that runs obj itself ignores it.
func (rt *router) hint(obj relocation.Object, host string, gen uint64) {
	if host == rt.name {
		return
	}
	if kr := rt.owners.kind(obj.Kind); kr == nil || kr.local(obj.ID) != nil {
		return
	}
	rt.routes.update(obj, host, gen)
}

// orderJobs registers the order's periodic jobs on the host's tick: the
// coarse clock first (the others read it), the gaps' deadlines, skip
// notices waiting for their host, and the pruning of idle routes and
// senders.
func (rt *router) orderJobs(tick *schedule) {
	tick.every("advance the coarse clock", tickEvery, func(time.Time) bool { rt.routes.advance(rt.nanotime()); return false })
	tick.every("close the gaps past their deadline", tickEvery, func(time.Time) bool { rt.closeGaps(); return false })
	tick.every("prune idle routes", time.Second, func(time.Time) bool { rt.routes.prune(rt.nanotime()); return false })
	tick.every("forget idle senders", 10*time.Second, func(time.Time) bool { rt.owners.forgetIdleSenders(); return false })
}

// orderDone finishes an order step outside the owner's lock: counts, the
// list of owners holding messages, and the strays, routed again.
func (rt *router) orderDone(o *owner, a orderAfter) {
	for _, e := range o.finishOrder(a) {
		rt.redispatch(e)
	}
}

// admit admits e at o (owner.admit) and routes again the strays the
// admission set free.
func (rt *router) admit(o *owner, e *mailbox.Envelope, how admitHow) (ran bool, room <-chan struct{}, err error) {
	ran, room, stray, err := o.admit(e, how)
	for _, s := range stray {
		rt.redispatch(s)
	}
	return ran, room, err
}

// closeGaps gives up on the gaps a failure fact covers (route.Fact), on
// every owner that holds messages, and updates the oldest-gap gauge; a
// long gap is logged (rate-limited) with the hosts it may wait for.
func (rt *router) closeGaps() {
	owners := rt.owners.holding()
	now := rt.nanotime()
	facts := rt.gaps.currentFacts(now)
	var oldest route.Gap
	var oldestAt *owner
	var awaited []string
	for _, o := range owners {
		if a, closed := o.closeGaps(now, facts); closed {
			rt.orderDone(o, a)
		}
		if g, hosts, ok := o.oldestGap(now); ok && g.Waited > oldest.Waited {
			oldest, oldestAt, awaited = g, o, hosts
		}
	}
	if rt.gaps.noteOldestGap(oldest.Waited, now) && oldestAt != nil {
		rt.log.Warn("a gap in a sender's messages is waiting for an older message (no host failed: it waits)",
			"object", oldestAt.ref.String(), "sender", oldest.Sender, "missing", oldest.Missing,
			"held", oldest.Held, "waited", time.Duration(oldest.Waited), "forwarding", awaited)
	}
}

// waitingJobs registers the rounds that route the waiting messages again
// (waitToRoute) on a schedule of their own: a round's look-up may wait
// for a slow store, which must not hold up the tick.
func (rt *router) waitingJobs(sc *schedule) {
	sc.every("route the messages that waited", tickEvery, func(time.Time) bool {
		if rt.gaps.anyWaiting() {
			rt.routeWaiting()
		}
		return false
	})
}

// routeWaiting routes the waiting messages again, oldest first. A request
// whose deadline passed ends. The round stops at the first message whose
// look-up the store still cannot answer: it and the rest (which would ask
// the store too) keep their places for the next round.
func (rt *router) routeWaiting() {
	ms := rt.gaps.takeWaiting()
	for i, m := range ms {
		hv := m.Header()
		if dl := hv.DeadlineUnixNano(); dl != 0 && wallNano() > dl {
			rt.failMessage(m, ErrRequestTimeout)
			continue
		}
		_ = payload.SetForward(m.Frame(), 0, 0)
		if back := rt.routeAgain(m, true); back != nil {
			ms[i] = back
			if !rt.gaps.putBack(ms[i:]) {
				for _, m := range ms[i:] {
					rt.failMessage(m, ErrShuttingDown)
				}
			}
			return
		}
	}
}

// placeNew returns the host that activates object id of kind s by its
// placement ("" or this host's name: here).
func (rt *router) placeNew(s *spec, id string) string {
	placement := s.placement
	if rt.cfg.Gateway && placement == PlaceLocal {
		placement = PlaceHashed // a gateway hosts nothing
	}
	if rt.peers.tr == nil || placement == PlaceLocal && !rt.view.hasNewer() {
		return "" // here: no member runs a newer application version (the common case, one atomic load)
	}
	cands := rt.peers.candidates(s.name, !rt.life.isDraining() && !rt.cfg.Gateway)
	if len(cands) == 0 {
		return ""
	}
	if placement == PlaceLocal {
		// Here — unless hosts of a newer application version serve the
		// kind (a rolling upgrade): then on one of them, by the id's hash.
		if compareVersions(cands[0].version, rt.cfg.AppVersion) <= 0 || rt.life.isDraining() {
			return "" // (cands are of one version, the newest)
		}
		placement = PlaceHashed
	}
	among := make([]HostLoad, len(cands))
	for i, c := range cands {
		among[i] = HostLoad{Name: c.name, Objects: c.load}
	}
	to := placement.Activate(id, rt.name, among)
	if to == rt.name {
		return ""
	}
	if to != "" {
		if !slices.ContainsFunc(cands, func(c candidate) bool { return c.name == to }) {
			// Not a host that serves the kind: here, as with no
			// candidate (the look-up then finds it or activates it).
			return ""
		}
		rt.view.placed(to) // its load as heard, until its next report
	}
	return to
}

// lookupLanes is how many look-up lanes a host has (Host.lookupLane).
const lookupLanes = 8

// redispatch sends an item that will not run here to wherever its object
// runs now.
func (rt *router) redispatch(e *mailbox.Envelope) {
	m := e.Msg
	e.Msg = nil
	e.Release()
	if m != nil {
		rt.redispatchMessage(m)
	}
}

func (rt *router) redispatchFrame(f []byte) {
	rt.redispatchBuffer(rt.pool.Copy(f))
}

// redispatchBuffer opens buf and sends the message to wherever its object
// runs; a frame that does not open is released (counted).
func (rt *router) redispatchBuffer(buf payload.Buffer) {
	m, err := rt.reg.Open(buf)
	if err != nil {
		rt.obs.Rejected("", RejectProtocol)
		buf.Release()
		return
	}
	rt.redispatchMessage(m)
}

func (rt *router) redispatchMessage(m *payload.Message) { rt.routeAgain(m, false) }

// routeAgain sends m to wherever its object runs. A message whose look-up
// the Location Store could not answer (errStoreAway) waits to be routed
// again (waitToRoute) — or, with giveBack, is returned to the caller.
func (rt *router) routeAgain(m *payload.Message, giveBack bool) *payload.Message {
	hv := m.Header()
	kr := rt.owners.kind(string(hv.TargetName()))
	if kr == nil {
		rt.failMessage(m, payload.NewError(payload.NotFound, "actor", "no kind "+string(hv.TargetName())))
		return nil
	}
	id := string(hv.TargetID())
	p, err := rt.locate(kr, id, fromLink)
	switch {
	case errors.Is(err, errStoreAway) && giveBack:
		return m
	case errors.Is(err, errStoreAway) && rt.gaps.waitToRoute(m):
	case err != nil:
		rt.failMessage(m, err)
	case p.o != nil:
		rt.admitHere(p.o, m)
	default:
		rt.forward(kr, id, m, p)
	}
	return nil
}

// placeCached is place without a store call: it reports false where
// place would ask the store.
func (rt *router) placeCached(t target) (place, bool) {
	if t.o != nil {
		return place{o: t.o}, true
	}
	return rt.locateCached(t.kr, t.id)
}

// place finds where target t runs: its owner here, or the host a route
// or the store names (locate).
func (rt *router) place(t target, mode lookupMode) (place, error) {
	if t.o != nil {
		return place{o: t.o}, nil
	}
	return rt.locate(t.kr, t.id, mode)
}
