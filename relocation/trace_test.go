package relocation

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/tracetest"
	"github.com/berthrt/berth/payload"
)

// The trace tests replay scripts of inputs (testdata/*.txt, one scenario
// each; format: package internal/tracetest) against a source and a target
// machine and compare what they output with the expected trace.
// Regenerate the expected traces with
//
//	go test ./relocation -run TestTraces -rewrite
//
// only when you understand the diff.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected traces in testdata")

func TestTraces(t *testing.T) {
	tracetest.Each(t, "testdata/*.txt", runTrace)
}

var (
	testMove  = MoveID{0xa1}
	otherMove = MoveID{0xb2}
	testObj   = Object{Kind: "counter", ID: "1"}
	testOwner = Ownership{Host: "A", LeaseGen: 1, ObjectGen: 1, OwnerGen: 3, Version: 7}
)

// world is the two machines and the records in flight between them.
type world struct {
	src      *Source
	tgt      *Target
	s2t, t2s []Record
	now      int64
}

func runTrace(t *testing.T, path string) {
	w := &world{tgt: NewTarget(TargetConfig{Host: "B"})}
	tracetest.Run(t, path, *rewrite, func(cmd string) []string { return w.exec(t, cmd) })
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func list(s string) [][]byte {
	if s == "" {
		return nil
	}
	var out [][]byte
	for _, p := range strings.Split(s, ",") {
		out = append(out, []byte(p))
	}
	return out
}

func (w *world) exec(t *testing.T, cmd string) []string {
	fields := strings.Fields(cmd)
	if len(fields) < 1 || (len(fields) < 2 && fields[0] != "phases") {
		t.Fatalf("bad command %q", cmd)
	}
	var a map[string]string
	if len(fields) > 2 {
		a = args(fields[2:])
	} else {
		a = map[string]string{}
	}
	var lines []string
	// The effects, in their one order: records sent and actions.
	emit := func(who string, o Output, to *[]Record) {
		for _, e := range o.Effects {
			switch e := e.(type) {
			case Send:
				lines = append(lines, who+"send "+fmtRecord(e.Record))
				*to = append(*to, e.Record)
			case Action:
				lines = append(lines, who+fmtAction(e))
			default:
				t.Fatalf("an effect that is neither a Send nor an Action: %T", e)
			}
		}
	}
	src := func(in Input) { emit("", w.src.Step(in), &w.s2t) }
	tgt := func(in Input) { emit("", w.tgt.Step(in), &w.t2s) }
	switch fields[0] {
	case "source":
		switch fields[1] {
		case "start":
			cfg := SourceConfig{Move: testMove, Object: testObj, Source: "A", Target: "B", Owner: testOwner}
			if n, err := strconv.Atoi(a["chunk"]); err == nil {
				cfg.ChunkSize = n
			}
			w.src = NewSource(cfg)
			src(Start{})
		case "capture-failed":
			src(CaptureFailed{Err: errors.New(a["err"])})
		case "captured":
			state := []byte(a["state"])
			if n, err := strconv.Atoi(a["statebytes"]); err == nil {
				state = []byte(strings.Repeat("s", n))
			}
			src(Captured{Record: MoveRecord{State: state, Queue: list(a["queue"])}})
		case "held":
			src(HeldTaken{Frames: list(a["frames"])})
		case "abort":
			src(OperatorAbort{Reason: a["reason"]})
		case "target-dead":
			src(TargetDead{})
		case "link-up":
			src(LinkUp{})
		default:
			t.Fatalf("unknown source command %q", cmd)
		}
	case "target":
		switch fields[1] {
		case "config": // a fresh target machine, before any record
			n, _ := strconv.ParseInt(a["max-record"], 10, 64)
			follow, _ := strconv.Atoi(a["follow-ms"])
			w.tgt = NewTarget(TargetConfig{Host: "B", MaxRecord: n, FollowFor: time.Duration(follow) * time.Millisecond})
		case "forget-at": // when the opened target's follow window may end
			switch at := w.tgt.ForgetAt(); at {
			case math.MaxInt64:
				lines = append(lines, "forget-at never")
			case math.MinInt64:
				lines = append(lines, "forget-at the next tick")
			default:
				lines = append(lines, "forget-at "+time.Duration(at).String())
			}
		case "restored":
			var err error
			if e := a["err"]; e != "" {
				err = errors.New(e)
			}
			tgt(Restored{Err: err})
		case "superseded": // a move here from an owner of this object-gen and owner-gen
			own := testOwner
			own.Host = "C"
			og, _ := strconv.ParseUint(a["owner-gen"], 10, 64)
			obj, _ := strconv.ParseUint(a["object-gen"], 10, 64)
			own.OwnerGen, own.ObjectGen = og, obj
			tgt(Superseded{Owner: own})
		case "tick":
			ms, _ := strconv.Atoi(a["ms"])
			w.now += int64(time.Duration(ms) * time.Millisecond)
			tgt(Tick{Now: w.now, SourceReachable: a["reachable"] == "yes"})
		case "store":
			switch fields[2] {
			case "ok":
				row := Row{Object: testObj, Ownership: testOwner, State: Active}
				row.Host, row.OwnerGen, row.Version = "B", testOwner.OwnerGen+1, testOwner.Version+1
				tgt(StoreResult{Row: row})
			case "conflict":
				tgt(StoreResult{Err: &ConflictError{Current: Row{Object: testObj}}})
			case "mine":
				// A newer owner: this move's own commit, whose answer was lost.
				row := Row{Object: testObj, Ownership: testOwner, State: Active}
				row.Host, row.OwnerGen, row.Version = "B", testOwner.OwnerGen+1, testOwner.Version+1
				tgt(StoreResult{Err: &ConflictError{Current: row, NewerOwner: true}})
			case "newer":
				tgt(StoreResult{Err: &ConflictError{Current: Row{Object: testObj}, NewerOwner: true}})
			case "transient":
				tgt(StoreResult{Err: payload.NewError(payload.Unavailable, "store", "connection reset")})
			default:
				t.Fatalf("unknown store result %q", cmd)
			}
		default:
			t.Fatalf("unknown target command %q", cmd)
		}
	case "reply-preflight":
		r := &PreflightReply{Move: testMove, OK: fields[1] == "ok", Reason: a["reason"]}
		w.t2s = append(w.t2s, r)
		lines = append(lines, "send "+fmtRecord(r))
	case "deliver", "drop":
		q := &w.s2t
		if fields[1] == "t2s" {
			q = &w.t2s
		}
		n := len(*q)
		if v, err := strconv.Atoi(a["n"]); err == nil && v < n {
			n = v
		}
		batch := (*q)[:n:n]
		*q = (*q)[n:]
		for _, r := range batch {
			if fields[0] == "drop" {
				lines = append(lines, "dropped "+fmtRecord(r))
				continue
			}
			lines = append(lines, "recv "+fmtRecord(r))
			if fields[1] == "t2s" {
				emit("  ", w.src.Step(Receive{Record: r}), &w.s2t)
			} else {
				emit("  ", w.tgt.Step(Receive{Record: r}), &w.t2s)
			}
		}
	case "inject":
		// inject s2t <record> ...: a crafted record, delivered at once.
		var r Record
		move := testMove
		if a["move"] == "other" {
			move = otherMove
		}
		switch fields[2] {
		case "chunk":
			idx, _ := strconv.Atoi(a["idx"])
			r = &Chunk{Move: move, Index: uint32(idx), Data: []byte(a["data"])}
		case "prepare":
			total, chunks := uint64(5), uint64(1)
			if n, err := strconv.ParseUint(a["len"], 10, 32); err == nil {
				total = n
			}
			if n, err := strconv.ParseUint(a["chunks"], 10, 32); err == nil {
				chunks = n
			}
			r = &Prepare{Move: move, Object: testObj, Source: "A", Owner: testOwner, TotalLen: uint32(total), ChunkCount: uint32(chunks), CRC: 1}
		case "relay":
			seq, _ := strconv.Atoi(a["seq"])
			r = &Relay{Move: move, Seq: uint32(seq), Frame: []byte(a["frame"])}
		case "committed":
			r = &Committed{Move: move, OwnerGen: 4}
		default:
			t.Fatalf("unknown injected record %q", cmd)
		}
		lines = append(lines, "recv "+fmtRecord(r))
		if fields[1] == "t2s" {
			emit("  ", w.src.Step(Receive{Record: r}), &w.s2t)
		} else {
			emit("  ", w.tgt.Step(Receive{Record: r}), &w.t2s)
		}
	case "phases":
		s := "none"
		if w.src != nil {
			s = w.src.Phase()
		}
		lines = append(lines, fmt.Sprintf("source %s, target %s, in flight s2t %d t2s %d", s, w.tgt.Phase(), len(w.s2t), len(w.t2s)))
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	return lines
}

func fmtMove(m MoveID) string {
	if m == testMove {
		return ""
	}
	return " move=other"
}

func fmtFrames(fs [][]byte) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = string(f)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtRecord(r Record) string {
	switch r := r.(type) {
	case *Preflight:
		return "Preflight " + r.Object.String() + fmtMove(r.Move)
	case *PreflightReply:
		if r.OK {
			return "PreflightReply ok"
		}
		return fmt.Sprintf("PreflightReply no reason=%q", r.Reason)
	case *Prepare:
		o := r.Owner
		return fmt.Sprintf("Prepare %s from=%s owner=%s/lease%d/obj%d/own%d/v%d len=%d chunks=%d crc=%08x%s",
			r.Object, r.Source, o.Host, o.LeaseGen, o.ObjectGen, o.OwnerGen, o.Version, r.TotalLen, r.ChunkCount, r.CRC, fmtMove(r.Move))
	case *Chunk:
		return fmt.Sprintf("Chunk %d len=%d%s", r.Index, len(r.Data), fmtMove(r.Move))
	case *RelayReady:
		return "RelayReady" + fmtMove(r.Move)
	case *Failed:
		return fmt.Sprintf("Failed reason=%q%s", r.Reason, fmtMove(r.Move))
	case *Abort:
		return fmt.Sprintf("Abort reason=%q%s", r.Reason, fmtMove(r.Move))
	case *Relay:
		return fmt.Sprintf("Relay %d %s%s", r.Seq, r.Frame, fmtMove(r.Move))
	case *Cutover:
		return fmt.Sprintf("Cutover boundary=%d checksum=%08x%s", r.Boundary, r.Checksum, fmtMove(r.Move))
	case *Committed:
		return fmt.Sprintf("Committed ownergen=%d%s", r.OwnerGen, fmtMove(r.Move))
	}
	return fmt.Sprintf("%T", r)
}

func fmtAction(a Action) string {
	switch a := a.(type) {
	case SealAndCapture:
		return "action seal-and-capture"
	case ReopenOwner:
		return "action reopen"
	case TakeHeld:
		return "action take-held"
	case InstallFollow:
		return "action follow " + a.Target
	case DropFollow:
		return "action drop-follow"
	case RegisterTempQueue:
		return "action temp-queue " + a.Object.String()
	case RestoreObject:
		st := string(a.Record.State)
		if len(st) > 16 {
			st = strconv.Itoa(len(st)) + " bytes"
		}
		return fmt.Sprintf("action restore state=%q queue=%s", st, fmtFrames(a.Record.Queue))
	case DiscardTempQueue:
		return fmt.Sprintf("action discard-temp reason=%q", a.Reason)
	case StoreNewOwner:
		e := a.Expect
		return fmt.Sprintf("action store new-owner %s expect=%s/own%d/v%d host=%s", a.Object, e.Host, e.OwnerGen, e.Version, a.NewHost)
	case OpenQueue:
		return "action open captured=" + fmtFrames(a.Captured) + " relayed=" + fmtFrames(a.Relayed)
	case DeliverLate:
		return "action deliver-late " + fmtFrames(a.Frames)
	case Forget:
		return "action forget"
	case Abandon:
		return fmt.Sprintf("action abandon reason=%q hand-on=%s%s", a.Reason, fmtFrames(a.Captured), fmtFrames(a.Relayed))
	case Finish:
		if a.Reason == "" {
			return "finish " + a.Outcome.String()
		}
		return fmt.Sprintf("finish %s reason=%q", a.Outcome, a.Reason)
	case Log:
		return "log " + a.Msg
	}
	return fmt.Sprintf("action %T", a)
}
