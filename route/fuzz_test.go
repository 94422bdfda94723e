package route

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/berthrt/berth/payload"
)

// richSnapshot has every kind of field: several senders, held frames
// (one empty), idle and waiting times, a trail.
func richSnapshot() Snapshot {
	return Snapshot{
		Senders: []SenderState{
			{Sender: "host-a", Epoch: 1 << 40, Next: 7, Idle: 1500, Waited: 900, Unsure: 5, Held: []HeldFrame{
				{Seq: 9, Frame: []byte("m9")}, {Seq: 12, Frame: []byte{}}, {Seq: 13, Frame: bytes.Repeat([]byte{0xff}, 40)},
			}},
			{Sender: "", Epoch: 0, Next: 1},
			{Sender: "host-c", Epoch: 3, Next: 1 << 50, Idle: 1 << 62},
		},
		Trail:    []TrailAge{{Host: "p", Left: 1}, {Host: "q", Left: 1 << 40}},
		Takeover: TakeoverAge{Ago: 5, Window: 1 << 35, Wait: 250e6},
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, s := range []Snapshot{{}, richSnapshot()} {
		b := AppendSnapshot([]byte("prefix"), s)
		got, err := DecodeSnapshot(b[len("prefix"):])
		if err != nil {
			t.Fatal(err)
		}
		// Decoding turns empty frames into empty (non-nil) slices and
		// keeps absent lists nil; compare encodings, then fields.
		if re := AppendSnapshot(nil, got); !bytes.Equal(re, b[len("prefix"):]) {
			t.Errorf("re-encoding differs:\n%x\n%x", re, b[len("prefix"):])
		}
		if len(got.Senders) != len(s.Senders) || len(got.Trail) != len(s.Trail) {
			t.Fatalf("decoded %+v, want %+v", got, s)
		}
		for i := range s.Senders {
			w, g := s.Senders[i], got.Senders[i]
			if g.Sender != w.Sender || g.Epoch != w.Epoch || g.Next != w.Next || g.Idle != w.Idle || g.Waited != w.Waited || g.Unsure != w.Unsure || len(g.Held) != len(w.Held) {
				t.Errorf("sender %d: got %+v, want %+v", i, g, w)
			}
			for j := range w.Held {
				if g.Held[j].Seq != w.Held[j].Seq || !bytes.Equal(g.Held[j].Frame, w.Held[j].Frame) {
					t.Errorf("sender %d held %d: got %+v, want %+v", i, j, g.Held[j], w.Held[j])
				}
			}
		}
		if !reflect.DeepEqual(got.Trail, s.Trail) {
			t.Errorf("trail %+v, want %+v", got.Trail, s.Trail)
		}
		if got.Takeover != s.Takeover {
			t.Errorf("takeover %+v, want %+v", got.Takeover, s.Takeover)
		}
	}
}

// A version 1 snapshot (before the takeover field) and a version 2 one
// (before the senders' Unsure) still decode: with no takeover, and with
// every sender unsure below its next (a message sent again there runs
// rather than be dropped on a doubt).
func TestDecodeSnapshotReadsVersions1And2(t *testing.T) {
	s := richSnapshot()
	s.Takeover = TakeoverAge{}
	b := AppendSnapshot(nil, s)
	v2 := append([]byte{2}, b[1:len(b)-len(appendUnsure(nil, s.Senders))]...)
	v1 := append([]byte{1}, v2[1:len(v2)-1]...) // no takeover byte
	for _, old := range [][]byte{v1, v2} {
		got, err := DecodeSnapshot(old)
		if err != nil {
			t.Fatalf("version %d: %v", old[0], err)
		}
		if len(got.Senders) != len(s.Senders) || len(got.Trail) != len(s.Trail) || got.Takeover != (TakeoverAge{}) {
			t.Fatalf("version %d: decoded %+v", old[0], got)
		}
		for _, st := range got.Senders {
			if st.Unsure != st.Next {
				t.Fatalf("version %d: sender %q decoded unsure below %d, want its next %d", old[0], st.Sender, st.Unsure, st.Next)
			}
		}
	}
}

func TestDecodeSnapshotRejects(t *testing.T) {
	good := AppendSnapshot(nil, richSnapshot())
	bad := map[string][]byte{
		"version":        append([]byte{4}, good[1:]...),
		"unsure count":   append(append([]byte{}, good[:len(good)-8*3-2]...), append([]byte{0, 2}, good[len(good)-8*3:len(good)-8]...)...),
		"trailing":       append(append([]byte{}, good...), 0),
		"senders":        {1, 0xff, 0xff, 0, 0},
		"takeover flag":  {3, 0, 0, 0, 0, 2, 0, 0},
		"empty takeover": append(append([]byte{3, 0, 0, 0, 0, 1}, make([]byte, 24)...), 0, 0),
	}
	for n := 1; n < len(good); n++ {
		bad[fmt.Sprintf("truncated at %d", n)] = good[:n]
	}
	for name, b := range bad {
		if _, err := DecodeSnapshot(b); payload.KindOf(err) != payload.ProtocolError {
			t.Errorf("%s: error %v, want a ProtocolError", name, err)
		}
	}
}

// FuzzDecodeSnapshot: DecodeSnapshot never panics, fails only with a
// ProtocolError, and what it decodes re-encodes to the bytes it came from
// — with two exceptions the format defines: the empty input is the empty
// Snapshot, and a duration above 2^62ns decodes as 2^62ns (then the
// re-encoding is the input with those durations clamped: as long, and a
// fixed point).
func FuzzDecodeSnapshot(f *testing.F) {
	rich := AppendSnapshot(nil, richSnapshot())
	f.Add([]byte{})
	f.Add(AppendSnapshot(nil, Snapshot{}))
	f.Add(rich)
	for _, n := range []int{1, 3, 10, 37, 60, len(rich) / 2, len(rich) - 1} {
		f.Add(rich[:n])
	}
	f.Add(AppendSnapshot(nil, Snapshot{Senders: []SenderState{{Sender: "a", Next: 1, Idle: 1<<62 + 1}}, Trail: []TrailAge{{Host: "p", Left: 1<<63 - 1}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshot(b)
		if err != nil {
			if payload.KindOf(err) != payload.ProtocolError {
				t.Fatalf("error %v is not a ProtocolError", err)
			}
			return
		}
		if len(b) == 0 {
			return
		}
		switch b[0] {
		case snapshotV1:
			// A version 1 snapshot re-encodes as the current version with
			// no takeover, every sender unsure below its next.
			b = appendUnsure(append(append([]byte{snapshotVersion}, b[1:]...), 0), s.Senders)
		case snapshotV2:
			b = appendUnsure(append([]byte{snapshotVersion}, b[1:]...), s.Senders)
		}
		re := AppendSnapshot(nil, s)
		if bytes.Equal(re, b) {
			return
		}
		if !clamped(s) || len(re) != len(b) {
			t.Fatalf("decoded %+v\nre-encodes to %x\n        from %x", s, re, b)
		}
		s2, err := DecodeSnapshot(re)
		if err != nil || !bytes.Equal(AppendSnapshot(nil, s2), re) {
			t.Fatalf("clamped re-encoding %x is no fixed point (%v)", re, err)
		}
	})
}

// clamped reports whether a decoded s has a duration at the decoder's
// bound, 2^62ns.
func clamped(s Snapshot) bool {
	const bound = 1 << 62
	for _, st := range s.Senders {
		if st.Idle == bound || st.Waited == bound {
			return true
		}
	}
	for _, h := range s.Trail {
		if h.Left == bound {
			return true
		}
	}
	t := s.Takeover
	return t.Ago == bound || t.Window == bound || t.Wait == bound
}
