package actor

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// The owners part (ownerTable, owner, kindRuntime, channelRuntime): the
// kinds' and channels' owners and their turns.
//
// Owns: the kinds (their owners in 32 shards each) and channels, the
// actor system, spawning, the owners held for their gaps; each owner's
// mailbox, state and turns.
// Lock: ownerShard.mu (RW) → owner.seqMu → mailbox.mu; ownerShard.mu →
// ownerTable.spawnMu; owner.seqMu → ownerTable.heldMu (LOCK_ORDER.md).
// Never across a store call or a send.
// May call: requests, peers, gaps and the leaves; lifecycle items other
// parts post to an owner run in its turns without the owner knowing them.
// Invariants: one owner per object per host; one turn per owner at a
// time; an owner's state is touched only in its turns.

// owner is the single place an object's (or a channel subscriber's)
// messages run: a protoactor actor with a berth mailbox. Its fields other
// than the mailbox and the atomics are touched only in its own turns.
// ownerTable is what hosts the owners' actors: protoactor's actor system,
// the spawn (one at a time: the next spawn's mailbox is handed over in
// spawning), the wait for every owner's actor to stop, and the owners
// held after a deactivation for their gaps.
//
// Owns: the kinds and channels (their owners, in shards), system, props,
// spawning, actors, held, seed.
// Lock: spawnMu (a leaf) guards spawning; heldMu guards held and comes
// after owner.seqMu (LOCK_ORDER.md).
// Invariants: an owner is in held only while it keeps messages for its
// gaps; every spawned actor is counted in actors until it stops.
type ownerTable struct {
	h        *Host
	specs    []*spec                    // registered kinds and channels, until Start
	kinds    map[string]*kindRuntime    // fixed at Start
	channels map[string]*channelRuntime // fixed at Start
	system   *pa.ActorSystem
	props    *pa.Props
	spawnMu  sync.Mutex
	spawning *mailbox.Mailbox // the mailbox the next spawn takes; guarded by spawnMu
	actors   sync.WaitGroup   // owners whose actor has not stopped
	heldMu   sync.Mutex       // guards held
	held     map[*owner]struct{}
	seed     maphash.Seed // spreads objects over a kind's shards
	persist  persister    // persistent kinds' writes and output gates (persist.go)
}

type owner struct {
	host *Host
	spec *spec
	ref  Ref
	mb   *mailbox.Mailbox
	pid  *pa.PID

	state any
	ready bool   // state made by the factory
	prev  *owner // the previous activation, if it was still deactivating
	ctx   Context

	row          relocation.Ownership // the object's row as of its activation or move here
	incoming     atomic.Bool          // a move's target: held until the commit
	moving       atomic.Bool          // a move away is under way
	left         atomic.Bool          // the move away passed relay-ready: no longer the owner
	deactPending atomic.Bool          // a controlDeactivate is queued

	// The receive order (inbox.go). Lock order: ownerShard.mu, then
	// seqMu, then the mailbox's lock.
	seqMu     sync.Mutex
	inbox     route.Inbox[*mailbox.Envelope] // the receive side: open, frozen (sealed or incoming), shut; guarded by seqMu
	trail     route.Trail                    // hosts the object left recently; guarded by seqMu
	heldCount int                            // messages held out of order, as last noted (noteHeldLocked); guarded by seqMu
	pushed    map[string]struct{}            // senders told to pause (pressure.go); guarded by seqMu
	pushQ     []pushAdvice                   // pauses and resumes decided, not yet sent, in order; guarded by seqMu
	pushing   bool                           // a goroutine is sending pushQ (sendPushes); guarded by seqMu

	yieldBeforePush func() // tests: widens sendPushes' window between the lock and the sends; guarded by seqMu

	lastActive atomic.Int64  // nanotime of the last accepted message or turn's end (with IdleTimeout)
	gone       chan struct{} // closed when the deactivation finished
	out        outbox        // sends from this owner's handlers awaiting permits
	gate       *stateGate    // a persistent kind's writes and output gate (persist.go); nil otherwise
	kr         *kindRuntime  // nil for channel subscribers
	stopOnce   sync.Once
}

// Control items on the lifecycle lane.
type control uint8

const (
	controlPassivate  control = iota + 1 // deactivate if still idle and empty
	controlDeactivate                    // host stopping: deactivate now
	controlFenced                        // a state write was fenced: end the activation (persist.go)
)

// newOwner makes an owner and spawns its actor. Callers serialize per object.
func (ow *ownerTable) newOwner(s *spec, kr *kindRuntime, ref Ref) *owner {
	h := ow.h
	o := &owner{host: h, spec: s, ref: ref, kr: kr, gone: make(chan struct{})}
	o.ctx = Context{host: h, owner: o}
	o.out.host, o.out.o = h, o
	o.mb = mailbox.New(h.cfg.ApplicationLimits, h.cfg.LifecycleLimits, &h.jobs.counters)
	o.inbox.Order().MaxHeld = h.cfg.ReorderBound
	o.mb.Owner = o
	o.mb.OnStop = o.stopped
	o.lastActive.Store(nanotime())
	o.gate = ow.persist.gateFor(o)
	ow.actors.Add(1)
	ow.spawnMu.Lock()
	ow.spawning = o.mb
	o.pid = ow.system.Root.Spawn(ow.props)
	ow.spawning = nil
	ow.spawnMu.Unlock()
	h.stats.owners.Add(1)
	h.obs.Activated(s.name)
	return o
}

func (o *owner) stopped() {
	o.stopOnce.Do(func() {
		o.host.stats.owners.Add(-1)
		o.host.owners.actors.Done()
	})
}

// postControl queues a control item on the owner's lifecycle lane. Control
// never takes a job permit.
// requestDeactivate posts one deactivation; while one is pending, more
// requests add nothing (queued duplicates would keep the mailbox from ever
// being empty, and each would post itself again).
func (o *owner) requestDeactivate() {
	if o.deactPending.CompareAndSwap(false, true) {
		o.postControl(controlDeactivate)
	}
}

func (o *owner) postControl(c control) {
	e := mailbox.NewEnvelope()
	e.Lane = mailbox.Lifecycle
	e.Control = c
	if err := o.mb.AdmitOverflow(e); err != nil {
		e.Release()
	}
}

// lifecycleItem is work another part puts on an owner's lifecycle lane to
// run in a turn of the owner (a move's start, seal and capture, restore):
// the owner runs it and knows nothing of it.
type lifecycleItem interface{ run() }

// ownerActor is the protoactor actor of every owner; the owner itself is
// found from the item's mailbox, so one value serves them all.
type ownerActor struct{}

func (ownerActor) Receive(c pa.Context) {
	if e, ok := c.Message().(*mailbox.Envelope); ok {
		e.Mailbox().Owner.(*owner).turn(e)
	}
}

// turn runs one item. The mailbox releases the item afterwards, whatever
// happens here.
func (o *owner) turn(e *mailbox.Envelope) {
	if e.Msg == nil {
		switch c := e.Control.(type) {
		case control:
			o.control(c)
		case lifecycleItem:
			c.run() // a move's step in this turn (mover.go)
		}
		return
	}
	o.turnMsg(e)
	if o.gate != nil {
		o.gate.endTurn() // the turn's write and outputs (persist.go)
	}
}

// turnMsg runs one application message.
func (o *owner) turnMsg(e *mailbox.Envelope) {
	h := o.host
	if dl := h.lease.deadline.Load(); dl != 0 && wallNano() > dl {
		// Past its lease another host may own the object: start no turn.
		h.obs.Rejected(o.spec.name, RejectShuttingDown)
		o.fail(e, payload.NewError(payload.Unavailable, "actor", "host "+h.name+" is past its lease"))
		return
	}
	h.stats.running.Add(1)
	defer h.stats.running.Add(-1)
	hv := e.Msg.Header()
	hd := o.spec.handlers[string(hv.Type())]
	if hd == nil {
		h.obs.Rejected(o.spec.name, RejectUnknownType)
		o.fail(e, payload.NewError(payload.NotFound, "actor", describe(o.spec)+": no handler for message type "+string(hv.Type())))
		return
	}
	var start int64
	if h.obs.timed {
		start = nanotime()
	}
	if dl := hv.DeadlineUnixNano(); dl != 0 && wallNano() > dl {
		// The sender has given up; do not run work nobody waits for.
		h.obs.Rejected(o.spec.name, RejectExpired)
		o.fail(e, ErrRequestTimeout)
		return
	}
	o.ctx.env = e
	var outcome Outcome
	if h.trace == nil {
		outcome = o.run(hd, e)
	} else {
		h.trace.begin(&o.ctx, hd, hv) // the turn's span (trace.go)
		outcome = o.run(hd, e)
		o.ctx.endTurnSpan()
	}
	o.ctx.env = nil
	if h.cfg.IdleTimeout > 0 || h.obs.timed {
		end := nanotime()
		o.lastActive.Store(end)
		if h.obs.timed {
			h.obs.Handled(o.spec.name, durationNs(start-e.Admitted), durationNs(end-start), outcome)
		}
	}
}

// run makes the state if needed and runs the handler, recovering a panic.
func (o *owner) run(hd *handler, e *mailbox.Envelope) (outcome Outcome) {
	defer func() {
		if r := recover(); r != nil {
			o.host.log.Error("handler panicked", "owner", o.ref.String(), "type", hd.typeName, "panic", r)
			o.fail(e, &payload.Error{Kind: payload.InternalFailure, Op: "actor", Detail: fmt.Sprintf("%s: handler for %s panicked: %v", o.ref, hd.typeName, r)})
			outcome = OutcomePanic
		}
	}()
	if !o.ready {
		if o.prev != nil {
			<-o.prev.gone // the previous activation's deactivate hook finishes first
			o.prev = nil
		}
		var st any
		var err error
		if o.gate != nil {
			st, err = o.gate.load(&o.ctx) // the last durable state, or the factory's
		} else {
			st, err = o.spec.factory(&o.ctx, o.ref.ID)
		}
		if err != nil {
			o.host.obs.Rejected(o.spec.name, RejectActivation)
			o.fail(e, &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: o.ref.String() + ": activation failed", Err: err})
			return OutcomeError
		}
		o.state, o.ready = st, true
	}
	if o.gate != nil {
		o.gate.ran = true
	}
	if err := hd.run(&o.ctx, o.state, e); err != nil {
		if e.HasPermit() && payload.KindOf(err) == payload.ProtocolError {
			// The payload did not decode: the handler never started.
			o.host.obs.Rejected(o.spec.name, RejectProtocol)
		}
		o.fail(e, err)
		return OutcomeError
	}
	return OutcomeOK
}

// fail ends a request with err (a one-way message's error is logged).
func (o *owner) fail(e *mailbox.Envelope, err error) {
	o.ctx.traceError(err)
	hv := e.Msg.Header()
	if route := hv.ReplyTo(); len(route) > 0 {
		// The same error for the asker wherever it is (HandlerError).
		o.reply(route, hv.Op(), reply{err: handlerError(err)})
		return
	}
	o.host.log.Debug("one-way message failed", "owner", o.ref.String(), "type", string(hv.Type()), "err", err)
}

// control runs a lifecycle control item.
func (o *owner) control(c control) {
	switch c {
	case controlPassivate:
		if o.kr == nil || nanotime()-o.lastActive.Load() < int64(o.host.cfg.IdleTimeout) {
			return
		}
		o.kr.deactivate(o, false)
	case controlDeactivate:
		o.deactPending.Store(false)
		if o.kr != nil {
			o.kr.deactivate(o, true)
		}
	case controlFenced:
		if o.kr != nil {
			o.kr.endFenced(o)
		}
	}
}

// reply sends a reply the running turn made; a persistent owner's waits
// in its output gate for the turn's write.
func (o *owner) reply(route []byte, op payload.OpID, r reply) {
	if g := o.gate; g != nil && !g.passes() {
		g.hold(heldOutput{route: append([]byte(nil), route...), op: op, r: r})
		return
	}
	o.host.requests.routeReply(route, op, r)
}

// send sends m to t from the running turn, through the owner's outbox; a
// persistent owner's waits in its output gate first.
func (o *owner) send(t target, m *payload.Message) {
	if g := o.gate; g != nil && !g.passes() {
		g.hold(heldOutput{t: t, m: m})
		return
	}
	o.out.sendOne(t, m)
}

// sendFanout queues a fan-out of the running turn (Publish), like send.
func (o *owner) sendFanout(ps *pendingSend) {
	if g := o.gate; g != nil && !g.passes() {
		g.hold(heldOutput{ps: ps})
		return
	}
	o.out.enqueue(ps)
}

// kindRuntime is a kind on a host: its owners, sharded by object id.
type kindRuntime struct {
	spec   *spec
	host   *Host
	shards [32]ownerShard
}

type ownerShard struct {
	mu          sync.RWMutex
	m           map[string]*owner // guarded by mu
	passivating map[string]*owner // deactivating owners, guarded by mu
	_           [16]byte
}

func (kr *kindRuntime) shard(id string) *ownerShard {
	return &kr.shards[maphash.String(kr.host.owners.seed, id)%uint64(len(kr.shards))]
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
	h := kr.host
	sh := kr.shard(o.ref.ID)
	sh.mu.Lock()
	o.seqMu.Lock()
	// Messages held out of order wait for their gaps (until the missing
	// message arrives, or a failure fact closes the gap): the owner stays
	// until they ran — unless its host is leaving a
	// network: then they go with the order state into the store row, and
	// the object's next activation (elsewhere) holds them until the
	// missing messages, which their senders send there, arrive.
	leaving := stopping && h.peers.tr != nil && h.drainer.draining.Load()
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
	if h.peers.tr != nil {
		order = o.orderSnapshotLocked(nanotime())
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
					h.log.Error("deactivate hook panicked", "owner", o.ref.String(), "panic", r)
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
			h.log.Warn("final state of a persistent object not written", "object", o.ref.String(), "err", err)
		}
	}
	o.state = nil
	obj := relocation.Object{Kind: o.ref.Kind, ID: o.ref.ID}
	ctx, cancel := h.life.storeContext()
	_, err := h.store.Preserve(ctx, obj, o.row, order)
	cancel()
	if err != nil {
		h.log.Debug("location store row not preserved", "object", obj.String(), "err", err)
	}
	sh.mu.Lock()
	if sh.passivating[o.ref.ID] == o {
		delete(sh.passivating, o.ref.ID)
	}
	sh.mu.Unlock()
	close(o.gone)
	h.obs.Deactivated(kr.spec.name)
	h.owners.system.Root.Stop(o.pid)
}

// local returns the owner of object id on this host, or nil.
func (kr *kindRuntime) local(id string) *owner {
	sh := kr.shard(id)
	sh.mu.RLock()
	o := sh.m[id]
	sh.mu.RUnlock()
	return o
}

// closeBox closes the owner's mailbox for good and returns every item it
// had, in order, and the messages its order held, for the caller to end or
// send on.
func (o *owner) closeBox() (queued, held []*mailbox.Envelope) {
	o.seqMu.Lock()
	queued = o.mb.Close()
	held = o.inbox.Shut()
	o.noteHeldLocked()
	relieved := o.relievedLocked(true)
	o.seqMu.Unlock()
	if relieved {
		o.sendPushes()
	}
	return queued, held
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

// wallNano approximates the wall clock in Unix nanoseconds from the
// monotonic clock, which is cheaper to read; it drifts from the wall clock
// only by clock adjustments since the process started, which is precise
// enough for skipping expired work.
func wallNano() int64 { return clockBaseWall + nanotime() }

var clockBaseWall = clockBase.UnixNano()

func durationNs(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}

// hasMovable reports whether the host has objects of a kind that relocates.
func (ow *ownerTable) hasMovable() bool {
	for _, kr := range ow.kinds {
		if kr.spec.policy != DisableRelocation && len(kr.all()) > 0 {
			return true
		}
	}
	return false
}

// deactivateAll asks every object to run its deactivate hook in a last
// turn, and returns how many it asked.
func (ow *ownerTable) deactivateAll() int {
	n := 0
	for _, kr := range ow.kinds {
		for _, o := range kr.all() {
			o.requestDeactivate()
			n++
		}
	}
	return n
}

// passivateIdle passivates the objects idle for longer than IdleTimeout
// (the janitor's job).
func (ow *ownerTable) passivateIdle(time.Time) (done bool) {
	h := ow.h
	limit := nanotime() - int64(h.cfg.IdleTimeout)
	for _, kr := range ow.kinds {
		for _, o := range kr.all() {
			if o.lastActive.Load() < limit && o.mb.Idle() {
				o.postControl(controlPassivate)
			}
		}
	}
	return false
}

// forgetIdleSenders drops the order state of senders idle for twice the
// streams' idle time, on every owner (they hold nothing).
func (ow *ownerTable) forgetIdleSenders() {
	h := ow.h
	now := nanotime()
	idle := 2 * int64(streamIdleFor(h.cfg.FollowDuration))
	for _, kr := range ow.kinds {
		for _, o := range kr.all() {
			o.seqMu.Lock()
			if ord := o.inbox.Order(); ord.Senders() > 0 {
				ord.Forget(now, idle)
			}
			o.seqMu.Unlock()
		}
	}
}

// handlerFor finds the kind and its handler for a message type.
func (ow *ownerTable) handlerFor(kind, typ string) (*kindRuntime, *handler, error) {
	h := ow.h
	kr := ow.kinds[kind]
	if kr == nil {
		h.obs.Rejected(kind, RejectNotFound)
		return nil, nil, payload.NewError(payload.NotFound, "actor", "no kind "+kind+" on host "+h.name)
	}
	hd := kr.spec.handlers[typ]
	if hd == nil {
		h.obs.Rejected(kind, RejectNotFound)
		return nil, nil, payload.NewError(payload.NotFound, "actor", "kind "+kind+" has no handler for "+typ)
	}
	return kr, hd, nil
}
