package actor

import (
	"strings"
	"testing"

	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// The moves a host assembles are bounded in bytes, by their declared
// record sizes: one source may have at most its share of
// Config.MaxIncomingMoveBytes under way (half of it, or MaxMoveRecord if
// that is more), all sources together at most all of it. A Prepare past
// either is refused at once with a reason naming the setting, counted,
// and nothing is kept for it; once a move ends its bytes are free again.
// Before, a source that owned objects could have 256 moves of
// MaxMoveRecord each under way at one target.
func TestIncomingMovesAreBoundedInBytesPerSourceAndPerHost(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	const record = 1 << 20
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs,
		MaxMoveRecord: record, MaxIncomingMoveBytes: record * 3 / 2}), movableKind(newGates()))
	type source struct {
		name string
		x    *rawPeer
		tr   transport.Transport
	}
	var srcs []source
	for _, name := range []string{"x", "y"} {
		x := &rawPeer{}
		tr, err := n.Transport.Attach(name, x)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(false) })
		srcs = append(srcs, source{name, x, tr})
	}
	failed := func(s source, mv relocation.MoveID) string {
		for _, it := range s.x.items() {
			if it.Kind != transport.Record {
				continue
			}
			if _, r, err := relocation.DecodeRecord(it.Data); err == nil && r.MoveID() == mv {
				if f, ok := r.(*relocation.Failed); ok {
					return f.Reason
				}
			}
		}
		return ""
	}
	seq := byte(0)
	// prepare sends s's Prepare of a fresh object it owns, declaring size
	// bytes, and reports whether b took it (else the refusal's reason).
	prepare := func(s source, size uint32) (relocation.MoveID, string) {
		t.Helper()
		seq++
		mv := relocation.MoveID{0xbb, seq}
		obj := relocation.Object{Kind: "counter", ID: s.name + itoa(int(seq))}
		owner := preflightAs(t, n, b, s.tr, s.name, obj, mv)
		p := &relocation.Prepare{Move: mv, Object: obj, Source: s.name, Owner: owner, TotalLen: size, ChunkCount: 1, CRC: 1}
		if err := s.tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, p)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "b to take or refuse the Prepare", func() bool { return b.moves.move(mv) != nil || failed(s, mv) != "" })
		return mv, failed(s, mv)
	}
	x, y := srcs[0], srcs[1]
	// x: its share is one record (MaxMoveRecord, more than half of 1.5).
	if _, why := prepare(x, record); why != "" {
		t.Fatalf("x's first move refused: %s", why)
	}
	mv, why := prepare(x, 1)
	if why == "" || !strings.Contains(why, "MaxIncomingMoveBytes") || !strings.Contains(why, "from x") {
		t.Fatalf("x's byte past its share: %q, want a refusal naming its share of MaxIncomingMoveBytes", why)
	}
	if b.moves.move(mv) != nil {
		t.Fatal("a move refused was kept")
	}
	if got := obs.snapshot()[RejectIncomingMoves]; got != 1 {
		t.Fatalf("%d refusals counted, want 1", got)
	}
	// y: within its share, but not within the host's 1.5 records.
	if _, why := prepare(y, record/2); why != "" {
		t.Fatalf("y's first move, half a record, refused: %s", why)
	}
	if _, why := prepare(y, record/4); why == "" || !strings.Contains(why, "its Config.MaxIncomingMoveBytes") {
		t.Fatalf("y's quarter record past the host's total: %q, want a refusal naming the host's limit", why)
	}
	if got := obs.snapshot()[RejectIncomingMoves]; got != 2 {
		t.Fatalf("%d refusals counted, want 2", got)
	}
	// y's moves end (its source aborts them): their bytes are free.
	b.moves.mu.Lock()
	var ys []*moveDriver
	for _, d := range b.moves.m {
		if d.peer == "y" {
			ys = append(ys, d)
		}
	}
	b.moves.mu.Unlock()
	for _, d := range ys {
		if err := y.tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, d.obj, &relocation.Abort{Move: d.id})}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "y's moves to end", func() bool {
		b.moves.mu.Lock()
		defer b.moves.mu.Unlock()
		return b.moves.inBytes["y"] == 0
	})
	if _, why := prepare(y, record/4); why != "" {
		t.Fatalf("y's quarter record after its moves ended: %s", why)
	}
}
