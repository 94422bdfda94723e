package actor

import (
	"errors"
	"strconv"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The mover part, a target's door: what this host takes of the moves
// other hosts send it — the Preflights it answers once the Location Store
// names the sender the owner, the Prepares it takes (at most
// maxIncomingPerPeer per source, within Config.MaxIncomingMoveBytes), the
// records it hands to their moves, and a later move of one object that
// waits for the earlier one's end.
//
// Owns: nothing of its own; moveTable's incoming counts, pending moves and
// kept Preflight answers, under moveTable.mu.
// May call: the router (relays of ended moves), the owners (the kind of a
// move's object), peers (answers), the Location Store (a Preflight's
// check, on a lane of its own), the leaves.
// Invariants: nothing is kept of a move whose Preflight the store did not
// confirm; what a source holds here is bounded by count and bytes.

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

// onRecord handles a relocation record off the link from host from.
func (mt *moveTable) onRecord(from string, obj relocation.Object, rec relocation.Record) {
	switch r := rec.(type) {
	case *relocation.Preflight:
		reply := &relocation.PreflightReply{Move: r.Move, OK: true}
		kr := mt.owners.kind(r.Object.Kind)
		switch {
		case kr == nil:
			reply.OK, reply.Reason = false, "host "+mt.name+" has no kind "+r.Object.Kind
		case kr.def().policy == DisableRelocation:
			reply.OK, reply.Reason = false, "kind "+r.Object.Kind+" does not relocate"
		case mt.life.isDraining() || !mt.life.acceptsExternal():
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
			kr := mt.owners.kind(r.Object.Kind)
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
			d = &moveDriver{t: mt, lane: serial{wg: mt.lanes}, storeLane: serial{wg: mt.lanes}, id: r.Move, obj: r.Object, kr: kr, peer: from, started: time.Now(),
				overCh: make(chan struct{}), owner: r.Owner,
				tgt: relocation.NewTarget(relocation.TargetConfig{Host: mt.name, CutoverWait: mt.cfg.CutoverWait, MaxRecord: mt.cfg.MaxMoveRecord,
					FollowFor: mt.cfg.FollowDuration})}
			d.tgt.Step(relocation.Tick{Now: mt.nanotime()}) // the machine's clock starts now
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
	lane := &serial{wg: mt.lanes}
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
			case <-mt.life.closing():
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
		case <-d.t.life.closing():
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
