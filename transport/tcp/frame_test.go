package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

func header(b []byte) *[headerLen]byte {
	var h [headerLen]byte
	copy(h[:], b)
	return &h
}

func TestAFrameDecodesToWhatWasEncoded(t *testing.T) {
	e := Envelope{Op: opItem, Flags: flagLeaving, Kind: uint8(transport.Record), FromInc: 7, ToInc: 9, Seq: 3, Ack: 2, Taken: 1, Data: []byte("abc")}
	b := appendFrame(nil, &e)
	got, n, err := decodeHeader(header(b), 10)
	if err != nil || n != 3 {
		t.Fatalf("decodeHeader: %v, %d", err, n)
	}
	got.Data = b[headerLen:]
	if got.Op != e.Op || got.Flags != e.Flags || got.Kind != e.Kind || got.FromInc != 7 || got.ToInc != 9 || got.Seq != 3 ||
		got.Ack != 2 || got.Taken != 1 || string(got.Data) != "abc" {
		t.Fatalf("decoded %+v, want %+v", got, e)
	}
}

// Every field of a frame header is checked before anything is allocated:
// each malformed header below is refused with a ProtocolError (or
// CapacityExceeded for a length past the limit).
func TestAMalformedFrameHeaderIsRefusedBeforeAllocating(t *testing.T) {
	good := appendFrame(nil, &Envelope{Op: opItem, Kind: uint8(transport.Frame), Seq: 1, Data: []byte("x")})
	set := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	length := func(n uint32) []byte { b := bytes.Clone(good); binary.BigEndian.PutUint32(b, n); return b }
	for name, c := range map[string]struct {
		b    []byte
		kind payload.Kind
	}{
		"short length":      {length(headerLen - 5), payload.ProtocolError},
		"past the limit":    {length(headerLen - 4 + 11), payload.CapacityExceeded},
		"2^32-1 length":     {length(1<<32 - 1), payload.CapacityExceeded},
		"op 0":              {set(4, 0), payload.ProtocolError},
		"op 6":              {set(4, 6), payload.ProtocolError},
		"unknown flag":      {set(5, 4), payload.ProtocolError},
		"kind 0 on an item": {set(6, 0), payload.ProtocolError},
		"kind 7":            {set(6, 7), payload.ProtocolError},
		"reserved byte":     {set(7, 1), payload.ProtocolError},
		"kind on a hello":   {set(4, opHello), payload.ProtocolError},
		"item numbered 0":   {set(31, 0), payload.ProtocolError},
	} {
		_, _, err := decodeHeader(header(c.b), 10)
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", name, err, c.kind)
		}
	}
}

func TestAPreambleReadsBackAndBadOnesAreRefused(t *testing.T) {
	b := appendPreamble(nil, "n1", "n2")
	from, to, err := readPreamble(bufio.NewReader(bytes.NewReader(b)))
	if err != nil || from != "n1" || to != "n2" {
		t.Fatalf("readPreamble = %q %q %v", from, to, err)
	}
	for name, bad := range map[string][]byte{
		"bad magic":  append([]byte("berth/tcp/2\n"), b[len(preambleMagic):]...),
		"empty name": appendPreamble(nil, "", "n2"),
		"truncated":  b[:len(b)-1],
		"nothing":    nil,
	} {
		if _, _, err := readPreamble(bufio.NewReader(bytes.NewReader(bad))); err == nil {
			t.Errorf("%s: read", name)
		}
	}
}

// FuzzFrames feeds arbitrary bytes, as a peer's connection would carry
// them, through the frame decoder into a session: nothing panics, no
// item's data is allocated past the limit, and what the session hands to
// the handler is numbered 1, 2, 3, ... with no gap or repeat.
func FuzzFrames(f *testing.F) {
	var seed []byte
	for i := uint64(1); i <= 3; i++ {
		seed = appendFrame(seed, &Envelope{Op: opItem, Kind: uint8(transport.Frame), FromInc: 5, Seq: i, Data: []byte("hi")})
	}
	seed = appendFrame(seed, &Envelope{Op: opHello, FromInc: 5, Ack: 1, Flags: flagGap})
	seed = appendFrame(seed, &Envelope{Op: opBye, FromInc: 5, Seq: 4})
	f.Add(seed)
	f.Add(seed[:headerLen+1])
	f.Add(appendFrame(nil, &Envelope{Op: opCrash, FromInc: 9}))
	const maxData = 1 << 10
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := &sessionConfig{local: "a", inc: 1, ackEvery: 4, heartbeatTicks: 3, downTicks: 6, resendTicks: noResend, highItems: 8, highBytes: 1 << 20}
		s := newSession(cfg)
		var o output
		r := bufio.NewReader(bytes.NewReader(in))
		var h [headerLen]byte
		next := uint64(1)
		for {
			if _, err := readFullIO(r, h[:]); err != nil {
				return
			}
			e, n, err := decodeHeader(&h, maxData)
			switch {
			case errors.Is(err, payload.CapacityExceeded):
				if e.Op != opItem || n <= maxData {
					t.Fatalf("refused for its size: op %d, %d bytes", e.Op, n)
				}
				if _, err := r.Discard(n); err != nil {
					return
				}
				e.refused = true // as the reader does: skipped, never kept
			case err != nil:
				return // the connection closes
			case n > maxData:
				t.Fatalf("data length %d past the limit", n)
			case e.Op == opItem:
				if e.Data, err = readData(r, n); err != nil {
					return
				}
			}
			s.receive(&e, &o)
			for _, d := range o.deliver {
				if d.what == dItem {
					if d.refused && d.item.Data != nil {
						t.Fatal("a refused item carries data")
					}
					if d.seq != next {
						t.Fatalf("delivered item %d, want %d", d.seq, next)
					}
					next++
					s.takenThrough(d.epoch, d.seq, &o)
				}
				if d.what == dEvent && d.event == transport.Gone {
					next = 1 // a restart or a crash: a new session numbers from 1
				}
			}
			o.reset()
		}
	})
}

func readFullIO(r *bufio.Reader, b []byte) (int, error) {
	return len(b), readFull(r, b)
}

// FuzzPreamble: whatever a connection's first bytes are, reading them as
// a preamble never panics, reads at most the longest preamble, and what
// it accepts has two names of 1 to 255 bytes.
func FuzzPreamble(f *testing.F) {
	f.Add(appendPreamble(nil, "n1", "n2"))
	f.Add([]byte(preambleMagic))
	f.Add(append([]byte(preambleMagic), 255))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := &countingReader{r: bytes.NewReader(in)}
		from, to, err := readPreamble(bufio.NewReaderSize(r, 16))
		if err == nil && (len(from) == 0 || len(to) == 0 || len(from) > maxName || len(to) > maxName) {
			t.Fatalf("accepted names %q, %q", from, to)
		}
		if limit := len(preambleMagic) + 2 + 2*maxName + 16; r.n > limit {
			t.Fatalf("read %d bytes, past %d", r.n, limit)
		}
	})
}

type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// A peer's new incarnation ends the session with the old one and is
// counted; an older one is stale and changes nothing.
func TestAPeersRestartIsCounted(t *testing.T) {
	cfg := &sessionConfig{local: "a", inc: 1, ackEvery: 4, heartbeatTicks: 3, downTicks: 6, resendTicks: noResend, highItems: 8, highBytes: 1 << 20}
	s := newSession(cfg)
	var o output
	for _, inc := range []uint64{5, 5, 9, 7} {
		s.receive(&Envelope{Op: opHello, FromInc: inc}, &o)
		o.reset()
	}
	if s.stats.restarts != 1 || s.stats.stale != 1 || s.peerInc != 9 {
		t.Fatalf("restarts %d, stale %d, peer incarnation %d; want 1, 1, 9", s.stats.restarts, s.stats.stale, s.peerInc)
	}
}
