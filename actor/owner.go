package actor

import (
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

	// Counters of Stats, this part's own.
	gapsClosed atomic.Int64 // sequence numbers given up on after a host failure (Stats.GapsClosed)
	heldOut    atomic.Int64 // messages held out of order (Stats.HeldOutOfOrder)
	late       atomic.Int64 // messages run after a gap before them was given up on (Stats.Late)
	repeats    atomic.Int64 // messages sent again that ran here already, dropped (Stats.Repeats)
	takenOver  atomic.Int64 // objects found taken over by another host after a lapse (Stats.TakenOver)
	running    atomic.Int64 // turns running now
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
	o := &owner{t: ow, spec: s, ref: ref, kr: kr, gone: make(chan struct{}), since: time.Now(), sinceNano: ow.nanotime()}
	o.ctx = ow.context(o)
	o.out.adm = ow.admit
	o.mb = mailbox.New(ow.cfg.ApplicationLimits, ow.cfg.LifecycleLimits, &ow.jobs.counters)
	o.inbox.Order().MaxHeld = ow.cfg.ReorderBound
	o.mb.Owner = o
	o.mb.OnStop = o.stopped
	o.lastActive.Store(ow.nanotime())
	o.gate = ow.persist.gateFor(o)
	ow.actors.Add(1)
	ow.spawnMu.Lock()
	ow.spawning = o.mb
	o.pid = ow.system.Root.Spawn(ow.props)
	ow.spawning = nil
	ow.spawnMu.Unlock()
	ow.stats.addOwners(1)
	ow.obs.Activated(s.name)
	return o
}

func (o *owner) stopped() {
	o.stopOnce.Do(func() {
		o.t.stats.addOwners(-1)
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
		case <-o.t.life.closing():
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
		o.t.takenOver.Add(1)
		o.postControl(controlTaken)
	}
}

// turnMsg runs one application message.
func (o *owner) turnMsg(e *mailbox.Envelope) {
	o.t.running.Add(1)
	defer o.t.running.Add(-1)
	hv := e.Msg.Header()
	hd := o.spec.handlers[string(hv.Type())]
	if hd == nil {
		o.t.obs.Rejected(o.spec.name, RejectUnknownType)
		o.fail(e, payload.NewError(payload.NotFound, "actor", describe(o.spec)+": no handler for message type "+string(hv.Type())))
		return
	}
	var start int64
	if o.t.obs.timed {
		start = o.t.nanotime()
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
	end := o.t.nanotime()
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
		if o.kr == nil || o.t.nanotime()-o.lastActive.Load() < int64(o.t.cfg.IdleTimeout) {
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
	limit := ow.nanotime() - int64(ow.cfg.IdleTimeout)
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
	now := ow.nanotime()
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

// turnsRunning returns how many turns run now.
func (ow *ownerTable) turnsRunning() int64 { return ow.running.Load() }

// kind returns the kind named name, or nil.
func (ow *ownerTable) kind(name string) *kindRuntime { return ow.kinds[name] }

// allKinds returns the kinds by name (fixed at Start: callers only read).
func (ow *ownerTable) allKinds() map[string]*kindRuntime { return ow.kinds }

// leaseGate is the lease gate (leasegate.go) whose waiters are owners.
type leaseGate = checkGate[*owner]
