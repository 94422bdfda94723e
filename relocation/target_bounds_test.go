package relocation

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// A Prepare's declared lengths allocate nothing: an 85-byte Prepare
// declaring 2^24 chunks (a peer's bytes) used to allocate 384 MiB for
// them. The target keeps what arrives, never what is declared.
func TestAPreparesDeclaredCountsAllocateNothingUntilTheBytesArrive(t *testing.T) {
	tgt := NewTarget(TargetConfig{Host: "B"})
	p := &Prepare{Move: testMove, Object: testObj, Source: "A", Owner: testOwner, TotalLen: 1 << 24, ChunkCount: 1 << 24, CRC: 1}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := tgt.Step(Receive{Record: p})
	runtime.ReadMemStats(&after)
	if tgt.Phase() != "assembling" || len(out.Effects) == 0 {
		t.Fatalf("after the Prepare: phase %s, effects %v; want assembling, the temporary queue registered", tgt.Phase(), out.Effects)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Fatalf("a Prepare declaring %d chunks of a %d-byte record allocated %d bytes; want no more than a few KiB", p.ChunkCount, p.TotalLen, n)
	}
}

// targetFootprint is what a target keeps of what peers sent it: the
// assembled chunks and their ends, and the relays.
func targetFootprint(t *Target) int {
	n := cap(t.asm) + 8*cap(t.ends) + 24*cap(t.relays)
	for _, r := range t.relays {
		n += cap(r)
	}
	return n
}

// FuzzTargetRecords feeds a target machine what a peer can send it: the
// input is a series of records (each a 2-byte length and a record's
// encoding, as DecodeRecord reads it; ones that do not decode are
// skipped, as a host drops them) and driver inputs (a length of 0 then a
// byte: restored, restore failed, tick, store result). Nothing panics,
// and what the target keeps stays within a budget proportional to the
// bytes it was given — never what a record declares.
func FuzzTargetRecords(f *testing.F) {
	m := MoveRecord{State: []byte("the object's state"), Queue: [][]byte{[]byte("frame one")}}
	rec := m.Encode(nil)
	parts := split(rec, 8)
	seed := func(rs ...Record) []byte {
		var b []byte
		for _, r := range rs {
			enc := AppendRecord(nil, testObj, r)
			b = binary.BigEndian.AppendUint16(b, uint16(len(enc)))
			b = append(b, enc...)
		}
		return b
	}
	prep := &Prepare{Move: testMove, Object: testObj, Source: "A", Owner: testOwner, TotalLen: uint32(len(rec)), ChunkCount: uint32(len(parts)), CRC: Checksum(rec)}
	normal := []Record{prep}
	for i, p := range parts {
		normal = append(normal, &Chunk{Move: testMove, Index: uint32(i), Data: p})
	}
	f.Add(append(seed(normal...), 0, 0, 0)) // ... then restored
	f.Add(append(append(seed(normal...), 0, 0, 0), seed(&Relay{Move: testMove, Frame: []byte("r")}, &Cutover{Move: testMove, Boundary: 1})...))
	f.Add(seed(&Prepare{Move: testMove, Object: testObj, Source: "A", Owner: testOwner, TotalLen: 1 << 30, ChunkCount: 1 << 30, CRC: 1},
		&Chunk{Move: testMove, Index: 0, Data: []byte("x")}, &Chunk{Move: testMove, Index: 7, Data: []byte("y")}))
	f.Add(seed(&Prepare{Move: testMove, Object: testObj, Source: "A", Owner: testOwner, TotalLen: 1<<32 - 1, ChunkCount: 1<<32 - 1, CRC: 1}))
	f.Add(seed(&Prepare{Move: testMove, Object: testObj, Source: "A", Owner: testOwner, TotalLen: 1 << 20, ChunkCount: 1 << 20, CRC: 1},
		&Chunk{Move: testMove, Index: 0, Data: []byte("x")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		tgt := NewTarget(TargetConfig{Host: "B", MaxRecord: 1 << 20})
		given := 0
		var now int64
		for len(b) >= 2 {
			n := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			var in Input
			if n == 0 {
				if len(b) == 0 {
					return
				}
				switch c := b[0]; c % 4 {
				case 0:
					in = Restored{}
				case 1:
					in = Restored{Err: errTestRestore}
				case 2:
					now += int64(c) * 1e7
					in = Tick{Now: now, SourceReachable: c&4 != 0}
				default:
					in = StoreResult{Row: Row{Ownership: testOwner, State: Active}}
				}
				b = b[1:]
			} else {
				if n > len(b) {
					return
				}
				given += n
				_, r, err := DecodeRecord(b[:n])
				b = b[n:]
				if err != nil {
					continue
				}
				in = Receive{Record: r}
			}
			tgt.Step(in)
			if kept := targetFootprint(tgt); kept > 4*given+4096 {
				t.Fatalf("the target keeps %d bytes after being given %d", kept, given)
			}
		}
	})
}

var errTestRestore = errors.New("restore failed")
