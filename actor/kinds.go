package actor

import (
	"context"
	"hash/maphash"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// The owners part, its kinds and channels: a kind's owners in 32 shards,
// the objects leaving by a move from here, and the activations,
// deactivations and moves' installs and removals that change a shard; a
// channel's subscribers and the ones serving each request type.
//
// Owns: the shards' maps. Lock: ownerShard.mu (RW), above owner.seqMu and
// ownerTable.spawnMu (LOCK_ORDER.md); taken only by the methods here and
// ownerTable's. No store call and no send under it.
// May call: the owners' own methods, peers (is there a transport),
// requests (replies a deactivation ends), routes, the leaves.
// Invariants: one owner per object per host; an object leaving by a move
// from here is never activated here again until that move ends.

// kindRuntime is a kind on a host: its owners, sharded by object id.
type kindRuntime struct {
	spec   *spec
	t      *ownerTable
	shards [32]ownerShard
}

type ownerShard struct {
	mu          sync.RWMutex
	m           map[string]*owner // guarded by mu
	passivating map[string]*owner // deactivating owners, guarded by mu
	// leaving holds the moves from here past relay-ready whose target has
	// not committed yet: their objects are still this run's in the
	// Location Store but have no owner here, and are never activated here
	// again meanwhile (router.activate). departed counts the ends of such
	// moves. Both guarded by mu.
	leaving  map[string]leavingMove
	departed uint64
	_        [8]byte
}

// leavingMove is a move from here past relay-ready: its id, its target and
// the owner generation its commit gives the object.
type leavingMove struct {
	id  relocation.MoveID
	to  string
	gen uint64
}

// leavingLocked returns the move of object id from here that is past
// relay-ready and not yet ended (ok false if none), and how many such
// moves of the shard's objects ended so far; under the shard's lock.
func (sh *ownerShard) leavingLocked(id string) (m leavingMove, ok bool, departed uint64) {
	m, ok = sh.leaving[id]
	return m, ok, sh.departed
}

func (kr *kindRuntime) shard(id string) *ownerShard {
	return &kr.shards[maphash.String(kr.t.seed, id)%uint64(len(kr.shards))]
}

// all returns a snapshot of the kind's owners.
func (kr *kindRuntime) all() []*owner {
	var out []*owner
	for i := range kr.shards {
		sh := &kr.shards[i]
		sh.mu.RLock()
		for _, o := range sh.m {
			out = append(out, o)
		}
		sh.mu.RUnlock()
	}
	return out
}

// deactivate ends an object's activation from its own turn: the mailbox
// closes if empty (else passivation waits for another idle period, unless
// the host is stopping), the owner leaves the map, the hook runs, the actor
// stops. A sender that finds the mailbox closed looks the object up again
// and activates a new owner, whose factory waits for this hook.
func (kr *kindRuntime) deactivate(o *owner, stopping bool) {
	sh := kr.shard(o.ref.ID)
	sh.mu.Lock()
	o.seqMu.Lock()
	// Messages held out of order wait for their gaps (until the missing
	// message arrives, or a failure fact closes the gap): the owner stays
	// until they ran — unless its host is leaving a
	// network: then they go with the order state into the store row, and
	// the object's next activation (elsewhere) holds them until the
	// missing messages, which their senders send there, arrive.
	leaving := stopping && kr.t.peers.tr != nil && kr.t.life.isDraining()
	if (o.inbox.Held() > 0 && !leaving) || !o.mb.CloseIfEmpty() {
		held := o.inbox.Held() > 0
		o.seqMu.Unlock()
		sh.mu.Unlock()
		if stopping && (!held || leaving) {
			o.requestDeactivate() // after what is queued
		}
		return
	}
	var order []byte
	if kr.t.peers.tr != nil {
		order = o.orderSnapshotLocked(kr.t.nanotime())
	}
	handedOn := o.inbox.Shut() // their frames are in the order state
	o.noteHeldLocked()
	relieved := o.relievedLocked(true)
	o.seqMu.Unlock()
	if sh.m[o.ref.ID] == o {
		delete(sh.m, o.ref.ID)
	}
	if sh.passivating == nil {
		sh.passivating = map[string]*owner{}
	}
	sh.passivating[o.ref.ID] = o
	sh.mu.Unlock()
	for _, e := range handedOn { // a released permit may admit a send: after the locks
		e.Release()
	}
	if relieved {
		o.sendPushes()
	}

	if o.ready && kr.spec.deactivate != nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					kr.t.log.Error("deactivate hook panicked", "owner", o.ref.String(), "panic", r, "stack", string(debug.Stack()))
				}
			}()
			kr.spec.deactivate(context.WithoutCancel(&o.ctx), o.ref.ID, o.state)
		}()
	}
	if o.gate != nil {
		// The last state (the hook may have changed it) is durable before
		// the row is preserved: after that no write of this activation
		// lands.
		if err := o.gate.final(); err != nil {
			kr.t.log.Warn("final state of a persistent object not written", "object", o.ref.String(), "err", err)
		}
	}
	o.state = nil
	obj := relocation.Object{Kind: o.ref.Kind, ID: o.ref.ID}
	ctx, cancel := kr.t.life.storeContext()
	_, err := kr.t.store.Preserve(ctx, obj, o.row, order)
	cancel()
	if err != nil {
		kr.t.log.Debug("location store row not preserved", "object", obj.String(), "err", err)
	}
	sh.mu.Lock()
	if sh.passivating[o.ref.ID] == o {
		delete(sh.passivating, o.ref.ID)
	}
	sh.mu.Unlock()
	close(o.gone)
	kr.t.obs.Deactivated(kr.spec.name)
	kr.t.system.Root.Stop(o.pid)
}

// here finds object id on this host: its owner, or the move of it from
// here that is past relay-ready and not yet committed, as a route to its
// target (the forwarding route, learnt again: a look-up that found none
// had lost it). ok is false if neither: the store decides.
func (kr *kindRuntime) here(id string) (place, bool) {
	sh := kr.shard(id)
	sh.mu.RLock()
	p, ok := kr.hereLocked(sh, id)
	sh.mu.RUnlock()
	kr.follow(id, p)
	return p, ok
}

// hereLocked is here under the shard's lock (read or write), without
// learning the route: the caller calls follow after the lock.
func (kr *kindRuntime) hereLocked(sh *ownerShard, id string) (place, bool) {
	if o := sh.m[id]; o != nil {
		return place{o: o}, true
	}
	m, ok, _ := sh.leavingLocked(id)
	if !ok {
		return place{}, false
	}
	return place{host: m.to, gen: m.gen, stored: true}, true
}

// follow learns again the forwarding route of a move from here that here
// found (p names a host); a no-op otherwise.
func (kr *kindRuntime) follow(id string, p place) {
	if p.o == nil && p.host != "" {
		kr.t.routes.learn(relocation.Object{Kind: kr.spec.name, ID: id}, p.host, p.gen, true)
	}
}

// local returns the owner of object id on this host, or nil.
func (kr *kindRuntime) local(id string) *owner {
	sh := kr.shard(id)
	sh.mu.RLock()
	o := sh.m[id]
	sh.mu.RUnlock()
	return o
}

// leave takes o, whose move from here is past relay-ready, out of the
// kind's owners and marks its object leaving by move m until the move
// ends (departed): it is never activated here again meanwhile
// (router.activate).
func (kr *kindRuntime) leave(o *owner, m leavingMove) {
	id := o.ref.ID
	sh := kr.shard(id)
	sh.mu.Lock()
	if sh.m[id] == o {
		delete(sh.m, id)
	}
	if sh.leaving == nil {
		sh.leaving = map[string]leavingMove{}
	}
	sh.leaving[id] = m
	o.left.Store(true)
	sh.mu.Unlock()
}

// departed ends move's mark on object id (leave): the target committed,
// or the move ended without it.
func (kr *kindRuntime) departed(id string, move relocation.MoveID) {
	sh := kr.shard(id)
	sh.mu.Lock()
	if m, ok := sh.leaving[id]; ok && m.id == move {
		delete(sh.leaving, id)
		sh.departed++
	}
	sh.mu.Unlock()
}

// addIncoming installs a new owner of object id for a move to here,
// sealed (messages sent here directly wait in its hold: the temporary
// queue); nil if the object has an owner here already.
func (kr *kindRuntime) addIncoming(id string) *owner {
	sh := kr.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[id] != nil {
		return nil
	}
	o := kr.t.newOwner(kr.spec, kr, Ref{Kind: kr.spec.name, ID: id})
	o.incoming.Store(true)
	o.inbox.Freeze() // not yet published: no lock needed
	o.mb.Seal()
	if sh.m == nil {
		sh.m = map[string]*owner{}
	}
	sh.m[id] = o
	return o
}

// lookHere finds object id on this host (hereLocked: its owner, or the
// move from here it is leaving by), and how many moves from here have
// ended in its shard so far (install compares them).
func (kr *kindRuntime) lookHere(id string) (p place, ok bool, departed uint64) {
	sh := kr.shard(id)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	p, ok = kr.hereLocked(sh, id)
	_, _, departed = sh.leavingLocked(id)
	return p, ok, departed
}

// activation is what an activation's store calls found, for its owner.
type activation struct {
	row      relocation.Ownership // the row committed for this run
	epoch    uint64               // the lease's lapses seen before the store calls (lease.go)
	snap     route.Snapshot       // the order state the row kept
	tookOver bool                 // the row named a crashed owner: its gaps are a failure fact
	window   int64                // the failure fact's window (gapFacts.factWindow), if tookOver
	// gapTimeout is Config.TakeoverGapTimeout, if tookOver.
	gapTimeout int64
}

// install installs the owner of object id that an activation made, unless
// the shard has meanwhile an owner of it, or a move from here of it
// (found: that place), or a move from here ended since lookHere counted
// departed (changed: the row the store returned may be that move's
// target's by now; the caller asks the store again).
func (kr *kindRuntime) install(id string, departed uint64, a activation) (p place, found, changed bool) {
	sh := kr.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p, ok := kr.hereLocked(sh, id); ok {
		return p, true, false
	}
	if _, _, now := sh.leavingLocked(id); now != departed {
		return place{}, false, true
	}
	o := kr.t.newOwner(kr.spec, kr, Ref{Kind: kr.spec.name, ID: id})
	o.row = a.row
	o.epoch.Store(a.epoch)
	o.prev = sh.passivating[id]
	if a.tookOver {
		// The crashed owner is a failure fact for this object (not yet
		// published: no lock needed).
		o.inbox.TakenOver(kr.t.nanotime(), a.window, a.gapTimeout)
	}
	if len(a.snap.Senders) > 0 || a.snap.Takeover != (route.TakeoverAge{}) {
		o.restoreOrderLocked(a.snap, kr.t.nanotime()) // not yet published: no lock needed
	}
	if sh.m == nil {
		sh.m = map[string]*owner{}
	}
	sh.m[id] = o
	return place{o: o}, false, false
}

// remove takes o out of the kind's owners, if it is still there.
func (kr *kindRuntime) remove(o *owner) {
	sh := kr.shard(o.ref.ID)
	sh.mu.Lock()
	if sh.m[o.ref.ID] == o {
		delete(sh.m, o.ref.ID)
	}
	sh.mu.Unlock()
}

// endTaken ends an activation whose object another host took over while
// this host's lease had lapsed: it leaves the owner table, no hook runs,
// its state is dropped (a persistent object's is in the store, where its
// new owner loaded it) and the row is not touched; first and the messages
// it held — queued, or held for their order — go on, in order, to the
// object's new owner. While a move of the object is under way the move
// settles it (its commit finds the row another's): only first goes on,
// ahead of the messages that come after it.
func (kr *kindRuntime) endTaken(o *owner, first *payload.Message) {
	var msgs []*payload.Message
	if first != nil {
		msgs = append(msgs, first)
	}
	ended := !o.moving.Load() && o.dropped.CompareAndSwap(false, true)
	if ended {
		kr.remove(o)
		queued, held := o.closeBox()
		for _, e := range append(queued, held...) {
			if e.Msg != nil {
				msgs = append(msgs, e.Msg)
				e.Msg = nil
			}
			e.Release()
		}
	}
	if len(msgs) > 0 {
		kr.t.handOn(kr, o.ref.ID, msgs)
	}
	if !ended {
		return
	}
	kr.t.tallies.droppedLapsed.Add(kr.t.log, int64(len(msgs)), "object", o.ref.String(), "handed_on", len(msgs))
	o.state = nil
	close(o.gone)
	kr.t.obs.Deactivated(kr.spec.name)
	kr.t.system.Root.Stop(o.pid)
}

// endFenced ends a fenced activation in its own turn: the owner leaves
// the kind's owners (its next message looks the object up again and
// finds its newer owner), its queued requests fail with errFenced and
// its queued one-way messages are counted as dropped. No deactivate hook
// runs and the Location Store row is not touched: it is not this
// activation's any more.
func (kr *kindRuntime) endFenced(o *owner) {
	kr.remove(o)
	queued, held := o.closeBox()
	for _, e := range append(queued, held...) {
		if e.Msg != nil && isApplication(e) {
			kr.t.obs.Rejected(o.spec.name, RejectShuttingDown)
			kr.t.persist.droppedOutputs.Add(1)
			if hv := e.Msg.Header(); len(hv.ReplyTo()) > 0 {
				kr.t.requests.routeReply(hv.ReplyTo(), hv.Op(), reply{err: errFenced})
			}
		}
		e.Release()
	}
	o.state = nil
	close(o.gone)
	kr.t.obs.Deactivated(kr.spec.name)
	kr.t.system.Root.Stop(o.pid)
}

// channelRuntime is a channel on a host: its subscriber owners, by message
// type, and round-robin cursors for requests.
type channelRuntime struct {
	name    string
	specs   []*spec
	subs    []*owner
	byType  map[string][]*owner
	targets map[string][]target // byType as send targets
	serve   map[string]*servers
}

type servers struct {
	owners []*owner
	next   atomic.Uint32
}

func (cr *channelRuntime) serving(t string) {
	if cr.serve == nil {
		cr.serve = map[string]*servers{}
	}
	s := cr.serve[t]
	if s == nil {
		s = &servers{}
		cr.serve[t] = s
	}
	// Filled once byType is complete for t; see pick.
	s.owners = nil
	for _, o := range cr.byType[t] {
		if o.spec.handlers[t].request {
			s.owners = append(s.owners, o)
		}
	}
}

// pick returns the next subscriber serving requests of type t, skipping
// avoid (the asking owner itself) when another exists.
func (cr *channelRuntime) pick(t string, avoid *owner) *owner {
	s := cr.serve[t]
	if s == nil || len(s.owners) == 0 {
		return nil
	}
	n := uint32(len(s.owners))
	for i := uint32(0); i < n; i++ {
		o := s.owners[(s.next.Add(1)-1)%n]
		if o != avoid {
			return o
		}
	}
	return nil
}

// def returns the kind's definition (read-only after Start).
func (kr *kindRuntime) def() *spec { return kr.spec }

// isApplication reports whether e is an application message (not a
// control item or a skip notice).
func isApplication(e *mailbox.Envelope) bool {
	return e.Msg != nil && e.Msg.Header().Flags()&flagSkip == 0
}

// place is where an object runs: a local owner, or another host.
type place struct {
	o    *owner
	host string
	gen  uint64 // the owner generation the route knows (0: unknown)
	// stored: the place comes from the store, not the route table.
	stored bool
}
