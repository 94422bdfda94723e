package actor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// The mover part (moveTable, moveDriver): the moves this host takes part
// in, either side, each driven on its own serial lane.
//
// Owns: the move drivers by id, the count of incoming moves per source,
// the log of the moves from here; each driver's machine
// (relocation.Source or Target), its envelopes and its pause clock.
// Lock: moveTable.mu, a leaf. A driver has no lock: its inputs (records
// off the link, link events, the tick, store results, Relocate's abort,
// the owner's lifecycle turns) run one at a time on its lane; the steps
// that must see the owner between turns (start, seal and capture) run in
// the owner's lifecycle turns, in their place on the lane.
// May call: the router, owners (and their receive side), routes, peers
// and the leaves; the Location Store on the move's store lane only.
// Invariants: the machine's effects run in the order it gave them; the
// user's code never runs on a transport's goroutine — the Capture runs
// in the owner's turn, the Restore (or the factory) on the move's lane's
// own goroutine — and neither runs under a lock; a target stays
// registered for its follow window (the machine's Forget) to answer late
// records.

// moveDriver carries out one move's state machine on this host: the source
// side (the object moves away) or the target side (it moves here). Inputs
// come from Relocate, the owner's lifecycle turns, the link, the tick and
// the store; each is run on the move's own serial lane, one at a time, in
// the order they came, so the driver needs no lock and nothing that
// delivers an input waits for another's move work: an input runs at once
// on the caller's goroutine when the lane is idle, and is queued
// otherwise. The machine's effects — records to send, actions — are
// carried out in the order it lists them. The steps that must see the
// owner between turns run inside the owner's lifecycle turns, in their
// place on the lane (serial.runHere): the start (the store look-up, then
// the preflight) and the seal with the capture (the user's Capture), in
// one turn, at the source. The restore (the user's Restore, or the
// factory) runs on the lane's own goroutine, never on the caller's: the
// input that asks for it (the move record's last chunk, off the link)
// hands it on with serial.next, so that a slow Restore holds up its move
// — whose later inputs queue on the lane — and never the link it came
// on; the incoming owner is sealed and runs nothing yet.
//
// Every field below the lane is touched only by work on the lane.
type moveDriver struct {
	t    *moveTable // the moves' part: the table and the parts it uses
	id   relocation.MoveID
	obj  relocation.Object
	kr   *kindRuntime
	peer string

	lane     serial               // the move's inputs, one at a time
	forgetAt atomic.Int64         // target, once over: its machine's ForgetAt (read off the lane, by the tick)
	over     atomic.Bool          // target: opened or ended (the tick skips it until forgetAt)
	overCh   chan struct{}        // target: closed once over (markOver)
	waiting  atomic.Bool          // target: its lane waits for an earlier move's end (behindOther); the tick skips it
	owner    relocation.Ownership // target: the owner its Prepare named (set before it is published)
	src      *relocation.Source
	tgt      *relocation.Target
	o        *owner
	captured []*mailbox.Envelope // source: the unexecuted queue at the seal (checked in order)
	held     []*mailbox.Envelope // source: what arrived after the seal (unchecked)
	conflict bool                // target: an owner already existed here
	row      relocation.Ownership
	done     chan error // source: Relocate's result
	ended    bool
	started  time.Time
	snap     route.Snapshot // target: the order state of the move record

	// Work a step asks for besides its effects (route hints, messages to
	// route again, releases) queues here and runs in order once the
	// machine has taken the step's inputs (flush).
	after   []func()
	storeOp *relocation.StoreNewOwner // a store call to make on the store lane
	epoch   uint64                    // the lease's lapses seen before the commit's NewOwner (lease.go); the lane's
	// A record of the step was not sent: the peer left the network, or
	// the link to it was past its bound (flush acts on it). The step's
	// later records are not sent either.
	gone, refused bool

	// Target, after the commit: the driver stays registered for its
	// machine's follow window (FollowDuration), so that the machine
	// answers a source that resends (its Committed was lost) and delivers
	// relays that come late; the machine's Forget ends it.
	abortErr error       // source: the capture's error, when it aborted the move
	counted  atomic.Bool // target: counted in Host.incoming (addIncoming)
	inBytes  int64       // target: its record's declared bytes, counted in moveTable.inBytes while counted

	// clock measures the pause without comparing clocks (Host.Pauses):
	// fed the records sent and received, the seal and the opening, each
	// at this host's nanotime.
	clock relocation.PauseClock
	enc   []byte // records are encoded here (send)
	// storeLane runs the machine's store calls (one at a time: the
	// machine asks for the next only after the result of the last).
	storeLane serial
}

// moveTable is the moves this host takes part in, either side, and what it
// keeps of them.
//
// Owns: the move drivers by id, the count of incoming moves per source,
// the incoming move of each object from each source, the cross-host
// Relocate requests, the log of the moves from here.
// Lock: mu, a leaf, guards m, incoming, pending and owed (never held
// while sending); remote and log have their own leaf locks.
// Invariants: a target move is counted in incoming, and found in pending
// (the latest one of its object from its source), from its Prepare until
// it opens or ends, at most maxIncomingPerPeer per source. A target move
// begins only at a Prepare whose Preflight this host answered OK after
// the Location Store named the source as the object's owner (checked), at
// most maxIncomingPerPeer kept per source and as many checks under way.
type moveTable struct {
	view     *peerView // what this host knows of its peers (the peers' leaf)
	events   *eventLog
	requests *requestTable
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	gate     *leaseGate
	store    relocation.Store
	svc      *services
	routes   *routes
	peers    *peers
	owners   *ownerTable
	router   *router
	mu       sync.Mutex
	m        map[relocation.MoveID]*moveDriver // guarded by mu
	underWay atomic.Int64                      // sources in m, and targets not yet open or ended: Stats.MovesUnderWay (changed under mu)
	incoming map[string]int                    // moves to here not yet open or ended, by source; guarded by mu
	inBytes  map[string]int64                  // their declared record bytes, by source; guarded by mu
	inAll    int64                             // the sum of inBytes; guarded by mu
	pending  map[incomingKey]*moveDriver       // the latest move to here of each object from each source, until it opens or ends; guarded by mu
	owed     []owedAbort                       // Aborts the links refused, sent again at every tick (payOwed); guarded by mu
	checked  map[string]*checkedPreflights     // the Preflights this host answered OK, by source; guarded by mu
	checking map[string]int                    // Preflights of each source whose store check is under way; guarded by mu
	remote   remoteOps                         // Relocate across hosts (remotemove.go)
	record   moveLog                           // moves from here: their pauses and ends (Host.Pauses, Host.RecentMoves)
	// times, set by tests only (nil otherwise) before a move, sees the
	// nanotime of each move's seal at its source and opening at its
	// target.
	times func(id relocation.MoveID, opened bool, at int64)

	// Counters of Stats, this part's own.
	captured atomic.Int64 // messages in move records sent from here (Stats.Captured)
	moved    atomic.Int64 // relocations completed here, either side (Stats.Relocations)
	relayed  atomic.Int64 // messages relayed from here (Stats.Relayed)
}

// Lifecycle items the move puts on the owner's mailbox: each runs in a
// turn of the owner (owner.turn calls run).
type (
	moveStart struct{ d *moveDriver } // begin the source machine
	moveSeal  struct{ d *moveDriver } // seal and capture at a turn boundary
)

func (m moveStart) run() { m.d.startSource() }
func (m moveSeal) run()  { m.d.sealAndCapture() }

// relocateLocal moves object ref, which has an owner here, to target (the
// source side of Relocate); ErrNotLocal if its owner is not here.
func (mt *moveTable) relocateLocal(ctx context.Context, kr *kindRuntime, ref Ref, target string) error {
	if target == mt.name {
		return ErrNotLocal
	}
	o := kr.local(ref.ID)
	if o == nil || o.incoming.Load() {
		return ErrNotLocal
	}
	if !o.moving.CompareAndSwap(false, true) {
		return ErrMoveInProgress
	}
	d := &moveDriver{t: mt, lane: serial{wg: mt.lanes}, storeLane: serial{wg: mt.lanes}, id: payload.NewOpID(), obj: relocation.Object{Kind: ref.Kind, ID: ref.ID}, kr: kr,
		peer: target, o: o, done: make(chan error, 1), started: time.Now()}
	mt.addMove(d)
	e := mailbox.NewEnvelope()
	e.Lane = mailbox.Lifecycle
	e.Control = moveStart{d}
	if err := o.mb.AdmitOverflow(e); err != nil {
		e.Release()
		mt.removeMove(d)
		o.moving.Store(false)
		return ErrNotLocal // the owner closed meanwhile
	}
	select {
	case err := <-d.done:
		return err
	case <-ctx.Done():
		notStarted := false
		d.lane.runHere(func() {
			if d.src == nil && !d.ended {
				// Not started (its turn waits behind a handler, or its
				// store look-up is under way): it never will be —
				// startSource sees it ended — and the object stays, as
				// Relocate says.
				d.ended, notStarted = true, true
				d.o.moving.Store(false)
				return
			}
			d.advance(relocation.OperatorAbort{Reason: ctx.Err().Error()})
		})
		if notStarted {
			mt.removeMove(d)
			d.logEnd(MoveRefused, "not started: "+ctx.Err().Error(), 0, false)
			return ctxErr(ctx)
		}
		select {
		case err := <-d.done:
			if err == nil {
				return nil
			}
		default:
		}
		return ctxErr(ctx)
	}
}

func (mt *moveTable) addMove(d *moveDriver) {
	mt.mu.Lock()
	if mt.m == nil {
		mt.m = map[relocation.MoveID]*moveDriver{}
	}
	mt.m[d.id] = d
	mt.underWay.Add(1) // a source: until removed
	mt.mu.Unlock()
}

func (mt *moveTable) removeMove(d *moveDriver) {
	mt.mu.Lock()
	if mt.m[d.id] == d {
		delete(mt.m, d.id)
		if d.tgt == nil { // a source (targets leave the count in notIncoming)
			mt.underWay.Add(-1)
		}
	}
	mt.mu.Unlock()
	d.notIncoming()
}

func (mt *moveTable) move(id relocation.MoveID) *moveDriver {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	return mt.m[id]
}

func (mt *moveTable) allMoves() []*moveDriver {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	out := make([]*moveDriver, 0, len(mt.m))
	for _, d := range mt.m {
		out = append(out, d)
	}
	return out
}

// moveEvent steps every move with peer with in (link up, peer gone).
func (mt *moveTable) moveEvent(peer string, in relocation.Input) {
	for _, d := range mt.allMoves() {
		if d.peer != peer {
			continue
		}
		if _, dead := in.(relocation.TargetDead); dead {
			d.step(d.peerDead()) // as the driver itself sees a peer gone
			continue
		}
		d.step(in)
	}
}

// moveJobs registers the moves' periodic job on the host's tick: every
// target move under way here is ticked (its cutover wait, store retries);
// one that opened only once its machine's follow window may have ended
// (ForgetAt), when the machine says Forget.
func (mt *moveTable) moveJobs(tick *schedule) {
	tick.every("tick the moves", tickEvery, func(time.Time) bool {
		mt.tickMoves(mt.nanotime())
		return false
	})
}

func (mt *moveTable) tickMoves(now int64) {
	mt.payOwed()
	for _, d := range mt.allMoves() {
		if d.tgt == nil {
			continue
		}
		if d.waiting.Load() {
			continue // its Prepare has not run yet: nothing to time
		}
		if d.over.Load() && now < d.forgetAt.Load() {
			// Opened (or ended): kept for its follow window, it has
			// nothing to do on a tick before the window may end (a drain
			// leaves thousands).
			continue
		}
		// The cutover wait runs only while the source is cut off: a
		// cutover that is slow (queued behind traffic, a starved
		// source) is waited for — committing without the relays would
		// run them late, after newer messages.
		d.step(relocation.Tick{Now: now, SourceReachable: mt.view.reachable(d.peer)})
	}
}

// owedAbort is a source's Abort that the link to its target refused (it
// was past its bound).
type owedAbort struct {
	peer string
	obj  relocation.Object
	rec  *relocation.Abort
}

// oweAbort keeps a source's Abort that the link to its target refused, to
// send again on the next ticks until it is sent or the target is gone:
// the source reopened the object, and a target never told would wait in
// relay-ready and, after its ReadyTimeout, commit the state it was given
// while the object runs on here. At most one per move the host aborted.
func (mt *moveTable) oweAbort(peer string, obj relocation.Object, a *relocation.Abort) {
	mt.mu.Lock()
	mt.owed = append(mt.owed, owedAbort{peer, obj, a})
	mt.mu.Unlock()
}

// payOwed sends the owed Aborts again; those refused once more stay owed,
// those whose target is gone (it has nothing to abort) are dropped.
func (mt *moveTable) payOwed() {
	mt.mu.Lock()
	owed := mt.owed
	mt.owed = nil
	mt.mu.Unlock()
	if len(owed) == 0 {
		return
	}
	var again []owedAbort
	for _, o := range owed {
		if _, refused := mt.peers.sendRecords(o.peer, o.obj, nil, o.rec); refused {
			again = append(again, o)
		}
	}
	if len(again) > 0 {
		mt.mu.Lock()
		mt.owed = append(again, mt.owed...)
		mt.mu.Unlock()
	}
}

// remotePeerGone ends the Relocates asked of, and served for, peer name,
// which left (remoteOps).
func (mt *moveTable) remotePeerGone(name string) { mt.remote.remotePeerGone(name) }

// onRemoteControl takes a control item of a Relocate asked across hosts
// from peer from (remoteOps).
func (mt *moveTable) onRemoteControl(from string, ctl any) { mt.remote.onControl(from, ctl) }

// drainWorkers bounds the moves a drain runs at once.
const drainWorkers = 64
