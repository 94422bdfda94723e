package actor

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime/debug"
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
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	gate     *leaseGate
	jobs     *jobQueue
	store    relocation.Store
	routes   *routes
	peers    *peers
	gaps     *gapFacts
	requests *requestTable
	admit    admitter // the admission, which admits the owners' handlers' sends (outbox)
	record   *moveLog // the moves this host noted (an object's Inspection lists its own)
	// context returns an owner's Context, the API its handlers get (the
	// host wires it: a Context sends through the host).
	context func(o *owner) Context
	// afterRelease, set by tests only, runs after held messages are
	// released to an owner's mailbox, with the owner's seqMu held.
	afterRelease atomic.Pointer[func()]
	specs        []*spec                    // registered kinds and channels, until Start
	kinds        map[string]*kindRuntime    // fixed at Start
	channels     map[string]*channelRuntime // fixed at Start
	system       *pa.ActorSystem
	props        *pa.Props
	spawnMu      sync.Mutex
	spawning     *mailbox.Mailbox // the mailbox the next spawn takes; guarded by spawnMu
	actors       sync.WaitGroup   // owners whose actor has not stopped
	heldMu       sync.Mutex       // guards held
	held         map[*owner]struct{}
	seed         maphash.Seed // spreads objects over a kind's shards
	persist      persister    // persistent kinds' writes and output gates (persist.go)
	// handOn sends, in order, the messages of an object taken over by
	// another host on to where it runs now (router.handOn, wired by the
	// host: the router ranks above the owners).
	handOn func(kr *kindRuntime, id string, msgs []*payload.Message)
}

type owner struct {
	t    *ownerTable // the owners' part: its kinds and the parts it uses
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
	stateEnded   atomic.Bool          // a drain deactivates it, no host having taken it: its state ends (counted once)
	epoch        atomic.Uint64        // the lease's lapse epoch its ownership is known good at (lease.go)
	taken        atomic.Bool          // another host took the object over while this host's lease had lapsed
	dropped      atomic.Bool          // endTaken ended the activation

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
	since      time.Time     // when the activation (or the move here) began
	sinceNano  int64         // since, by nanotime
	turns      atomic.Uint64 // messages this activation began to run, berth's own not counted (written by its turns, before the handler)
	lastTurn   atomic.Int64  // nanotime of the end of the last of them (0: none; written by its turns)
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
	controlTaken                         // another host took the object over: end the activation, hand its messages on
)

// newOwner makes an owner and spawns its actor. Callers serialize per object.
func (ow *ownerTable) newOwner(s *spec, kr *kindRuntime, ref Ref) *owner {
	o := &owner{t: ow, spec: s, ref: ref, kr: kr, gone: make(chan struct{}), since: time.Now(), sinceNano: nanotime()}
	o.ctx = ow.context(o)
	o.out.adm, o.out.o = ow.admit, o
	o.mb = mailbox.New(ow.cfg.ApplicationLimits, ow.cfg.LifecycleLimits, &ow.jobs.counters)
	o.inbox.Order().MaxHeld = ow.cfg.ReorderBound
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
	ow.stats.owners.Add(1)
	ow.obs.Activated(s.name)
	return o
}

func (o *owner) stopped() {
	o.stopOnce.Do(func() {
		o.t.stats.owners.Add(-1)
		o.t.actors.Done()
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
// happens here. An object's turn first needs the host's lease live and the
// object's ownership checked since the last lapse (lease.go): else it
// waits (jeopardy), or hands the item on to the object's new owner.
func (o *owner) turn(e *mailbox.Envelope) {
	if o.kr != nil && !o.mayRun() && !o.waitTurn(e) {
		return
	}
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

// mayRun reports whether a turn of the object may start now: its host's
// lease is live, its ownership checked since the last lapse, and no other
// host took it over.
func (o *owner) mayRun() bool {
	g := o.t.gate
	return g.live() && g.current(o.epoch.Load()) && !o.taken.Load()
}

// turnOutcome is what a turn that waited for the lease may do.
type turnOutcome uint8

const (
	turnRun     turnOutcome = iota + 1 // the lease is live and the object this run's: run
	turnTaken                          // another host took the object over: hand the item on
	turnExpired                        // the message's deadline passed while it waited
	turnClosing                        // the host closes
)

// awaitTurn blocks a turn until it may run: the lease is live and the
// object's ownership checked at the current epoch (a check is asked for
// when it is not). It returns early when the object was found taken
// over, the message's deadline (Unix ns, 0: none) passed, or the host
// closes.
func (o *owner) awaitTurn(deadline int64) turnOutcome {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if o.taken.Load() {
			return turnTaken
		}
		checked := o.t.gate.current(o.epoch.Load())
		ch, live := o.t.gate.look(o, checked)
		if live && checked {
			return turnRun
		}
		var expire, again <-chan time.Time
		if deadline != 0 {
			left := time.Duration(deadline - wallNano())
			if left <= 0 {
				return turnExpired
			}
			if timer == nil {
				timer = time.NewTimer(left)
			}
			expire = timer.C
		}
		if !live {
			// A renewal publishes the deadline and wakes every turn; one
			// that passes the deadline while this turn waits for a check
			// wakes nobody: look again a renewal interval later.
			again = time.After(o.t.cfg.LeaseRenew)
		}
		select {
		case <-ch:
		case <-again:
		case <-expire:
			return turnExpired
		case <-o.t.life.done:
			return turnClosing
		}
	}
}

// waitTurn handles an item whose turn may not start now (mayRun): it
// waits while the host is in jeopardy or the object's ownership is being
// checked, and reports whether the turn runs. Otherwise the item ended
// here: a message whose deadline passed fails as a turn would fail it;
// one of an object taken over goes on to its new owner (and ends the
// activation); at Close, it ends with ShuttingDown.
func (o *owner) waitTurn(e *mailbox.Envelope) bool {
	var dl int64
	if e.Msg != nil {
		dl = e.Msg.Header().DeadlineUnixNano()
	}
	switch o.awaitTurn(dl) {
	case turnRun:
		return true
	case turnExpired:
		o.t.obs.Rejected(o.spec.name, RejectExpired)
		o.fail(e, ErrRequestTimeout)
	case turnClosing:
		if e.Msg != nil {
			o.t.obs.Rejected(o.spec.name, RejectShuttingDown)
			o.fail(e, ErrShuttingDown)
		}
	case turnTaken:
		switch c := e.Control.(type) {
		case lifecycleItem:
			// A move's step: the move settles with the store (its
			// preflight or its commit finds the object another host's).
			return true
		case control:
			if c == controlFenced {
				return true
			}
		}
		var m *payload.Message
		if e.Msg != nil {
			m, e.Msg = e.Msg, nil // the envelope ends with the turn; its message goes on
		}
		o.kr.endTaken(o, m)
	}
	return false
}

// takenOver marks the object taken over by another host (an ownership
// check after a lapse found its row another's) and has its activation
// end in a turn of its own (controlTaken).
func (o *owner) takenOver() {
	if o.taken.CompareAndSwap(false, true) {
		o.t.stats.takenOver.Add(1)
		o.postControl(controlTaken)
	}
}

// turnMsg runs one application message.
func (o *owner) turnMsg(e *mailbox.Envelope) {
	o.t.stats.running.Add(1)
	defer o.t.stats.running.Add(-1)
	hv := e.Msg.Header()
	hd := o.spec.handlers[string(hv.Type())]
	if hd == nil {
		o.t.obs.Rejected(o.spec.name, RejectUnknownType)
		o.fail(e, payload.NewError(payload.NotFound, "actor", describe(o.spec)+": no handler for message type "+string(hv.Type())))
		return
	}
	var start int64
	if o.t.obs.timed {
		start = nanotime()
	}
	if dl := hv.DeadlineUnixNano(); dl != 0 && wallNano() > dl {
		// The sender has given up; do not run work nobody waits for.
		o.t.obs.Rejected(o.spec.name, RejectExpired)
		o.fail(e, ErrRequestTimeout)
		return
	}
	if !hd.builtin {
		o.turns.Add(1) // before the handler: whoever it answers sees it counted
	}
	o.ctx.env = e
	var outcome Outcome
	if o.t.trace == nil {
		outcome = o.run(hd, e)
	} else {
		o.t.trace.begin(&o.ctx, hd, hv) // the turn's span (trace.go)
		outcome = o.run(hd, e)
		o.ctx.endTurnSpan()
	}
	o.ctx.env = nil
	if hd.builtin {
		return // an inspection: not the object's activity
	}
	end := nanotime()
	o.lastTurn.Store(end)
	if o.t.cfg.IdleTimeout > 0 || o.t.obs.timed {
		o.lastActive.Store(end)
		if o.t.obs.timed {
			o.t.obs.Handled(o.spec.name, durationNs(start-e.Admitted), durationNs(end-start), outcome)
		}
	}
}

// run makes the state if needed and runs the handler, recovering a panic.
func (o *owner) run(hd *handler, e *mailbox.Envelope) (outcome Outcome) {
	defer func() {
		if r := recover(); r != nil {
			o.t.log.Error("handler panicked", "owner", o.ref.String(), "type", hd.typeName, "panic", r, "stack", string(debug.Stack()))
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
			o.t.obs.Rejected(o.spec.name, RejectActivation)
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
			o.t.obs.Rejected(o.spec.name, RejectProtocol)
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
	o.t.log.Debug("one-way message failed", "owner", o.ref.String(), "type", string(hv.Type()), "err", err)
}

// control runs a lifecycle control item.
func (o *owner) control(c control) {
	switch c {
	case controlPassivate:
		if o.kr == nil || nanotime()-o.lastActive.Load() < int64(o.t.cfg.IdleTimeout) {
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
	case controlTaken:
		// Reached only if the object is not taken over after all (waitTurn
		// ends a taken one's items): nothing to do.
	}
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
		sh := kr.shard(o.ref.ID)
		sh.mu.Lock()
		if sh.m[o.ref.ID] == o {
			delete(sh.m, o.ref.ID)
		}
		sh.mu.Unlock()
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

// reply sends a reply the running turn made; a persistent owner's waits
// in its output gate for the turn's write.
func (o *owner) reply(route []byte, op payload.OpID, r reply) {
	if g := o.gate; g != nil && !g.passes() {
		g.hold(heldOutput{route: append([]byte(nil), route...), op: op, r: r})
		return
	}
	o.t.requests.routeReply(route, op, r)
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

// holding returns the owners that hold messages out of order now.
func (ot *ownerTable) holding() []*owner {
	ot.heldMu.Lock()
	defer ot.heldMu.Unlock()
	owners := make([]*owner, 0, len(ot.held))
	for o := range ot.held {
		owners = append(owners, o)
	}
	return owners
}

// count returns how many objects of every kind have an owner on this
// host, those passivating included (their rows may still name this run).
func (ot *ownerTable) count() int {
	n := 0
	for _, kr := range ot.kinds {
		for i := range kr.shards {
			sh := &kr.shards[i]
			sh.mu.RLock()
			n += len(sh.m) + len(sh.passivating)
			sh.mu.RUnlock()
		}
	}
	return n
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
	leaving := stopping && kr.t.peers.tr != nil && kr.t.life.draining.Load()
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
		o.inbox.TakenOver(nanotime(), a.window, a.gapTimeout)
	}
	if len(a.snap.Senders) > 0 || a.snap.Takeover != (route.TakeoverAge{}) {
		o.restoreOrderLocked(a.snap, nanotime()) // not yet published: no lock needed
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

// wallNanoOf returns t on wallNano's scale: the process's start on the
// wall clock plus t's monotonic distance from it. A step of the wall clock
// since the start (NTP) moves neither t's figure nor wallNano's, so a
// deadline compared with wallNano keeps its length. t must carry a
// monotonic reading (time.Now and what is added to it do).
func wallNanoOf(t time.Time) int64 { return wallNanoOfFrom(t, clockBase, clockBaseWall) }

// wallNanoOfFrom is wallNanoOf for a start base, whose wall clock read
// baseWall.
func wallNanoOfFrom(t, base time.Time, baseWall int64) int64 {
	return baseWall + int64(t.Sub(base))
}

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
	if !ow.gate.live() {
		return false // jeopardy: no turn would run (each would wait on a goroutine)
	}
	limit := nanotime() - int64(ow.cfg.IdleTimeout)
	for _, kr := range ow.kinds {
		for _, o := range kr.all() {
			if o.lastActive.Load() < limit && o.mb.Idle() && o.mayRun() {
				o.postControl(controlPassivate)
			}
		}
	}
	return false
}

// forgetIdleSenders drops the order state of senders idle for twice the
// streams' idle time, on every owner (they hold nothing).
func (ow *ownerTable) forgetIdleSenders() {
	now := nanotime()
	idle := 2 * int64(streamIdleFor(ow.cfg.FollowDuration))
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
	kr := ow.kinds[kind]
	if kr == nil {
		ow.obs.Rejected(kind, RejectNotFound)
		return nil, nil, payload.NewError(payload.NotFound, "actor", "no kind "+kind+" on host "+ow.name)
	}
	hd := kr.spec.handlers[typ]
	if hd == nil {
		ow.obs.Rejected(kind, RejectNotFound)
		return nil, nil, payload.NewError(payload.NotFound, "actor", "kind "+kind+" has no handler for "+typ)
	}
	return kr, hd, nil
}

// envelopeOf makes a queue item of a frame received in a move record or a
// relay: the boundary copies it once.
func (ow *ownerTable) envelopeOf(frame []byte) *mailbox.Envelope {
	m, err := ow.reg.Open(ow.pool.Copy(frame))
	if err != nil {
		ow.obs.Rejected("", RejectProtocol)
		ow.peerLogs.malformed.Warn(ow.log, "relocation: undecodable frame in a move dropped", "err", err)
		return nil
	}
	e := mailbox.NewEnvelope()
	e.Msg = m
	return e
}

// endFenced ends a fenced activation in its own turn: the owner leaves
// the kind's owners (its next message looks the object up again and
// finds its newer owner), its queued requests fail with errFenced and
// its queued one-way messages are counted as dropped. No deactivate hook
// runs and the Location Store row is not touched: it is not this
// activation's any more.
func (kr *kindRuntime) endFenced(o *owner) {
	sh := kr.shard(o.ref.ID)
	sh.mu.Lock()
	if sh.m[o.ref.ID] == o {
		delete(sh.m, o.ref.ID)
	}
	sh.mu.Unlock()
	queued, held := o.closeBox()
	for _, e := range append(queued, held...) {
		if e.Msg != nil && isApplication(e) {
			kr.t.obs.Rejected(o.spec.name, RejectShuttingDown)
			kr.t.stats.droppedOutputs.Add(1)
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
