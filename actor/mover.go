package actor

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"strconv"
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
	d := &moveDriver{t: mt, lane: serial{wg: &mt.svc.lanes}, storeLane: serial{wg: &mt.svc.lanes}, id: payload.NewOpID(), obj: relocation.Object{Kind: ref.Kind, ID: ref.ID}, kr: kr,
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

// maxIncomingPerPeer bounds the moves from one source that a host takes
// at once (from their Prepare until they open or end): a peer's Prepares
// cannot pile up target moves without end. A drain runs drainWorkers.
const maxIncomingPerPeer = 4 * drainWorkers

// incomingKey names the moves of one object from one source.
type incomingKey struct {
	peer string
	obj  relocation.Object
}

// addIncoming adds a target move d from its source, d.peer, whose record
// declares size bytes, unless that source has maxIncomingPerPeer under
// way here, or the bytes would pass the source's or the host's share of
// Config.MaxIncomingMoveBytes (why says which); prev is the move of the
// same object from the same source that was under way here (not yet open
// or ended), if any.
func (mt *moveTable) addIncoming(d *moveDriver, size int64) (prev *moveDriver, others []*moveDriver, why string) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if mt.incoming[d.peer] >= maxIncomingPerPeer {
		return nil, nil, "host " + mt.name + " has " + strconv.Itoa(maxIncomingPerPeer) + " moves from " + d.peer + " under way"
	}
	all := mt.cfg.MaxIncomingMoveBytes
	perPeer := max(all/2, min(mt.cfg.MaxMoveRecord, all))
	switch {
	case mt.inBytes[d.peer]+size > perPeer:
		return nil, nil, "host " + mt.name + " assembles " + strconv.FormatInt(mt.inBytes[d.peer], 10) + " bytes of moves from " + d.peer +
			" already: this one's " + strconv.FormatInt(size, 10) + " would pass the " + strconv.FormatInt(perPeer, 10) +
			" one source may have (half of Config.MaxIncomingMoveBytes, or MaxMoveRecord); try again once they end"
	case mt.inAll+size > all:
		return nil, nil, "host " + mt.name + " assembles " + strconv.FormatInt(mt.inAll, 10) + " bytes of moves already: this one's " +
			strconv.FormatInt(size, 10) + " would pass its Config.MaxIncomingMoveBytes (" + strconv.FormatInt(all, 10) + "); try again once they end"
	}
	if mt.inBytes == nil {
		mt.inBytes = map[string]int64{}
	}
	mt.inBytes[d.peer] += size
	mt.inAll += size
	d.inBytes = size
	for p := range mt.incoming { // the sources with moves under way here: a few hosts
		if o := mt.pending[incomingKey{p, d.obj}]; p != d.peer && o != nil && d.owner.After(o.owner) {
			others = append(others, o)
		}
	}
	if mt.m == nil {
		mt.m = map[relocation.MoveID]*moveDriver{}
	}
	if mt.incoming == nil {
		mt.incoming = map[string]int{}
	}
	if mt.pending == nil {
		mt.pending = map[incomingKey]*moveDriver{}
	}
	mt.m[d.id] = d
	mt.underWay.Add(1) // a target: until it opens or ends (notIncoming)
	mt.incoming[d.peer]++
	k := incomingKey{d.peer, d.obj}
	prev = mt.pending[k]
	mt.pending[k] = d
	d.counted.Store(true)
	return prev, others, ""
}

// notIncoming ends d's count among its source's moves under way here
// (once: it opened, ended or was removed).
func (d *moveDriver) notIncoming() {
	if !d.counted.CompareAndSwap(true, false) {
		return
	}
	d.t.mu.Lock()
	d.t.underWay.Add(-1)
	if d.t.incoming[d.peer]--; d.t.incoming[d.peer] <= 0 {
		delete(d.t.incoming, d.peer)
	}
	d.t.inAll -= d.inBytes
	if d.t.inBytes[d.peer] -= d.inBytes; d.t.inBytes[d.peer] <= 0 {
		delete(d.t.inBytes, d.peer)
	}
	if k := (incomingKey{d.peer, d.obj}); d.t.pending[k] == d {
		delete(d.t.pending, k)
	}
	d.t.mu.Unlock()
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

// onRecord handles a relocation record off the link from host from.
func (mt *moveTable) onRecord(from string, obj relocation.Object, rec relocation.Record) {
	switch r := rec.(type) {
	case *relocation.Preflight:
		reply := &relocation.PreflightReply{Move: r.Move, OK: true}
		kr := mt.owners.kinds[r.Object.Kind]
		switch {
		case kr == nil:
			reply.OK, reply.Reason = false, "host "+mt.name+" has no kind "+r.Object.Kind
		case kr.spec.policy == DisableRelocation:
			reply.OK, reply.Reason = false, "kind "+r.Object.Kind+" does not relocate"
		case mt.life.draining.Load() || !mt.life.acceptsExternal():
			reply.OK, reply.Reason = false, "host "+mt.name+" is draining or stopping"
		case compareVersions(mt.cfg.AppVersion, r.AppVersion) < 0:
			// An older version may not read a newer one's state.
			reply.OK, reply.Reason = false, "application version "+mt.cfg.AppVersion+" here, older than "+r.AppVersion+" at the source"
		}
		if reply.OK {
			// The store says who owns the object before this host keeps
			// anything of a move of it (off the link: a store call).
			mt.checkPreflight(from, r)
			return
		}
		mt.peers.sendRecords(from, r.Object, nil, reply)
		return
	case *relocation.Prepare:
		if r.Source != from || r.Owner.Host != from {
			// A move comes from the host that owns the object, on its own
			// link: a Prepare naming another source or owner is refused
			// (to its sender) and nothing is kept for it.
			mt.peers.malformedItem(from, payload.NewError(payload.ProtocolError, "actor",
				"a Prepare from "+from+" naming "+r.Source+" as the source and "+r.Owner.Host+" as the owner"))
			mt.peers.sendRecords(from, r.Object, nil, &relocation.Failed{Move: r.Move,
				Reason: "a move from " + from + " must name " + from + " as its source and owner"})
			return
		}
		d := mt.move(r.Move)
		if d != nil && d.peer != from {
			mt.recordOfAnotherPeer(from, d)
			return
		}
		if d == nil {
			kr := mt.owners.kinds[r.Object.Kind]
			if kr == nil || !mt.life.acceptsInternal() {
				mt.peers.sendRecords(from, r.Object, nil, &relocation.Failed{Move: r.Move, Reason: "host " + mt.name + " cannot take " + r.Object.String()})
				return
			}
			if why := mt.takePreflight(from, r); why != "" {
				// Nothing is kept for a move the store did not show to be
				// the sender's: its chunks find no move and are dropped.
				mt.peers.malformedItem(from, payload.NewError(payload.ProtocolError, "actor", "a Prepare from "+from+" of "+r.Object.String()+": "+why))
				mt.peers.sendRecords(from, r.Object, nil, &relocation.Failed{Move: r.Move, Reason: why})
				return
			}
			d = &moveDriver{t: mt, lane: serial{wg: &mt.svc.lanes}, storeLane: serial{wg: &mt.svc.lanes}, id: r.Move, obj: r.Object, kr: kr, peer: from, started: time.Now(),
				overCh: make(chan struct{}), owner: r.Owner,
				tgt: relocation.NewTarget(relocation.TargetConfig{Host: mt.name, CutoverWait: mt.cfg.CutoverWait, MaxRecord: mt.cfg.MaxMoveRecord,
					FollowFor: mt.cfg.FollowDuration})}
			d.tgt.Step(relocation.Tick{Now: nanotime()}) // the machine's clock starts now
			prev, others, why := mt.addIncoming(d, int64(r.TotalLen))
			if why != "" {
				mt.obs.Rejected(r.Object.Kind, RejectIncomingMoves)
				mt.peers.sendRecords(from, r.Object, nil, &relocation.Failed{Move: r.Move, Reason: why})
				return
			}
			if prev != nil {
				d.behind(prev)
			}
			for _, o := range others {
				d.behindOther(o)
			}
		}
		d.step(relocation.Receive{Record: r})
		return
	}
	if d := mt.move(rec.MoveID()); d != nil {
		if d.peer != from {
			mt.recordOfAnotherPeer(from, d)
			return
		}
		d.step(relocation.Receive{Record: rec})
		return
	}
	if c, ok := rec.(*relocation.Relay); ok {
		// A relay for a move that ended here (abandoned): hand the message
		// on to wherever its object runs.
		mt.router.redispatchFrame(c.Frame)
	}
}

// checkedPreflights is what a host keeps of one source's Preflights that
// it answered OK: the owner the Location Store named, by move, and the
// order they were answered in (the oldest is forgotten past the bound).
// It is keyed by the move, not by the object alone: the checks of two
// moves of one object (one the source gave up on, then another) may end
// in either order, and the later end must not hide the newer move's
// answer.
type checkedPreflights struct {
	m     map[preflightKey]relocation.Ownership
	order []preflightKey
}

// preflightKey is one move of one object.
type preflightKey struct {
	obj  relocation.Object
	move relocation.MoveID
}

// checkPreflight answers a Preflight from source from whose other checks
// passed, once the Location Store says from owns the object: OK (and the
// answer is kept for the move's Prepare), or not, with the reason. The
// store call runs off the link, at most maxIncomingPerPeer per source at
// once (past it the Preflight is answered not OK at once).
func (mt *moveTable) checkPreflight(from string, r *relocation.Preflight) {
	mt.mu.Lock()
	busy := mt.checking[from] >= maxIncomingPerPeer
	if !busy {
		if mt.checking == nil {
			mt.checking = map[string]int{}
		}
		mt.checking[from]++
	}
	mt.mu.Unlock()
	if busy {
		mt.peers.sendRecords(from, r.Object, nil, &relocation.PreflightReply{Move: r.Move,
			Reason: "host " + mt.name + " checks " + strconv.Itoa(maxIncomingPerPeer) + " moves from " + from + " already"})
		return
	}
	lane := &serial{wg: &mt.svc.lanes}
	lane.add(func() {
		reply := &relocation.PreflightReply{Move: r.Move, OK: true}
		var row relocation.Row
		var err error
		// A store that cannot answer for now (an outage, a restart) is a
		// stall, not an answer: the check asks again until it answers
		// or this host closes; the source's Relocate waits meanwhile, as
		// a move's commit waits for the store.
		for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			ctx, cancel := mt.life.storeContext()
			row, err = mt.store.Get(ctx, r.Object)
			cancel()
			if err == nil || !errors.Is(storeAway(err), errStoreAway) {
				break
			}
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
				continue
			case <-mt.life.done:
				timer.Stop()
			}
			break
		}
		switch {
		case err != nil:
			reply.OK, reply.Reason = false, "host "+mt.name+" cannot confirm that "+from+" owns "+r.Object.String()+": "+err.Error()
		case row.State != relocation.Active || row.Host != from:
			reply.OK, reply.Reason = false, "the Location Store does not name "+from+" as the owner of "+r.Object.String()+" (it names "+strconv.Quote(row.Host)+")"
		}
		mt.mu.Lock()
		if mt.checking[from]--; mt.checking[from] <= 0 {
			delete(mt.checking, from)
		}
		if reply.OK {
			mt.keepPreflightLocked(from, preflightKey{obj: r.Object, move: r.Move}, row.Ownership)
		}
		mt.mu.Unlock()
		mt.peers.sendRecords(from, r.Object, nil, reply)
	})
}

// keepPreflightLocked keeps owner, the ownership the store showed, for
// from's Prepare of move k, forgetting from's oldest past
// maxIncomingPerPeer (its Prepare, if one comes, is refused: the move
// aborts at its source, which keeps the object). Under mt.mu.
func (mt *moveTable) keepPreflightLocked(from string, k preflightKey, owner relocation.Ownership) {
	if mt.checked == nil {
		mt.checked = map[string]*checkedPreflights{}
	}
	cp := mt.checked[from]
	if cp == nil {
		cp = &checkedPreflights{m: map[preflightKey]relocation.Ownership{}}
		mt.checked[from] = cp
	}
	if _, ok := cp.m[k]; !ok {
		cp.order = append(cp.order, k)
	}
	cp.m[k] = owner
	for len(cp.m) > maxIncomingPerPeer {
		delete(cp.m, cp.order[0])
		cp.order = cp.order[1:]
	}
	if len(cp.order) > 2*maxIncomingPerPeer { // taken ones leave holes: compact
		kept := cp.order[:0]
		for _, o := range cp.order {
			if _, ok := cp.m[o]; ok {
				kept = append(kept, o)
			}
		}
		cp.order = kept
	}
}

// takePreflight takes the kept answer to the Preflight of Prepare r from
// source from: "" if this host answered it OK and r names the ownership
// the store showed then; else why the Prepare is refused.
func (mt *moveTable) takePreflight(from string, r *relocation.Prepare) string {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	cp := mt.checked[from]
	if cp == nil {
		return "no Preflight of this move was answered here"
	}
	k := preflightKey{obj: r.Object, move: r.Move}
	o, ok := cp.m[k]
	if !ok {
		return "no Preflight of this move was answered here"
	}
	delete(cp.m, k)
	if len(cp.m) == 0 {
		delete(mt.checked, from)
	}
	w := r.Owner
	if o.Host != w.Host || o.LeaseGen != w.LeaseGen || o.ObjectGen != w.ObjectGen || o.OwnerGen != w.OwnerGen {
		return "the Prepare names an owner other than the one the Location Store named at its Preflight"
	}
	return ""
}

// forgetPreflights drops what this host kept of source's Preflights (it
// left: its moves' Prepares will not come).
func (mt *moveTable) forgetPreflights(source string) {
	mt.mu.Lock()
	delete(mt.checked, source)
	mt.mu.Unlock()
}

// behind makes target move d, whose Prepare just arrived, begin only once
// prev — an earlier move of the same object from the same source, not yet
// open or ended when d's Prepare came — has taken every record that came
// before d's Prepare, and ends prev if those left it under way.
//
// A source moves an object once at a time, and sends a move's records in
// order on its one link: by the time a move's Prepare arrives, every
// earlier move of the object from that source has ended at the source
// before its relay-ready was accepted (after it, the object would have
// to come back first, and the earlier move would have opened here) — and
// its Abort, if the source sent one, arrived before the Prepare. But each
// move takes its records on a lane of its own: the earlier move's Abort
// may still wait on its lane (a starved lane goroutine) while the new
// move's Prepare, on an idle lane, runs at once — its incoming owner then
// finds the earlier one's in place, and the move fails though nothing
// holds the object here. So d's lane first waits for prev's to take what
// it was given, and then prev, if still under way before its commit (its
// Abort was never sent: the link refused it), ends as an Abort would end
// it — its Prepare is all the target will ever hear of it again. A prev
// that is committing goes on; d then finds the object here and fails.
func (d *moveDriver) behind(prev *moveDriver) {
	d.lane.add(func() {
		prev.lane.runHere(func() {
			if prev.ended || prev.tgt == nil || prev.tgt.Done() {
				return
			}
			prev.advance(relocation.Receive{Record: &relocation.Abort{Move: prev.id,
				Reason: "a later move of the object from its source began: this one ended there"}})
		})
	})
}

// behindOther makes target move d, whose Prepare just arrived, begin only
// once other — an earlier move of the same object here from another
// source, not yet open or ended — no longer holds the object here. d's
// Prepare names a later owner than other's (relocation.Ownership.After):
// the row has moved on past the one other would replace, so other can
// never commit. That happens when other's source gave it up and the
// object went on elsewhere and on to d's source, while other's Abort
// still waited on a slower link (one past its bound is owed; records of
// different links are in no order) — without this wait d's incoming
// owner would find other's in place and d would fail, though nothing
// holds the object here. other is told (relocation.Superseded): before
// relay-ready it fails at once, and its source, if it still waits,
// aborts and reopens. From relay-ready on d waits for other's own end —
// its Abort, or its cutover and the commit the store refuses — which
// says whose the messages it holds are; other's records come on another
// lane, so the wait holds only d's. Moves wait only for earlier ones:
// no cycle. A host that closes ends the wait.
func (d *moveDriver) behindOther(other *moveDriver) {
	d.lane.add(func() {
		other.lane.runHere(func() {
			if other.ended || other.tgt.Done() {
				return
			}
			other.advance(relocation.Superseded{Owner: d.owner})
		})
		d.waiting.Store(true)
		select {
		case <-other.overCh:
		case <-d.t.life.done:
		}
		d.waiting.Store(false)
	})
}

// recordOfAnotherPeer drops a relocation record from peer from for move
// d, which runs with another peer: a move's records come from its peer
// only (the link is authenticated).
func (mt *moveTable) recordOfAnotherPeer(from string, d *moveDriver) {
	mt.peers.malformedItem(from, payload.NewError(payload.ProtocolError, "actor",
		"a relocation record from "+from+" for a move with "+d.peer))
}

// moveJobs registers the moves' periodic job on the host's tick: every
// target move under way here is ticked (its cutover wait, store retries);
// one that opened only once its machine's follow window may have ended
// (ForgetAt), when the machine says Forget.
func (mt *moveTable) moveJobs(tick *schedule) {
	tick.every("tick the moves", tickEvery, func(time.Time) bool {
		mt.tickMoves(nanotime())
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
		d.step(relocation.Tick{Now: now, SourceReachable: mt.peers.view.reachable(d.peer)})
	}
}

// step runs one input on the move's lane: at once on the caller's
// goroutine if the lane is idle (no hand-off), else queued behind the
// lane's work. It never waits for other work, and runs no user code on
// the caller's goroutine: the one input that leads to the user's code
// (the restore) hands that part on to the lane's goroutine (apply).
func (d *moveDriver) step(in relocation.Input) {
	d.lane.tryHere(func() { d.advance(in) })
}

// advance, on the lane, feeds one input to the machine and carries out
// its effects in order, feeding immediate results back; then it runs the
// work the step queued, in order. The store call the machine asks for
// runs on the move's own store lane — never on the move's lane, so
// records keep being taken while it waits, and never behind other work (a
// peer's slow lane may hold look-ups) — and its result comes back to the
// lane as the machine's next input. The machine asks for the next call
// only after that result (one store call at a time is its rule).
func (d *moveDriver) advance(in relocation.Input) {
	d.stepMachine(in)
	op := d.storeOp
	d.storeOp = nil
	d.noteOver()
	d.flush()
	if op != nil {
		d.storeLane.add(func() {
			ctx, cancel := d.t.life.storeContext()
			epoch := d.t.gate.epoch.Load() // as an activation's (router.activate)
			var row relocation.Row
			var err error
			if d.t.gate.betweenRuns.Load() {
				// The host is becoming a new run (leaseKeeper.newRun): the
				// commit waits for the new run's lease, asked again at the
				// next tick as a store that did not answer. (The machine
				// then counts this attempt as maybe written; it was not,
				// so a later conflict's row is never this move's own and
				// that check changes nothing.)
				err = payload.NewError(payload.Unavailable, "actor", "the host is joining the cluster again as a new run")
			} else {
				row, err = d.t.store.NewOwner(ctx, op.Object, op.Expect, op.NewHost)
			}
			cancel()
			d.lane.tryHere(func() {
				d.epoch = epoch
				d.advance(relocation.StoreResult{Row: row, Err: err})
			})
		})
	}
}

// noteOver notes, once, that a target move opened or ended: the tick
// skips it until its follow window ends, and it no longer counts among
// its source's moves under way here.
func (d *moveDriver) noteOver() {
	if d.tgt == nil || d.over.Load() || !(d.tgt.Done() || d.ended) {
		return
	}
	d.forgetAt.Store(d.tgt.ForgetAt()) // before over: the tick reads over first
	d.markOver()
	d.notIncoming()
}

// markOver notes that a target move opened or ended (once), and wakes the
// later moves of its object that wait for it (behindOther).
func (d *moveDriver) markOver() {
	if d.over.CompareAndSwap(false, true) && d.overCh != nil {
		close(d.overCh)
	}
}

// stepMachine steps the machine with in, and with the inputs its actions
// yield at once, each after the rest of the effects of the step that
// yielded it.
func (d *moveDriver) stepMachine(in relocation.Input) {
	if r, ok := in.(relocation.Receive); ok {
		d.clock.Received(r.Record, nanotime())
	}
	queue := []relocation.Input{in}
	for len(queue) > 0 && !d.ended {
		in := queue[0]
		queue = queue[1:]
		var out relocation.Output
		if d.src != nil {
			out = d.src.Step(in)
		} else if d.tgt != nil {
			out = d.tgt.Step(in)
		} else {
			return
		}
		// In the machine's order: a target opens its queue before it
		// sends Committed, so that when the Committed arrives the object
		// already runs here (the source's Relocate returns then).
		for _, e := range out.Effects {
			switch e := e.(type) {
			case relocation.Send:
				d.send(e.Record)
			case relocation.Action:
				if next := d.apply(e); next != nil {
					queue = append(queue, next)
				}
			}
		}
	}
}

// send sends one record of the machine to the peer, with the pause
// clock's figures (a target's Committed); after a record of the step was
// not sent, the rest are not either (flush acts on it).
func (d *moveDriver) send(r relocation.Record) {
	if d.gone || d.refused {
		if a, ok := r.(*relocation.Abort); ok && d.refused {
			d.t.oweAbort(d.peer, d.obj, a)
		}
		return
	}
	// A target that opened or ended is no longer under way here before
	// its source can hear of it: the source's next move to this host must
	// not find it counted (maxIncomingPerPeer).
	d.noteOver()
	r = d.clock.Sent(r, nanotime())
	gone, refused := d.t.peers.sendRecords(d.peer, d.obj, &d.enc, r)
	d.gone, d.refused = gone, refused
	if a, ok := r.(*relocation.Abort); ok && refused {
		d.t.oweAbort(d.peer, d.obj, a)
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

// flush runs the queued work, until none is left (work may queue more),
// then acts on a record the step could not send.
func (d *moveDriver) flush() {
	for len(d.after) > 0 {
		after := d.after
		d.after = nil
		for _, f := range after {
			f()
		}
	}
	gone, refused := d.gone, d.refused
	d.gone, d.refused = false, false
	switch {
	case gone:
		d.advance(d.peerDead())
	case refused && d.src != nil:
		// The target does not take what this host sends it: the move
		// cannot go on, and is aborted as an operator would (the source
		// machine keeps the object unless the move is past its point of
		// no return). A target's refused record is the source's to
		// recover from (its records resend, its phases have deadlines).
		d.advance(relocation.OperatorAbort{Reason: "the link to " + d.peer + " is past its bound: it does not take what is sent to it"})
	}
}

// later queues f to run once the machine has taken the step's inputs and
// the step's records went out (flush).
func (d *moveDriver) later(f func()) { d.after = append(d.after, f) }

// peerDead is the input for "the peer left the network": a source learns
// its target died; a target treats it as an abort from its source (ignored
// past relay-ready: the cutover wait commits).
func (d *moveDriver) peerDead() relocation.Input {
	if d.tgt != nil {
		return relocation.Receive{Record: &relocation.Abort{Move: d.id, Reason: "source host gone"}}
	}
	return relocation.TargetDead{}
}

// apply carries out one action; it returns an input to feed back at once,
// or nil.
func (d *moveDriver) apply(a relocation.Action) relocation.Input {
	switch a := a.(type) {
	// Source actions.
	case relocation.SealAndCapture:
		// In a lifecycle turn of the owner (sealAndCapture): the lane goes
		// on meanwhile; Captured or CaptureFailed comes from that turn.
		e := mailbox.NewEnvelope()
		e.Lane = mailbox.Lifecycle
		e.Control = moveSeal{d}
		if err := d.o.mb.AdmitOverflow(e); err != nil {
			e.Release()
			return relocation.OperatorAbort{Reason: "the owner closed"}
		}
	case relocation.ReopenOwner:
		o := d.o
		after := o.reopenAfterMove(d.captured, d.held)
		d.captured, d.held = nil, nil
		d.later(func() { d.t.router.orderDone(o, after) })
	case relocation.InstallFollow:
		// Before TakeHeld, which the machine asks for next: a sender that
		// misses the owner once it left must find the route (the store
		// still names this host until the target commits; the sender
		// would otherwise activate the object here again).
		d.t.routes.learn(d.obj, a.Target, d.followGen(), true)
	case relocation.TakeHeld:
		return relocation.HeldTaken{Frames: d.takeHeld()}
	case relocation.DropFollow:
		d.t.routes.forget(d.obj, true)
	// Target actions.
	case relocation.RegisterTempQueue:
		d.registerTemp()
	case relocation.RestoreObject:
		// The user's Restore (or the factory) runs on the move's lane,
		// under no lock; the incoming owner runs nothing yet (sealed), so
		// the state is its alone. It runs on the lane's own goroutine:
		// the step that asks for it is the move record's last chunk,
		// which tryHere may be running on the transport's delivery
		// goroutine, and a slow Restore there would hold up every item
		// behind it on the link. serial.next runs it right after this
		// step, before any input queued meanwhile, and Restored comes
		// back as the next input: the machine sees its inputs in the
		// order it would have had the restore run here (the chunk's step
		// ends with this action and sends nothing; the move's records
		// that the link brings later queue behind the restore on the
		// lane, as they would behind a restore run here). The rest of
		// what the link brings meanwhile needs no restore done: the
		// object's messages wait in the incoming owner's hold, which the
		// Prepare registered on the delivery goroutine itself (a new
		// move's lane is idle), and other objects' have nothing to do
		// with the move. On the lane's goroutine already, next costs no
		// hand-off. (In a turn of the owner it would cost the move a
		// hand-off to a dispatcher goroutine every time, which a starved
		// host pays in scheduler quanta while the object's messages pile
		// up at its source.)
		rec := a.Record
		d.lane.next(func() { d.advance(relocation.Restored{Err: d.restore(rec)}) })
	case relocation.DiscardTempQueue:
		d.discardTemp(nil, a.Reason)
	case relocation.StoreNewOwner:
		d.storeOp = &a
	case relocation.OpenQueue:
		d.open(a)
	case relocation.DeliverLate:
		d.t.log.Warn("relocation: relays after the commit delivered late", "object", d.obj.String(), "messages", len(a.Frames))
		o, frames := d.o, a.Frames
		d.later(func() {
			for _, f := range frames {
				if e := d.t.owners.envelopeOf(f); e != nil {
					if _, _, err := d.t.router.admit(o, e, admitOverflow); err != nil {
						d.t.router.redispatch(e)
					}
				}
			}
		})
	case relocation.Forget:
		// The follow window ended: records of the move that come later
		// find none (a relay goes on to the object's owner).
		d.ended = true
		d.t.removeMove(d)
	case relocation.Abandon:
		d.discardTemp(append(append([][]byte(nil), a.Captured...), a.Relayed...), a.Reason)
	case relocation.Finish:
		d.finish(a)
	case relocation.Log:
		d.t.peerLogs.relocation.Info(d.t.log, "relocation: "+a.Msg, "object", d.obj.String(), "peer", d.peer)
	}
	return nil
}

// startSource runs in a lifecycle turn of the owner: it reads the object's
// row (before it takes its place on the move's lane: the lane does not
// wait for the store) and starts the source machine with the preflight.
func (d *moveDriver) startSource() {
	ctx, cancel := d.t.life.storeContext()
	row, err := d.t.store.Get(ctx, d.obj)
	cancel()
	d.lane.runHere(func() {
		if d.ended {
			return
		}
		if err != nil || row.Host != d.t.name {
			d.ended = true
			d.o.moving.Store(false)
			d.t.removeMove(d)
			d.logEnd(MoveRefused, "the store does not show this host as the owner", 0, false)
			d.done <- &payload.Error{Kind: payload.Unavailable, Op: "actor.Host.Relocate", Detail: "the store does not show this host as the owner", Err: err}
			return
		}
		d.row = row.Ownership
		d.src = relocation.NewSource(relocation.SourceConfig{Move: d.id, Object: d.obj, Source: d.t.name, Target: d.peer,
			Owner: row.Ownership, AppVersion: d.t.cfg.AppVersion})
		d.advance(relocation.Start{})
	})
}

// sealAndCapture runs in a lifecycle turn of the owner, so no application
// turn runs: the seal takes effect at this turn boundary, and the move
// record is built now, and only now (the machine's SealAndCapture). The
// owner's receive order freezes with the seal: what arrives from now on is
// held unchecked, and checked where the object opens. A capture that fails
// aborts the move (the machine reopens the owner).
func (d *moveDriver) sealAndCapture() {
	var relieved bool
	o := d.o
	var flushErr error
	if o.gate != nil {
		// A persistent object's writes are durable, and its outputs gone,
		// before its state leaves: once the target owns it, no write of
		// this host lands.
		flushErr = o.gate.flushAll()
	}
	d.lane.runHere(func() {
		if d.src == nil || d.ended {
			return
		}
		relieved = o.sealForMove()
		now := nanotime()
		d.clock.Sealed(now)
		if f := d.t.times; f != nil {
			f(d.id, false, now)
		}
		rec, err := relocation.MoveRecord{}, flushErr
		if err == nil {
			rec, err = d.capture()
		}
		if err != nil {
			d.t.log.Error("relocation: capture failed; aborting", "object", d.obj.String(), "err", err)
			d.abortErr = err
			d.advance(relocation.CaptureFailed{Err: err})
			return
		}
		d.advance(relocation.Captured{Record: rec})
	})
	if relieved { // a send: off the move's lane
		o.sendPushes()
	}
}

// capture takes the unexecuted queue (undecoded; it passed the order
// check), the order state with its held messages, and the state.
func (d *moveDriver) capture() (relocation.MoveRecord, error) {
	o := d.o
	queued, held, extra := o.drainForMove(nanotime())
	d.captured, d.held = queued, held
	var rec relocation.MoveRecord
	if d.kr.spec.policy == PreserveState && o.ready {
		st, err := d.kr.spec.capture(o.state)
		if err != nil {
			return rec, err
		}
		rec.State = st
	}
	rec.Queue = frames(d.captured)
	rec.Extra = extra
	if n := rec.EncodedLen(); int64(n) > d.t.cfg.MaxMoveRecord {
		// Not an error of the state's kind: the move cannot carry it.
		return rec, payload.NewError(payload.CapacityExceeded, "actor.Host.Relocate",
			"the move record of "+d.obj.String()+" would be "+strconv.Itoa(n)+" bytes, more than MaxMoveRecord ("+
				strconv.FormatInt(d.t.cfg.MaxMoveRecord, 10)+")")
	}
	d.t.stats.captured.Add(int64(len(rec.Queue)))
	return rec, nil
}

// takeHeld makes the move final at the source: the object leaves this
// host's owners (for the forwarding route InstallFollow put in place just
// before), then the mailbox closes and what was held is taken for the
// relay. Past relay-ready the source never reopens, so the held and
// captured items end here — and the messages its order held, which the
// move record carries: their frames are copied out for the relays
// (records outlive this host's buffers) and the items released, returning
// their permits.
func (d *moveDriver) takeHeld() [][]byte {
	mt, o := d.t, d.o
	// Until the move ends, the store still names this run: the object is
	// never activated here again meanwhile (router.activate).
	d.kr.leave(o, leavingMove{id: d.id, to: d.peer, gen: d.followGen()})
	late, copies := o.closeBox()
	held := append(d.held, late...)
	out := make([][]byte, 0, len(held))
	for _, e := range held {
		if e.Msg != nil {
			out = append(out, append([]byte(nil), e.Msg.Frame()...))
		}
	}
	// Releasing gives permits back, which may admit a waiting send at once
	// (a look-up, a send): after the driver's lock.
	done := append(append(held, copies...), d.captured...)
	// Past relay-ready these messages are the target's, in the move record
	// or the relays: a request of this host among them is failed with the
	// target (requests.go).
	to := mt.peers.view.runOf(d.peer)
	for _, e := range done {
		if e.Msg == nil {
			continue
		}
		if op, mine := mt.requests.own(e.Msg); mine {
			mt.requests.handedTo(op, to)
		}
	}
	d.later(func() {
		for _, e := range done {
			e.Release()
		}
	})
	d.held, d.captured = nil, nil
	mt.stats.relayed.Add(int64(len(out)))
	return out
}

// finish ends the move on this host.
func (d *moveDriver) finish(f relocation.Finish) {
	if d.tgt != nil && f.Outcome == relocation.Moved {
		return // the target owns the object; the driver stays until Forget
	}
	d.ended = true
	d.t.removeMove(d)
	if d.src != nil {
		d.departed()
		var err error
		out, reason := MoveDone, f.Reason
		switch f.Outcome {
		case relocation.Moved:
			d.t.stats.moved.Add(1)
			reason = ""
		case relocation.NotStarted:
			out = MoveRefused
			err = payload.NewError(payload.Rejected, "actor.Host.Relocate", f.Reason)
		case relocation.Aborted:
			out = MoveAborted
			detail := "move aborted: " + f.Reason
			if d.abortErr != nil {
				// errors.Is finds the capture's own error (its kind) too.
				detail = "move aborted: the capture failed"
				reason = "the capture failed: " + d.abortErr.Error()
			}
			err = &payload.Error{Kind: payload.Unavailable, Op: "actor.Host.Relocate", Detail: detail, Err: d.abortErr}
		case relocation.Abandoned:
			out = MoveAbandoned
			err = payload.NewError(payload.Rejected, "actor.Host.Relocate", "move abandoned: "+f.Reason)
		case relocation.Lost:
			out = MoveLost
			err = payload.NewError(payload.DataLost, "actor.Host.Relocate", f.Reason)
		}
		if f.Outcome == relocation.Moved || f.Outcome == relocation.Lost || f.Outcome == relocation.Abandoned {
			// The messages went with the move record and the relays.
			done := append(d.captured, d.held...)
			d.later(func() {
				for _, e := range done {
					e.Release()
				}
			})
			d.captured, d.held = nil, nil
			d.o.state = nil
			d.t.obs.Deactivated(d.kr.spec.name)
			d.t.owners.system.Root.Stop(d.o.pid)
		} else {
			d.o.moving.Store(false)
		}
		var pause time.Duration
		paused := false
		if f.Outcome == relocation.Moved {
			pause, paused = d.clock.Pause(nanotime())
		}
		d.logEnd(out, reason, pause, paused)
		d.done <- err
		return
	}
	if f.Outcome != relocation.Moved && d.o != nil && !d.conflict {
		d.t.obs.Deactivated(d.kr.spec.name)
		d.t.owners.system.Root.Stop(d.o.pid)
	}
}

// departed ends the source's hold on its object's id (takeHeld): the
// target committed (the store names it), or the move ended without it.
func (d *moveDriver) departed() { d.kr.departed(d.obj.ID, d.id) }

// followGen is the owner generation the object has once this move (from
// here) commits: the forwarding route's.
func (d *moveDriver) followGen() uint64 { return d.row.OwnerGen + 1 }

// logEnd notes in the host's move log the end of this move from here
// (its pause, if paused).
func (d *moveDriver) logEnd(out MoveOutcome, reason string, pause time.Duration, paused bool) {
	e := MoveEntry{Ref: Ref{Kind: d.obj.Kind, ID: d.obj.ID}, From: d.t.name, To: d.peer, Started: d.started,
		Ended: time.Now(), Pause: pause, Outcome: out, Reason: reason}
	d.t.record.ended(&e, paused)
}

// registerTemp installs the incoming owner, sealed: messages sent here
// directly wait in its hold — the temporary queue.
func (d *moveDriver) registerTemp() {
	o := d.kr.addIncoming(d.obj.ID)
	if o == nil {
		d.conflict = true
		return
	}
	d.o = o
	// The owner is found before any route from now on: the routes this
	// host kept for the object are dropped after the shard's lock.
	d.t.routes.forget(d.obj, true)
}

// restore rebuilds the state through the kind's policy; nothing runs yet.
func (d *moveDriver) restore(rec relocation.MoveRecord) error {
	if d.conflict || d.o == nil {
		return errors.New("host " + d.t.name + " already hosts " + d.obj.String())
	}
	o := d.o
	snap, err := route.DecodeSnapshot(rec.Extra)
	if err != nil {
		return err
	}
	d.snap = snap
	if d.kr.spec.persist && len(rec.State) == 0 {
		// The source had not made the state yet (its activation ran no
		// turn): the store holds the object's last durable state, which
		// the first turn here loads.
		return nil
	}
	var st any
	func() {
		defer func() {
			if r := recover(); r != nil {
				d.t.log.Error("restore panicked", "object", d.obj.String(), "panic", r, "stack", string(debug.Stack()))
				err = payload.NewError(payload.InternalFailure, "actor", "restore panicked")
			}
		}()
		if d.kr.spec.policy == PreserveState && d.kr.spec.restore != nil && len(rec.State) > 0 {
			st, err = d.kr.spec.restore(&o.ctx, d.obj.ID, rec.State)
		} else {
			st, err = d.kr.spec.factory(&o.ctx, d.obj.ID)
		}
	}()
	if err != nil {
		return err
	}
	o.state, o.ready = st, true
	return nil
}

// open makes the target the owner: captured work, the relays, then the
// temporary queue, in that order — the relays and the temporary queue
// checked against the order state that came with the record. Then every
// host the object left recently learns where it went.
func (d *moveDriver) open(a relocation.OpenQueue) {
	mt, o := d.t, d.o
	mt.events.count(EventMovedIn, d.peer, 1)
	o.row = a.Owner
	o.epoch.Store(d.epoch)
	var captured, unchecked []*mailbox.Envelope
	for _, f := range a.Captured {
		if e := mt.owners.envelopeOf(f); e != nil {
			captured = append(captured, e)
		}
	}
	for _, f := range a.Relayed {
		if e := mt.owners.envelopeOf(f); e != nil {
			unchecked = append(unchecked, e)
		}
	}
	// Told where the object runs now: the hosts it left recently (they
	// forward to here, not down a chain) and the hosts that sent to it
	// recently (they send here, not to where it was).
	tell, after := o.openAfterMove(d.snap, d.peer, captured, unchecked, nanotime())
	d.snap = route.Snapshot{}
	opened := nanotime()
	d.clock.Opened(opened)
	if f := d.t.times; f != nil {
		f(d.id, true, opened)
	}
	mt.stats.moved.Add(1)
	obj, gen := d.obj, a.Owner.OwnerGen
	d.later(func() {
		mt.router.orderDone(o, after)
		for i, host := range tell {
			if host != mt.name && host != d.peer && !slices.Contains(tell[:i], host) {
				mt.peers.sendHint(host, obj, mt.name, gen)
			}
		}
	})
}

// discardTemp drops the incoming owner; the messages it held (and extra,
// for an abandoned move) go on, after the driver's lock, to wherever the
// object runs.
func (d *moveDriver) discardTemp(extra [][]byte, reason string) {
	if d.o == nil || d.conflict {
		return
	}
	o := d.o
	d.kr.remove(o)
	queued, outOfOrder := o.closeBox()
	held := append(queued, outOfOrder...)
	o.state, o.ready = nil, false
	d.t.tallies.queueDiscard.Add(d.t.log, int64(len(held)), "object", d.obj.String(), "reason", reason, "messages", len(held))
	d.later(func() {
		for _, e := range held {
			d.t.router.redispatch(e)
		}
		for _, f := range extra {
			d.t.router.redispatchFrame(f)
		}
	})
}

func frames(items []*mailbox.Envelope) [][]byte {
	out := make([][]byte, 0, len(items))
	for _, e := range items {
		if e.Msg != nil {
			out = append(out, e.Msg.Frame())
		}
	}
	return out
}

// abandonOnClose ends a move when its host closes: a waiting Relocate gets
// ShuttingDown; envelopes the move held are ended. It returns how many
// application messages it ended unrun (Stats.DroppedOnClose).
func (d *moveDriver) abandonOnClose() (dropped int) {
	var unrun []*mailbox.Envelope
	var o *owner
	ended := false
	d.lane.runHere(func() {
		if d.ended {
			ended = true
			return
		}
		d.ended = true
		d.markOver()
		d.t.removeMove(d)
		unrun = append(d.captured, d.held...)
		d.captured, d.held = nil, nil
		if d.done != nil {
			d.logEnd(MoveClosed, "the host closed", 0, false)
			d.done <- ErrShuttingDown
		}
		o = d.o
	})
	if ended {
		return 0
	}
	for _, e := range unrun { // replies are sends: off the move's lane
		if isApplication(e) {
			dropped++
		}
		d.t.router.endUnrun(o, "", e, ErrShuttingDown, RejectShuttingDown)
	}
	// The owner the move holds may have left the owner map already (a
	// source past relay-ready): Close's sweeps do not see it, so its actor
	// stops here, or Close would wait for it for ever. (A second Stop of
	// an owner Close does see is harmless.)
	if o != nil && o.pid != nil {
		d.t.owners.system.Root.Stop(o.pid)
	}
	return dropped
}

// moveLog keeps what this host keeps of the moves it was the source of:
// their pauses (moveDriver.clock: the seal here to the opening at the
// target), and a ring of the last ones as they ended (Host.RecentMoves).
// One short lock per move's end; the ring is made at the first move.
type moveLog struct {
	mu     sync.Mutex
	done   []time.Duration             // not taken by Pauses yet
	recent [recentPauses]time.Duration // a ring of the last ones (RecentPauses)
	n      int                         // pauses added, ever
	moves  *[recentMoves]MoveEntry     // a ring of the last moves (RecentMoves); nil until the first
	seq    uint64                      // moves ended, ever: the last one's Seq
}

// recentPauses is how many pauses RecentPauses keeps.
const recentPauses = 1024

// recentMoves is how many moves RecentMoves keeps.
const recentMoves = 256

// ended notes the end of a move from here: e, numbered next, in the ring
// of moves; its pause, if it moved and the pause is known.
func (l *moveLog) ended(e *MoveEntry, pause bool) {
	l.mu.Lock()
	if pause {
		if len(l.done) == maxPauses {
			l.done = append(l.done[:0], l.done[maxPauses/2:]...) // keep the newer half
		}
		l.done = append(l.done, e.Pause)
		l.recent[l.n%recentPauses] = e.Pause
		l.n++
	}
	if l.moves == nil {
		l.moves = new([recentMoves]MoveEntry)
	}
	l.seq++
	e.Seq = l.seq
	l.moves[l.seq%recentMoves] = *e
	l.mu.Unlock()
}

// maxPauses bounds the pauses kept between two calls of Host.Pauses.
const maxPauses = 1 << 16

// take returns the pauses not taken yet, and forgets them.
func (p *moveLog) take() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.done
	p.done = nil
	return out
}
