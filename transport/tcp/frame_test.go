package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
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
	hello := func(flags uint32) []byte { return appendFrame(nil, &Envelope{Op: opHello, Flags: flags}) }
	part := func(flags uint32, seq uint64, n ...int) []byte {
		return appendFrame(nil, &Envelope{Op: opPart, Flags: flags, Seq: seq, Data: make([]byte, append(n, 1)[0])})
	}
	for name, b := range map[string][]byte{"a part": part(flagMore, 1), "the last part": part(0, 1), "an item with more": set(5, flagMore)} {
		if _, _, err := decodeHeader(header(b), 10); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, c := range map[string]struct {
		b    []byte
		kind payload.Kind
	}{
		"short length":      {length(headerLen - 5), payload.ProtocolError},
		"past the limit":    {length(headerLen - 4 + 11), payload.CapacityExceeded},
		"2^32-1 length":     {length(1<<32 - 1), payload.CapacityExceeded},
		"op 0":              {set(4, 0), payload.ProtocolError},
		"op 7":              {set(4, 7), payload.ProtocolError},
		"unknown flag":      {set(5, 8), payload.ProtocolError},
		"more on a hello":   {hello(flagMore), payload.ProtocolError},
		"a kind on a part":  {set(4, opPart), payload.ProtocolError},
		"leaving on a part": {part(flagLeaving, 1), payload.ProtocolError},
		"part numbered 0":   {part(flagMore, 0), payload.ProtocolError},
		"part past limit":   {part(0, 1, 11), payload.CapacityExceeded},
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
		"bad magic":  append([]byte("berth/tcq/2\n"), b[len(preambleMagic):]...),
		"empty name": appendPreamble(nil, "", "n2"),
		"truncated":  b[:len(b)-1],
		"nothing":    nil,
	} {
		if _, _, err := readPreamble(bufio.NewReader(bytes.NewReader(bad))); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	// A peer of another wire version is told apart from a stranger.
	old := append([]byte("berth/tcp/1\n"), b[len(preambleMagic):]...)
	_, _, err = readPreamble(bufio.NewReader(bytes.NewReader(old)))
	if !errors.Is(err, payload.ProtocolError) || !strings.Contains(err.Error(), `wire version "berth/tcp/1"`) {
		t.Errorf("another version: %v, want a protocol error naming it", err)
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
	// An item in parts with a hello between them, then one past the
	// limit in parts, then a small one.
	var parted []byte
	parted = appendFrame(parted, &Envelope{Op: opItem, Flags: flagMore, Kind: uint8(transport.Frame), FromInc: 5, Seq: 1, Data: bytes.Repeat([]byte("a"), 600)})
	parted = appendFrame(parted, &Envelope{Op: opHello, FromInc: 5, Ack: 0})
	parted = appendFrame(parted, &Envelope{Op: opPart, FromInc: 5, Seq: 1, Data: []byte("bb")})
	parted = appendFrame(parted, &Envelope{Op: opItem, Flags: flagMore, Kind: uint8(transport.Frame), FromInc: 5, Seq: 2, Data: bytes.Repeat([]byte("c"), 600)})
	parted = appendFrame(parted, &Envelope{Op: opPart, FromInc: 5, Seq: 2, Data: bytes.Repeat([]byte("d"), 600)})
	parted = appendFrame(parted, &Envelope{Op: opItem, Kind: uint8(transport.Frame), FromInc: 5, Seq: 3, Data: []byte("e")})
	f.Add(parted)
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
		asm := assembler{maxData: maxData}
		for {
			if _, err := readFullIO(r, h[:]); err != nil {
				return
			}
			e, n, err := decodeHeader(&h, maxData)
			over := errors.Is(err, payload.CapacityExceeded)
			switch {
			case over && (e.Op != opItem && e.Op != opPart || n <= maxData):
				t.Fatalf("refused for its size: op %d, %d bytes", e.Op, n)
			case err != nil && !over:
				return // the connection closes
			case n > maxData && !over:
				t.Fatalf("data length %d past the limit", n)
			}
			e, ok, err := asm.next(r, e, n, over) // as the reader does
			switch {
			case err != nil:
				return // the connection closes
			case !ok:
				continue
			case e.Op == opPart || e.Flags&flagMore != 0:
				t.Fatalf("a part handed on as a frame: op %d, flags %d", e.Op, e.Flags)
			case len(e.Data) > maxData:
				t.Fatalf("an item of %d bytes put together, past the limit", len(e.Data))
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

// feed runs the frames of in through decodeHeader and an assembler, as
// the reader does, and returns what it hands to the session, and the
// error that closed the connection (nil: the bytes ran out).
func feed(in []byte, maxData int) (out []Envelope, err error) {
	r := bufio.NewReader(bytes.NewReader(in))
	asm := assembler{maxData: maxData}
	var h [headerLen]byte
	for {
		if _, err := readFullIO(r, h[:]); err != nil {
			return out, nil
		}
		e, n, err := decodeHeader(&h, maxData)
		over := errors.Is(err, payload.CapacityExceeded)
		if err != nil && !over {
			return out, err
		}
		e, ok, err := asm.next(r, e, n, over)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, e)
		}
	}
}

// TestAnItemInPartsIsHandedOnWholeAfterTheHellosBetweenThem: the frame
// format's parts. The writer's queue splits an item past partSize into an
// item frame and parts; the reader hands on the hellos between them as
// they come and the item whole once its last part came; parts past the
// limit in all refuse the item (its turn taken, no data); and a frame out
// of place between parts, or a part of no item or of another, closes the
// connection.
func TestAnItemInPartsIsHandedOnWholeAfterTheHellosBetweenThem(t *testing.T) {
	big := make([]byte, 2*partSize+5)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var w writeQueue
	w.push(&Envelope{Op: opItem, Kind: uint8(transport.Frame), FromInc: 5, Seq: 1, Data: big})
	w.push(&Envelope{Op: opItem, Kind: uint8(transport.Frame), FromInc: 5, Seq: 2, Data: []byte("small")})
	if len(w.parts) != 2 {
		t.Fatalf("%d parts after the item's first frame, want 2", len(w.parts))
	}
	var wire bytes.Buffer
	hellos := 0
	conn := &bufConn{w: &wire}
	if err := writeBatch(conn, &w, func(b []byte) []byte {
		hellos++
		return appendFrame(b, &Envelope{Op: opHello, FromInc: 5, Ack: uint64(hellos)})
	}); err != nil {
		t.Fatal(err)
	}
	out, err := feed(wire.Bytes(), 4*partSize)
	if err != nil {
		t.Fatal(err)
	}
	var ops []uint32
	for _, e := range out {
		ops = append(ops, e.Op)
	}
	if want := []uint32{opHello, opHello, opItem, opItem}; !slices.Equal(ops, want) {
		t.Fatalf("handed on ops %v, want %v (the hellos as they came, then the items)", ops, want)
	}
	if it := out[2]; it.Seq != 1 || it.Flags&flagMore != 0 || !bytes.Equal(it.Data, big) || it.refused {
		t.Fatalf("item 1: seq %d, flags %d, %d bytes (equal %v), refused %v", it.Seq, it.Flags, len(it.Data), bytes.Equal(it.Data, big), it.refused)
	}
	if it := out[3]; it.Seq != 2 || string(it.Data) != "small" {
		t.Fatalf("item 2: seq %d, %q", it.Seq, it.Data)
	}

	// Past the limit in all (each part under it): refused, its turn taken.
	out, err = feed(wire.Bytes(), partSize+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || !out[2].refused || out[2].Data != nil || out[2].Seq != 1 || out[3].refused {
		t.Fatalf("past the limit in all: %d handed on, item 1 refused %v with %d bytes", len(out), len(out) > 2 && out[2].refused, len(out[2].Data))
	}

	item := func(seq uint64, more bool) []byte {
		e := Envelope{Op: opItem, Kind: uint8(transport.Frame), FromInc: 5, Seq: seq, Data: []byte("x")}
		if more {
			e.Flags = flagMore
		}
		return appendFrame(nil, &e)
	}
	part := func(seq, inc uint64) []byte {
		return appendFrame(nil, &Envelope{Op: opPart, FromInc: inc, Seq: seq, Data: []byte("y")})
	}
	for name, in := range map[string][]byte{
		"an item between parts":    slices.Concat(item(1, true), item(2, false)),
		"a bye between parts":      slices.Concat(item(1, true), appendFrame(nil, &Envelope{Op: opBye, FromInc: 5, Seq: 2})),
		"a part of no item":        part(1, 5),
		"a part after its last":    slices.Concat(item(1, true), part(1, 5), part(1, 5)),
		"a part of another item":   slices.Concat(item(1, true), part(2, 5)),
		"a part of another run":    slices.Concat(item(1, true), part(1, 6)),
		"a part after a whole one": slices.Concat(item(1, false), part(1, 5)),
	} {
		if _, err := feed(in, 1<<10); !errors.Is(err, errFrame) {
			t.Errorf("%s: %v, want the connection closed for a frame out of place", name, err)
		}
	}
}

// bufConn is a net.Conn that writes into a buffer.
type bufConn struct {
	net.Conn
	w *bytes.Buffer
}

func (c *bufConn) Write(b []byte) (int, error) { return c.w.Write(b) }
