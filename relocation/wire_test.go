package relocation

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

var wireObj = Object{Kind: "account", ID: "acct-42/ünïcode"}

func wireMove(seed byte) MoveID {
	var id MoveID
	for i := range id {
		id[i] = seed + byte(i)*17
	}
	return id
}

// wireRecords returns one record of every type, with non-trivial values in
// every field (the largest values of each integer field somewhere).
func wireRecords() []Record {
	m := wireMove(3)
	return []Record{
		&Preflight{Move: m, Object: Object{Kind: "cart", ID: "c-1"}, AppVersion: "v1.4.2+build.7"},
		&PreflightReply{Move: m, OK: true, Reason: ""},
		&PreflightReply{Move: m, OK: false, Reason: "kind cart not hosted here"},
		&Prepare{
			Move:   m,
			Object: wireObj,
			Source: "host-a:7000",
			Owner: Ownership{
				Host:      "host-a:7000",
				LeaseGen:  1<<64 - 1,
				ObjectGen: 7,
				OwnerGen:  1 << 40,
				Version:   123456789,
			},
			TotalLen:   1<<32 - 1,
			ChunkCount: 300,
			CRC:        0xdeadbeef,
		},
		&Chunk{Move: m, Index: 1<<32 - 1, Data: bytes.Repeat([]byte{0, 1, 0xff}, 100)},
		&RelayReady{Move: m},
		&Failed{Move: m, Reason: "move record checksum mismatch"},
		&Abort{Move: m, Reason: "operator abort"},
		&Relay{Move: m, Seq: 65537, Frame: []byte("\x00frame\xffbytes")},
		&Cutover{Move: m, Boundary: 12, Checksum: 0x01020304},
		&Committed{Move: m, OwnerGen: 1<<63 + 5, Paused: 1234567 * time.Nanosecond, Turnaround: 89 * time.Microsecond},
	}
}

func TestRecordCodecRoundTripsEveryRecordType(t *testing.T) {
	seen := map[reflect.Type]bool{}
	for _, r := range wireRecords() {
		seen[reflect.TypeOf(r)] = true
		enc := AppendRecord([]byte("prefix"), wireObj, r)
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatalf("%T: AppendRecord did not append to dst", r)
		}
		enc = enc[len("prefix"):]
		obj, got, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("%T: %v", r, err)
		}
		if obj != wireObj {
			t.Errorf("%T: object = %+v, want %+v", r, obj, wireObj)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%T: round trip = %+v, want %+v", r, got, r)
		}
		if again := AppendRecord(nil, obj, got); !bytes.Equal(again, enc) {
			t.Errorf("%T: re-encoding changed the bytes", r)
		}
	}
	if len(seen) != tagLimit-1 {
		t.Fatalf("wireRecords covers %d record types, the codec has %d tags", len(seen), tagLimit-1)
	}
}

func TestRecordCodecRoundTripsZeroValues(t *testing.T) {
	zeros := []Record{
		&Preflight{}, &PreflightReply{}, &Prepare{}, &Chunk{}, &RelayReady{},
		&Failed{}, &Abort{}, &Relay{}, &Cutover{}, &Committed{},
	}
	for _, r := range zeros {
		obj, got, err := DecodeRecord(AppendRecord(nil, Object{}, r))
		if err != nil || obj != (Object{}) || !reflect.DeepEqual(got, r) {
			t.Errorf("%T zero value: got %+v, %+v, %v", r, obj, got, err)
		}
	}
}

// The doc comment promises: an empty byte slice decodes as nil, whether it
// was nil or empty when encoded.
func TestRecordCodecDecodesEmptyBytesAsNil(t *testing.T) {
	for _, r := range []Record{
		&Chunk{Move: wireMove(1), Data: []byte{}},
		&Chunk{Move: wireMove(1)},
		&Relay{Move: wireMove(1), Frame: []byte{}},
		&Relay{Move: wireMove(1)},
	} {
		_, got, err := DecodeRecord(AppendRecord(nil, wireObj, r))
		if err != nil {
			t.Fatal(err)
		}
		switch g := got.(type) {
		case *Chunk:
			if g.Data != nil {
				t.Errorf("Chunk.Data = %#v, want nil", g.Data)
			}
		case *Relay:
			if g.Frame != nil {
				t.Errorf("Relay.Frame = %#v, want nil", g.Frame)
			}
		}
	}
}

func TestRecordCodecDecodedBytesDoNotAliasInput(t *testing.T) {
	for _, r := range []Record{
		&Chunk{Move: wireMove(1), Data: []byte("chunk-data")},
		&Relay{Move: wireMove(1), Frame: []byte("relay-frame")},
	} {
		enc := AppendRecord(nil, wireObj, r)
		obj, got, err := DecodeRecord(enc)
		if err != nil {
			t.Fatal(err)
		}
		for i := range enc {
			enc[i] = 0xAA // the caller reuses its buffer
		}
		if obj != wireObj || !reflect.DeepEqual(got, r) {
			t.Errorf("%T changed when the input buffer was overwritten: %+v", r, got)
		}
	}
}

func TestRecordCodecRejectsEveryTruncation(t *testing.T) {
	for _, r := range wireRecords() {
		enc := AppendRecord(nil, wireObj, r)
		for i := 0; i < len(enc); i++ {
			_, got, err := DecodeRecord(enc[:i])
			if !errors.Is(err, payload.ProtocolError) {
				t.Fatalf("%T truncated to %d of %d bytes: record %+v, error %v", r, i, len(enc), got, err)
			}
			if got != nil {
				t.Fatalf("%T truncated to %d bytes: a record came back with the error", r, i)
			}
		}
	}
}

func TestRecordCodecRejectsTrailingBytes(t *testing.T) {
	for _, r := range wireRecords() {
		enc := AppendRecord(nil, wireObj, r)
		_, _, err := DecodeRecord(append(enc, 0))
		wantProtocolError(t, err, "trailing bytes")
	}
}

func TestRecordCodecRejectsUnknownVersion(t *testing.T) {
	enc := AppendRecord(nil, wireObj, &RelayReady{Move: wireMove(1)})
	for _, v := range []byte{0, WireVersion + 1, 0xff} {
		enc[0] = v
		_, _, err := DecodeRecord(enc)
		wantProtocolError(t, err, "unknown version")
	}
}

func TestRecordCodecRejectsUnknownTag(t *testing.T) {
	enc := AppendRecord(nil, wireObj, &RelayReady{Move: wireMove(1)})
	for _, tag := range []byte{0, tagLimit, 0xff} {
		enc[1] = tag
		_, _, err := DecodeRecord(enc)
		wantProtocolError(t, err, "unknown record tag")
	}
}

func TestRecordCodecRejectsMalformedFields(t *testing.T) {
	// head is version, tag, object {"", ""} and a move id; the cases add
	// the record's fields by hand.
	head := func(tag byte) []byte {
		b := []byte{WireVersion, tag, 0, 0}
		m := wireMove(9)
		return append(b, m[:]...)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"bool byte 2", cat(head(tagPreflightReply), []byte{2, 0}), "bool byte 2"},
		{"length past the end", cat(head(tagFailed), []byte{5, 'a', 'b'}), "past the end"},
		{"absurd length", cat(head(tagChunk), make([]byte, 4), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), "past the end"},
		{"length overflowing 64 bits", cat(head(tagRelay), make([]byte, 4), bytes.Repeat([]byte{0xff}, 10), []byte{1}), "overflows"},
		{"non-minimal length", cat(head(tagAbort), []byte{0x81, 0x00, 'x'}), "not minimally encoded"},
		{"non-minimal zero length", []byte{WireVersion, tagRelayReady, 0x80, 0x00}, "not minimally encoded"},
		{"missing length", head(tagFailed), "missing length"},
		{"truncated move id", []byte{WireVersion, tagRelayReady, 0, 0, 1, 2, 3}, "truncated RelayReady.Move"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj, r, err := DecodeRecord(c.b)
			if r != nil || obj != (Object{}) {
				t.Errorf("returned %+v, %+v with the error", obj, r)
			}
			wantProtocolError(t, err, c.want)
		})
	}
}

func TestAppendRecordPanicsOnNilRecord(t *testing.T) {
	for _, r := range []Record{nil, (*Chunk)(nil), (*Committed)(nil)} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(p.(string), "relocation: ") {
					t.Errorf("AppendRecord(%#v): recovered %v, want a relocation panic", r, p)
				}
			}()
			AppendRecord(nil, wireObj, r)
		}()
	}
}

func TestAppendRecordDoesNotAllocate(t *testing.T) {
	recs := wireRecords()
	dst := make([]byte, 0, 4096)
	for _, r := range recs {
		allocs := testing.AllocsPerRun(100, func() {
			dst = AppendRecord(dst[:0], wireObj, r)
		})
		if allocs != 0 {
			t.Errorf("AppendRecord(%T) into a large-enough dst: %v allocations, want 0", r, allocs)
		}
	}
}

func wantProtocolError(t *testing.T, err error, detail string) {
	t.Helper()
	if !errors.Is(err, payload.ProtocolError) {
		t.Fatalf("error %v is not a ProtocolError", err)
	}
	if !strings.Contains(err.Error(), detail) {
		t.Fatalf("error %q does not say %q", err, detail)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range wireRecords() {
		f.Add(AppendRecord(nil, wireObj, r))
	}
	f.Add([]byte{})
	f.Add([]byte{WireVersion, tagChunk, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		obj, r, err := DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, payload.ProtocolError) {
				t.Fatalf("error of kind %v: %v", payload.KindOf(err), err)
			}
			if r != nil {
				t.Fatal("a record came back with the error")
			}
			return
		}
		// Every record has exactly one encoding, so re-encoding gives the
		// input back, and decoding that gives the same record.
		enc := AppendRecord(nil, obj, r)
		if !bytes.Equal(enc, b) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", b, enc)
		}
		obj2, r2, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if obj2 != obj || !reflect.DeepEqual(r2, r) {
			t.Fatalf("second decode = %+v %+v, first %+v %+v", obj2, r2, obj, r)
		}
	})
}

func TestDecodeRecordOwnedAliasesItsInputAndDecodesTheSame(t *testing.T) {
	obj := Object{Kind: "k", ID: "i"}
	for _, r := range []Record{&Chunk{Move: MoveID{1}, Index: 2, Data: []byte("state bytes")}, &Relay{Move: MoveID{1}, Seq: 3, Frame: []byte("frame")}, &Abort{Move: MoveID{1}, Reason: "x"}} {
		b := AppendRecord(nil, obj, r)
		o1, r1, err1 := DecodeRecord(b)
		o2, r2, err2 := DecodeRecordOwned(b)
		if err1 != nil || err2 != nil || o1 != o2 || !reflect.DeepEqual(r1, r2) {
			t.Fatalf("%T: owned decode differs: %v %v / %+v %+v", r, err1, err2, r1, r2)
		}
		var data []byte
		switch c := r2.(type) {
		case *Chunk:
			data = c.Data
		case *Relay:
			data = c.Frame
		}
		if data != nil {
			if &data[0] != &b[len(b)-len(data)] {
				t.Fatalf("%T: the owned decode copied its bytes", r)
			}
			if cap(data) != len(data) {
				t.Fatalf("%T: an aliased field may be appended into the input (cap %d > len %d)", r, cap(data), len(data))
			}
		}
	}
	if _, _, err := DecodeRecordOwned([]byte{WireVersion}); !errors.Is(err, payload.ProtocolError) {
		t.Fatalf("owned decode of a truncated record: %v", err)
	}
}

// Committed.Paused and Turnaround are durations: an encoding whose value
// does not fit one (above math.MaxInt64 nanoseconds) is malformed.
func TestCommittedWithANegativeDurationIsAProtocolError(t *testing.T) {
	for _, c := range []*Committed{{Move: MoveID{1}, OwnerGen: 2, Paused: -1}, {Move: MoveID{1}, OwnerGen: 2, Turnaround: -1}} {
		enc := AppendRecord(nil, wireObj, c)
		if _, _, err := DecodeRecord(enc); !errors.Is(err, payload.ProtocolError) {
			t.Fatalf("DecodeRecord of %+v: %v, want a ProtocolError", c, err)
		}
	}
	enc := AppendRecord(nil, wireObj, &Committed{Move: MoveID{1}, OwnerGen: 2, Paused: 5})
	if _, r, err := DecodeRecord(enc); err != nil || r.(*Committed).Paused != 5 {
		t.Fatalf("DecodeRecord of a pause of 5 ns: %v, %v", r, err)
	}
}
