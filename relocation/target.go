package relocation

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// TargetConfig configures the target side of moves.
type TargetConfig struct {
	Host        string        // this host
	CutoverWait time.Duration // default DefaultCutoverWait
	// CommitDeadline is how long the commit retries a store that fails
	// transiently before the target logs that the move waits for it (it
	// never gives the move up then: an attempt may have been written).
	// Default DefaultCommitDeadline.
	CommitDeadline time.Duration
	// AssemblyTimeout is how long the target waits, while its source is
	// reachable, for the next chunk of the move record before it gives
	// the move up (a stray or forged Prepare, whose source sends nothing
	// more, would hold a temporary queue for the object for ever); the
	// wait starts again whenever the source is cut off or a chunk
	// arrives. Default DefaultAssemblyTimeout.
	AssemblyTimeout time.Duration
	// ReadyTimeout is how long a target in relay-ready waits, while its
	// source is reachable, for the source's next relay or its cutover
	// before it commits with what it has (a source that neither cuts over
	// nor goes away would hold the object sealed for ever); the wait
	// starts again at every relay. The commit is the one made after
	// CutoverWait with the source cut off: the source, told, relays what
	// it still holds after it. Default DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// MaxRecord is the largest move record the target takes: a Prepare
	// declaring more fails the move before anything is kept. Default
	// DefaultMaxRecord; at most MaxMoveRecord.
	MaxRecord int64
	// FollowFor is the follow window: how long a target that opened keeps
	// the move — it answers a source that resends (its Committed was
	// lost) and delivers relays that come late — counted on the Tick
	// clock from the opening (the time of the last Tick before it; of the
	// first after it, if none came before). The first Tick at or past its
	// end steps Forget. Default DefaultFollowFor.
	FollowFor time.Duration
}

// DefaultMaxRecord is the default TargetConfig.MaxRecord: 1 GiB.
const DefaultMaxRecord = 1 << 30

type tgtPhase uint8

const (
	tgtIdle tgtPhase = iota
	tgtAssembling
	tgtRestoring
	tgtReady      // relay-ready sent; receiving the pre-boundary batch
	tgtCommitting // store CAS in flight
	tgtOpen       // committed and opened
	tgtDone       // failed, aborted or abandoned
)

var tgtPhaseNames = [...]string{"idle", "assembling", "restoring", "ready", "committing", "open", "done"}

// Target is the target side of one move, as a pure state machine (see
// Source). The driver makes one when a Prepare for an unknown move arrives.
//
// Order: Prepare → RegisterTempQueue (first of all); the chunks → verify
// length, chunk count and CRC-32C → RestoreObject; Restored → RelayReady;
// the relays and a Cutover whose count and checksum match → StoreNewOwner
// (the target alone writes the owner); its success → OpenQueue (captured
// work, relays, then the temporary queue), then Committed to the source:
// the object runs here before the source hears of it. A missing cutover:
// after CutoverWait the target commits anyway and logs it. A mismatch or
// failed restore before relay-ready → DiscardTempQueue, then Failed; never
// a partial restore. A store conflict or newer owner → Abandon, then
// Failed: nothing of the move ran here. A store that fails transiently is
// asked again at every Tick for as long as it fails: an attempt may have
// been written with its answer lost, so only the store's answer ends the
// commit (past CommitDeadline the wait is logged, once). Relays resent from Seq 0 replace
// the partial batch wholesale. Results that arrive after the move ended
// never revive it. One store call at a time: the next StoreNewOwner (a
// retry, on a Tick) only after the StoreResult of the last. After the
// opening, the first Tick at or past the end of the follow window
// (FollowFor) → Forget.
type Target struct {
	cfg   TargetConfig
	phase tgtPhase
	prep  *Prepare
	// The record as its chunks arrived, in order: asm holds their bytes,
	// ends[i] the end of chunk i in asm. Both grow with what arrives, never
	// with what a Prepare declares (a peer's bytes are bounded before they
	// are kept: the declared length by MaxRecord, each chunk by what is
	// left of it).
	asm      []byte
	ends     []int
	record   MoveRecord
	now      int64 // the last tick's time
	ticked   bool  // a tick has been seen: now is meaningful
	readyAt  int64 // when relay-ready was sent (set by the next tick if not ticked yet)
	deadline int64 // the commit deadline (likewise)
	waitTick bool  // readyAt or deadline waits for the first tick
	// progressAt is when the assembly last made progress (the Prepare, a
	// new chunk) or found the source cut off; progressTick: it waits for
	// the first tick.
	progressAt   int64
	progressTick bool
	// heardAt is when the source was last heard from in relay-ready (the
	// relay-ready itself, a relay); it waits for the first tick like
	// readyAt.
	heardAt int64
	relays  [][]byte
	// openAt is when the target opened, on the Tick clock (set by the next
	// tick if not ticked yet, like readyAt); forgotten: Forget was stepped.
	openAt    int64
	forgotten bool
	retry     bool // a transient store failure waits for the next tick
	unsure    bool // a commit attempt failed transiently: it may have been written (its answer lost)
	// waitLogged: the commit's wait for the store passed CommitDeadline
	// and was logged.
	waitLogged bool
	outcome    Outcome
	ownerGen   uint64 // the owner generation the commit wrote
}

// NewTarget returns a target machine.
func NewTarget(cfg TargetConfig) *Target {
	if cfg.CutoverWait <= 0 {
		cfg.CutoverWait = DefaultCutoverWait
	}
	if cfg.CommitDeadline <= 0 {
		cfg.CommitDeadline = DefaultCommitDeadline
	}
	if cfg.AssemblyTimeout <= 0 {
		cfg.AssemblyTimeout = DefaultAssemblyTimeout
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.MaxRecord <= 0 {
		cfg.MaxRecord = DefaultMaxRecord
	}
	if cfg.FollowFor <= 0 {
		cfg.FollowFor = DefaultFollowFor
	}
	cfg.MaxRecord = min(cfg.MaxRecord, MaxMoveRecord)
	return &Target{cfg: cfg}
}

// Phase returns the machine's phase, for logs and tests.
func (t *Target) Phase() string { return tgtPhaseNames[t.phase] }

// Done reports whether the move has ended for the target (opened, failed,
// aborted or abandoned).
func (t *Target) Done() bool { return t.phase == tgtOpen || t.phase == tgtDone }

// ForgetAt returns the Tick time from which an opened target's follow
// window may end: the first Tick at or past it steps Forget, and a driver
// need not tick an opened target before it (a drain leaves thousands).
// math.MaxInt64 when no Tick would forget the move (it did not open, or
// it was forgotten); math.MinInt64 when it opened before its first Tick,
// whose time starts the window.
func (t *Target) ForgetAt() int64 {
	switch {
	case t.phase != tgtOpen || t.forgotten:
		return math.MaxInt64
	case t.waitTick:
		return math.MinInt64
	}
	return t.openAt + int64(t.cfg.FollowFor)
}

// Step advances the machine.
func (t *Target) Step(in Input) Output {
	var out Output
	switch in := in.(type) {
	case Receive:
		t.receive(in.Record, &out)
	case Restored:
		if t.phase != tgtRestoring {
			return out
		}
		if in.Err != nil {
			t.fail(&out, "restore failed: "+in.Err.Error())
			return out
		}
		t.phase = tgtReady
		t.readyAt, t.heardAt = t.now, t.now
		t.waitTick = !t.ticked
		out.send(&RelayReady{Move: t.prep.Move})
	case Tick:
		t.now, t.ticked = in.Now, true
		if t.waitTick {
			// Times taken before the first tick start from it.
			t.waitTick = false
			t.readyAt, t.heardAt, t.openAt = in.Now, in.Now, in.Now
			t.deadline = in.Now + int64(t.cfg.CommitDeadline)
		}
		if t.phase == tgtOpen {
			if !t.forgotten && t.now >= t.openAt+int64(t.cfg.FollowFor) {
				t.forgotten = true
				out.act(Forget{})
			}
			return out
		}
		if t.phase == tgtReady && in.SourceReachable {
			t.readyAt = in.Now // the wait starts again when the source is cut off
		}
		if t.progressTick || !in.SourceReachable {
			// The assembly's wait counts only while the source can send.
			t.progressTick = false
			t.progressAt = in.Now
		}
		if t.phase == tgtAssembling && t.now-t.progressAt >= int64(t.cfg.AssemblyTimeout) {
			t.fail(&out, "no chunk of the move record from the source for "+t.cfg.AssemblyTimeout.String()+
				" (it is reachable): the move is given up")
			return out
		}
		switch {
		case t.phase == tgtReady && t.now-t.readyAt >= int64(t.cfg.CutoverWait):
			out.log("target: no cutover " + t.cfg.CutoverWait.String() + " after relay-ready; committing with " +
				strconv.Itoa(len(t.relays)) + " relayed messages")
			t.commit(&out)
		case t.phase == tgtReady && t.now-t.heardAt >= int64(t.cfg.ReadyTimeout):
			out.log("target: nothing from the source (reachable) for " + t.cfg.ReadyTimeout.String() +
				" after relay-ready; committing with " + strconv.Itoa(len(t.relays)) + " relayed messages")
			t.commit(&out)
		case t.phase == tgtCommitting && t.retry:
			// A failed attempt may have been written (its answer lost):
			// giving the move up now could leave the object owned here
			// by the store and run at the source. The move waits for
			// the store's answer, as long as the store is away.
			if !t.waitLogged && t.now >= t.deadline {
				t.waitLogged = true
				out.log("target: the commit has waited " + t.cfg.CommitDeadline.String() +
					" for the store; it may have been written, so the move waits for the store's answer")
			}
			t.retry = false
			out.act(t.storeOp())
		}
	case Superseded:
		if t.prep == nil || !in.Owner.After(t.prep.Owner) {
			return out
		}
		if t.phase == tgtAssembling || t.phase == tgtRestoring {
			t.fail(&out, "a move of the object from "+in.Owner.Host+", a later owner (owner generation "+
				strconv.FormatUint(in.Owner.OwnerGen, 10)+"), began here: this move can no longer commit")
		}
	case StoreResult:
		if t.phase != tgtCommitting || t.retry {
			return out // late: it never revives a finished move
		}
		err, row := in.Err, in.Row
		if t.unsure && t.ownCommit(err) {
			// An earlier attempt was written but its answer was lost (the
			// connection broke): the row the retry finds is this move's
			// own commit. It is the commit.
			err, row = nil, currentRow(err)
		}
		switch {
		case err == nil:
			t.phase = tgtOpen
			t.outcome = Moved
			t.ownerGen = row.OwnerGen
			t.openAt = t.now // the follow window starts (at the first tick, if none came yet)
			t.waitTick = !t.ticked
			// It acts before it replies: when the Committed arrives, the
			// object already runs here.
			out.act(OpenQueue{Captured: t.record.Queue, Relayed: t.relays, Owner: row.Ownership})
			out.send(&Committed{Move: t.prep.Move, OwnerGen: t.ownerGen})
			out.finish(Moved, "")
		case isConflict(err):
			t.abandon(&out, "store: "+err.Error())
		default:
			t.retry = true // transient: the same operation on the next tick
			t.unsure = true
		}
	}
	return out
}

// ownCommit reports whether err is a conflict whose current row is what
// this move's commit writes: this host the owner, the owner generation one
// above the expected one, the same object generation. Only this move can
// write that row (an object has one move at a time, and its commit is the
// only change from the expected row to it).
func (t *Target) ownCommit(err error) bool {
	var c *ConflictError
	if !errors.As(err, &c) {
		return false
	}
	cur, want := c.Current.Ownership, t.prep.Owner
	return c.Current.State == Active && cur.Host == t.cfg.Host && cur.OwnerGen == want.OwnerGen+1 && cur.ObjectGen == want.ObjectGen
}

func currentRow(err error) Row {
	var c *ConflictError
	errors.As(err, &c)
	return c.Current
}

func isConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c) || errors.Is(err, ErrNoRow) || errors.Is(err, ErrLeaseExpired)
}

func (t *Target) receive(r Record, out *Output) {
	if t.prep != nil && r.MoveID() != t.prep.Move {
		out.log("target: record of another move discarded")
		return
	}
	switch r := r.(type) {
	case *Prepare:
		t.onPrepare(r, out)
	case *Chunk:
		t.onChunk(r, out)
	case *Abort:
		if t.phase == tgtAssembling || t.phase == tgtRestoring || t.phase == tgtReady {
			t.phase = tgtDone
			t.outcome = Aborted
			out.act(DiscardTempQueue{Reason: "source aborted: " + r.Reason})
			out.finish(Aborted, r.Reason)
		}
	case *Relay:
		t.onRelay(r, out)
	case *Cutover:
		if t.phase == tgtOpen {
			// A repeat: the source did not get our Committed (it resends
			// its batch and cutover when the link comes back).
			out.send(&Committed{Move: t.prep.Move, OwnerGen: t.ownerGen})
			return
		}
		if t.phase != tgtReady {
			return
		}
		if int(r.Boundary) != len(t.relays) || r.Checksum != relayChecksum(t.relays) {
			out.log("target: cutover does not match the relayed batch (" + strconv.Itoa(len(t.relays)) + " of " +
				strconv.Itoa(int(r.Boundary)) + "); waiting for the batch to be resent")
			return
		}
		t.commit(out)
	}
}

func (t *Target) onPrepare(p *Prepare, out *Output) {
	if t.prep == nil {
		if p.ChunkCount == 0 || uint64(p.ChunkCount) > uint64(p.TotalLen)+1 {
			t.prep = p
			t.fail(out, "prepare with an impossible chunk count")
			return
		}
		if int64(p.TotalLen) > t.cfg.MaxRecord {
			t.prep = p
			t.fail(out, "prepare declares a move record of "+strconv.FormatUint(uint64(p.TotalLen), 10)+
				" bytes, more than this host takes ("+strconv.FormatInt(t.cfg.MaxRecord, 10)+")")
			return
		}
		t.prep = p
		t.phase = tgtAssembling
		t.progressed()
		out.act(RegisterTempQueue{Object: p.Object})
		return
	}
	if *p != *t.prep {
		if t.phase == tgtAssembling || t.phase == tgtRestoring || t.phase == tgtReady {
			t.fail(out, "duplicate prepare differs from the first")
		}
		return
	}
	// A repeat (the source resent after a link failure): answer for the
	// phase we are in.
	switch t.phase {
	case tgtReady:
		out.send(&RelayReady{Move: p.Move})
	case tgtOpen:
		out.send(&Committed{Move: p.Move, OwnerGen: t.ownerGen})
	case tgtDone:
		if t.outcome != Aborted {
			out.send(&Failed{Move: p.Move, Reason: "move ended: " + t.outcome.String()})
		}
	}
}

// progressed notes that the assembly made progress now (at the first
// tick, if none has come yet).
func (t *Target) progressed() {
	t.progressAt = t.now
	t.progressTick = !t.ticked
}

func (t *Target) onChunk(c *Chunk, out *Output) {
	if t.phase != tgtAssembling {
		return
	}
	if c.Index >= t.prep.ChunkCount {
		t.fail(out, "chunk index out of range")
		return
	}
	got := uint32(len(t.ends))
	if c.Index < got { // a repeat (the source resent from the start)
		start := 0
		if c.Index > 0 {
			start = t.ends[c.Index-1]
		}
		if string(t.asm[start:t.ends[c.Index]]) != string(c.Data) {
			t.fail(out, "duplicate chunk with different bytes")
		}
		return
	}
	if c.Index > got {
		// A source sends its chunks in order, and again from the first
		// after a link failure: a chunk ahead of its turn is no source's.
		t.fail(out, "chunk "+strconv.FormatUint(uint64(c.Index), 10)+" before chunk "+strconv.FormatUint(uint64(got), 10))
		return
	}
	if len(t.asm)+len(c.Data) > int(t.prep.TotalLen) {
		t.fail(out, "move record longer than declared ("+strconv.FormatUint(uint64(t.prep.TotalLen), 10)+" bytes)")
		return
	}
	if got+1 < t.prep.ChunkCount && len(c.Data) == 0 {
		t.fail(out, "empty chunk before the last")
		return
	}
	t.asm = append(t.asm, c.Data...)
	t.ends = append(t.ends, len(t.asm))
	t.progressed()
	if got+1 < t.prep.ChunkCount {
		return
	}
	rec := t.asm
	t.asm, t.ends = nil, nil
	if uint32(len(rec)) != t.prep.TotalLen {
		t.fail(out, "move record length "+strconv.Itoa(len(rec))+", declared "+strconv.Itoa(int(t.prep.TotalLen)))
		return
	}
	if Checksum(rec) != t.prep.CRC {
		t.fail(out, "move record checksum mismatch")
		return
	}
	m, err := DecodeMoveRecord(rec)
	if err != nil {
		t.fail(out, err.Error())
		return
	}
	t.record = m
	t.phase = tgtRestoring
	out.act(RestoreObject{Record: m})
}

func (t *Target) onRelay(r *Relay, out *Output) {
	switch t.phase {
	case tgtReady, tgtCommitting:
	case tgtOpen:
		if int(r.Seq) == len(t.relays) {
			f := append([]byte{}, r.Frame...)
			t.relays = append(t.relays, f)
			out.act(DeliverLate{Frames: [][]byte{f}})
		}
		return
	default:
		return
	}
	if t.ticked {
		t.heardAt = t.now
	}
	switch {
	case r.Seq == 0:
		// The batch starts (again): replace whatever partial span we had.
		t.relays = [][]byte{append([]byte{}, r.Frame...)}
	case int(r.Seq) == len(t.relays):
		t.relays = append(t.relays, append([]byte{}, r.Frame...))
	default:
		out.log("target: relay " + strconv.Itoa(int(r.Seq)) + " out of order after " + strconv.Itoa(len(t.relays)) + "; waiting for the resend")
	}
}

func relayChecksum(frames [][]byte) uint32 {
	var all []byte
	for _, f := range frames {
		all = append(all, f...)
	}
	return Checksum(all)
}

func (t *Target) commit(out *Output) {
	t.phase = tgtCommitting
	t.deadline = t.now + int64(t.cfg.CommitDeadline)
	t.waitTick = !t.ticked
	out.act(t.storeOp())
}

func (t *Target) storeOp() StoreNewOwner {
	return StoreNewOwner{Object: t.prep.Object, Expect: t.prep.Owner, NewHost: t.cfg.Host}
}

// fail ends the move before relay-ready: Failed to the source, the
// temporary queue discarded. Never a partial restore.
func (t *Target) fail(out *Output, reason string) {
	t.phase = tgtDone
	t.outcome = Aborted
	out.act(DiscardTempQueue{Reason: reason})
	out.send(&Failed{Move: t.prep.Move, Reason: reason})
	out.finish(Aborted, reason)
}

// abandon ends the move after relay-ready without owning the object: the
// source is told (it keeps no follow route to us) and nothing runs here.
func (t *Target) abandon(out *Output, reason string) {
	t.phase = tgtDone
	t.outcome = Abandoned
	out.act(Abandon{Reason: reason, Captured: t.record.Queue, Relayed: t.relays})
	out.send(&Failed{Move: t.prep.Move, Reason: "abandoned: " + reason})
	out.finish(Abandoned, reason)
}
