package relocation

import (
	"bytes"
	"errors"
	"testing"

	"github.com/berthrt/berth/payload"
)

func TestMoveRecordRoundTripAndSplit(t *testing.T) {
	m := MoveRecord{State: []byte("state"), Queue: [][]byte{[]byte("f1"), {}, []byte("frame-three")}}
	enc := m.Encode(nil)
	got, err := DecodeMoveRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.State) != "state" || len(got.Queue) != 3 || string(got.Queue[2]) != "frame-three" || len(got.Queue[1]) != 0 {
		t.Fatalf("round trip = %+v", got)
	}
	parts := split(enc, 7)
	if len(parts) != (len(enc)+6)/7 || !bytes.Equal(bytes.Join(parts, nil), enc) {
		t.Fatalf("split into %d parts does not reassemble", len(parts))
	}
	if p := split(nil, 7); len(p) != 1 || len(p[0]) != 0 {
		t.Fatal("an empty record must still travel as one (empty) chunk")
	}
	empty, err := DecodeMoveRecord((&MoveRecord{}).Encode(nil))
	if err != nil || len(empty.State) != 0 || len(empty.Queue) != 0 {
		t.Fatalf("empty record: %+v, %v", empty, err)
	}
}

func TestDecodeMoveRecordRejectsMalformedInput(t *testing.T) {
	good := (&MoveRecord{State: []byte("s"), Queue: [][]byte{[]byte("q")}}).Encode(nil)
	for i := 0; i < len(good); i++ {
		if _, err := DecodeMoveRecord(good[:i]); !errors.Is(err, payload.ProtocolError) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	if _, err := DecodeMoveRecord(append(good, 0)); !errors.Is(err, payload.ProtocolError) {
		t.Fatal("trailing byte accepted")
	}
	if _, err := DecodeMoveRecord(append(good, 0, 0, 0, 0)); !errors.Is(err, payload.ProtocolError) {
		t.Fatal("an empty extra section accepted (it has one encoding: none)")
	}
	withExtra := (&MoveRecord{State: []byte("s"), Extra: []byte("order")}).Encode(nil)
	if m, err := DecodeMoveRecord(withExtra); err != nil || string(m.Extra) != "order" {
		t.Fatalf("extra section round trip = %q, %v", m.Extra, err)
	}
	huge := []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	if _, err := DecodeMoveRecord(huge); !errors.Is(err, payload.ProtocolError) {
		t.Fatal("a queue count larger than the record was accepted")
	}
}

func FuzzDecodeMoveRecord(f *testing.F) {
	f.Add((&MoveRecord{State: []byte("s"), Queue: [][]byte{[]byte("a"), []byte("bb")}}).Encode(nil))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMoveRecord(b)
		if err != nil {
			if !errors.Is(err, payload.ProtocolError) {
				t.Fatalf("error of kind %v", payload.KindOf(err))
			}
			return
		}
		if !bytes.Equal(m.Encode(nil), b) {
			t.Fatal("decode then encode changed the bytes")
		}
	})
}

func TestMoveRecordEncodedLenIsTheEncodingsLength(t *testing.T) {
	for _, m := range []MoveRecord{{}, {State: []byte("s")}, {Queue: [][]byte{[]byte("a"), nil}, Extra: []byte("xy")}, {State: make([]byte, 100), Queue: [][]byte{make([]byte, 7)}}} {
		if got, want := m.EncodedLen(), len(m.Encode(nil)); got != want {
			t.Errorf("EncodedLen of %+v = %d, want %d", m, got, want)
		}
	}
}
