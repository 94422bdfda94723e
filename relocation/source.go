package relocation

// SourceConfig describes a move from the source's side.
type SourceConfig struct {
	Move       MoveID
	Object     Object
	Source     string    // this host
	Target     string    // the host the object moves to
	Owner      Ownership // the row as the source read it
	AppVersion string
	ChunkSize  int // move record chunk size; default DefaultChunkSize
}

type srcPhase uint8

const (
	srcIdle srcPhase = iota
	srcPreflight
	srcCapturing // SealAndCapture asked for: the owner is (being) sealed
	srcPrepared  // waiting for relay-ready; abort still possible
	srcRelaying  // relay-ready accepted; waiting for the hold
	srcCutover   // batch and cutover sent; waiting for the commit
	srcDone
)

var srcPhaseNames = [...]string{"idle", "preflight", "capturing", "prepared", "relaying", "cutover", "done"}

// Source is the source side of one move, as a pure state machine: Step
// takes an input and returns the effects for the driver — records to send
// and actions — in the order it must carry them out. It does no I/O,
// starts no goroutine and reads no clock. Not safe for concurrent use; the
// driver steps it on the move's own serial lane.
//
// Order: Start → Preflight; PreflightReply → SealAndCapture (the seal and
// the move record in one turn of the owner); Captured → Prepare and
// chunks; RelayReady (accepted: no abort after this) → InstallFollow, then
// TakeHeld (the forwarding route is in place before the owner leaves);
// HeldTaken → the relays and Cutover; Committed → Finish(Moved). Before
// relay-ready, Failed, CaptureFailed, OperatorAbort or TargetDead →
// ReopenOwner (then Abort to the target, if it has the Prepare) and
// Finish(Aborted). LinkUp resends what the phase needs; the target treats
// repeats idempotently.
type Source struct {
	cfg       SourceConfig
	phase     srcPhase
	accepted  bool // relay-ready accepted (or a commit seen): never reopen
	committed bool // the target reported the commit
	prepare   *Prepare
	chunks    []*Chunk
	batch     []*Relay
	cutover   *Cutover
}

// NewSource returns the source machine for a move.
func NewSource(cfg SourceConfig) *Source {
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	return &Source{cfg: cfg}
}

// Phase returns the machine's phase, for logs and tests.
func (s *Source) Phase() string { return srcPhaseNames[s.phase] }

// Done reports whether the move has ended for the source.
func (s *Source) Done() bool { return s.phase == srcDone }

// AcceptedRelayReady reports whether the move passed the point of no
// return: from here on the source never reopens.
func (s *Source) AcceptedRelayReady() bool { return s.accepted }

// Step advances the machine.
func (s *Source) Step(in Input) Output {
	var out Output
	switch in := in.(type) {
	case Start:
		if s.phase == srcIdle {
			s.phase = srcPreflight
			out.send(s.preflight())
		}
	case Receive:
		s.receive(in.Record, &out)
	case Captured:
		if s.phase == srcCapturing {
			s.prepareRecord(in.Record)
			s.phase = srcPrepared
			s.sendPrepare(&out)
		}
	case HeldTaken:
		if s.phase == srcRelaying {
			s.batch = make([]*Relay, len(in.Frames))
			var sum []byte
			for i, f := range in.Frames {
				s.batch[i] = &Relay{Move: s.cfg.Move, Seq: uint32(i), Frame: f}
				sum = append(sum, f...)
			}
			s.cutover = &Cutover{Move: s.cfg.Move, Boundary: uint32(len(in.Frames)), Checksum: Checksum(sum)}
			s.phase = srcCutover
			s.sendBatch(&out)
			if s.committed {
				s.phase = srcDone
				out.finish(Moved, "")
			}
		}
	case CaptureFailed:
		if s.phase == srcCapturing {
			s.abort(&out, "capture failed: "+in.Err.Error(), false)
		}
	case OperatorAbort:
		s.abort(&out, "operator: "+in.Reason, true)
	case TargetDead:
		if s.phase == srcRelaying || s.phase == srcCutover {
			s.phase = srcDone
			out.finish(Lost, "target died after relay-ready was accepted")
			return out
		}
		s.abort(&out, "target died", false)
	case LinkUp:
		switch s.phase {
		case srcPreflight:
			out.send(s.preflight())
		case srcPrepared:
			s.sendPrepare(&out)
		case srcCutover:
			s.sendBatch(&out)
		}
	case Tick:
		// No guessed rollback after a timeout: the source waits for the
		// target, for an operator, or for the target's death.
	}
	return out
}

func (s *Source) preflight() *Preflight {
	return &Preflight{Move: s.cfg.Move, Object: s.cfg.Object, AppVersion: s.cfg.AppVersion}
}

func (s *Source) receive(r Record, out *Output) {
	if r.MoveID() != s.cfg.Move {
		out.log("source: record of another move discarded")
		return
	}
	switch r := r.(type) {
	case *PreflightReply:
		if s.phase != srcPreflight {
			return
		}
		if !r.OK {
			s.phase = srcDone
			out.finish(NotStarted, "preflight: "+r.Reason)
			return
		}
		s.phase = srcCapturing
		out.act(SealAndCapture{})
	case *RelayReady:
		if s.phase == srcPrepared {
			s.phase = srcRelaying
			s.accepted = true
			s.takeHeld(out)
		}
	case *Failed:
		switch s.phase {
		case srcPrepared:
			s.abort(out, "target failed: "+r.Reason, false)
		case srcRelaying, srcCutover:
			// The target lost its store CAS: someone else owns the object.
			// The source still never reopens; senders find the owner anew.
			s.phase = srcDone
			out.act(DropFollow{})
			out.finish(Abandoned, r.Reason)
		}
	case *Committed:
		switch s.phase {
		case srcCutover:
			s.phase = srcDone
			out.finish(Moved, "")
		case srcRelaying:
			s.committed = true // finish once the hold is relayed
		case srcPrepared:
			// The commit overtook our view of relay-ready (it was lost and
			// the target committed on its own): relay the hold, which the
			// target delivers after what it opened, and finish.
			s.phase, s.accepted, s.committed = srcRelaying, true, true
			s.takeHeld(out)
		}
	}
}

// takeHeld makes the move final here: the forwarding route to the target
// first, so that a sender that misses the owner once it left finds the
// route, then the hold.
func (s *Source) takeHeld(out *Output) {
	out.act(InstallFollow{Target: s.cfg.Target}, TakeHeld{})
}

// abort ends the move before relay-ready: the source reopens. After
// relay-ready is accepted nothing can abort.
func (s *Source) abort(out *Output, reason string, tellTarget bool) {
	switch s.phase {
	case srcIdle, srcPreflight:
		s.phase = srcDone
		out.finish(Aborted, reason)
	case srcCapturing, srcPrepared:
		// It acts before it tells its peer: reopened, then the Abort.
		out.act(ReopenOwner{})
		if tellTarget && s.phase == srcPrepared {
			out.send(&Abort{Move: s.cfg.Move, Reason: reason})
		}
		s.phase = srcDone
		out.finish(Aborted, reason)
	case srcRelaying, srcCutover:
		out.log("source: abort refused after relay-ready was accepted: " + reason)
	}
}

func (s *Source) prepareRecord(m MoveRecord) {
	rec := m.Encode(nil)
	parts := split(rec, s.cfg.ChunkSize)
	s.prepare = &Prepare{Move: s.cfg.Move, Object: s.cfg.Object, Source: s.cfg.Source, Owner: s.cfg.Owner,
		TotalLen: uint32(len(rec)), ChunkCount: uint32(len(parts)), CRC: Checksum(rec)}
	s.chunks = make([]*Chunk, len(parts))
	for i, p := range parts {
		s.chunks[i] = &Chunk{Move: s.cfg.Move, Index: uint32(i), Data: p}
	}
}

func (s *Source) sendPrepare(out *Output) {
	out.send(s.prepare)
	for _, c := range s.chunks {
		out.send(c)
	}
}

func (s *Source) sendBatch(out *Output) {
	for _, r := range s.batch {
		out.send(r)
	}
	out.send(s.cutover)
}
