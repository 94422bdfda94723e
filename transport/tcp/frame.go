package tcp

import (
	"encoding/binary"
	"io"
	"strconv"
	"strings"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// Envelope is one unit of the session protocol on the wire: an item of the
// link, or acknowledgements and flags only (hello, bye, crash, flush and
// their answers). It carries no sender name: the sender is the peer the
// connection was authenticated as.
type Envelope struct {
	Op      uint32 // opItem, opBye, ...
	Flags   uint32 // flagLeaving, flagGap
	Kind    uint8  // of an item: its transport.Kind
	FromInc uint64 // the sender's incarnation
	ToInc   uint64 // the incarnation of this host the sender knows (0: none yet)
	Seq     uint64 // of an item, a part or a bye: its number (a part's: its item's)
	Ack     uint64 // the sender received, in order, through
	Taken   uint64 // the sender's handler took through
	Data    []byte // of an item (or a part)

	refused bool // an item past this host's limit: its data was skipped, not read
}

// The frame of an envelope: a 4-byte big-endian length of what follows,
// then a fixed header, then the item's data.
//
//	length  u32   headerLen - 4 + len(data)
//	op      u8    1..6
//	flags   u8    flagLeaving | flagGap | flagMore
//	kind    u8    an item's transport.Kind (1..6); 0 for the other ops
//	zero    u8    0
//	fromInc u64
//	toInc   u64
//	seq     u64
//	ack     u64
//	taken   u64
//	data    the rest (items and parts only)
//
// An item whose data is larger than partSize goes in parts: an item frame
// with flagMore and the first partSize bytes, then part frames (opPart,
// the item's number, no kind) of the rest in order, each but the last
// with flagMore. Between two parts only hellos may come (the writer puts
// one there: session.between); anything else, or a part with no item
// open or of another number, closes the connection. The receiver hands
// the item on whole once its last part came.
const (
	headerLen = 4 + 4 + 5*8
	// bigData is the size from which an item's data is written from where
	// it lies, not copied into the write buffer.
	bigData = 16 << 10
	// partSize is the most data one frame carries: a larger item goes in
	// parts, with a hello between each two. At 10 Mbit/s a part takes a
	// tenth of a second, well within DefaultDownAfter.
	partSize = 128 << 10
)

// assembler puts together, for one connection, the items that come in
// parts. The parts of an item are bounded as they arrive: past maxData in
// all, the item is refused (its remaining data read and dropped), as an
// item past the limit in one frame is.
type assembler struct {
	maxData int
	item    Envelope // the item whose parts are coming, while open
	open    bool
}

// next takes the frame whose header decoded to e, with n bytes of data
// next on r (over: past the limit, to be read and dropped). It returns
// the envelope to hand to the session — the frame itself, or a whole
// item once its last part came — or ok false while an item's parts are
// still coming. An error of kind errFrame is a frame out of place (the
// connection closes); any other is the connection's.
func (a *assembler) next(r io.Reader, e Envelope, n int, over bool) (out Envelope, ok bool, err error) {
	switch {
	case a.open && e.Op != opPart && e.Op != opHello:
		return e, false, frameError("op " + strconv.Itoa(int(e.Op)) + " between the parts of an item")
	case e.Op == opPart && !a.open:
		return e, false, frameError("a part of no item")
	case e.Op == opPart && (e.Seq != a.item.Seq || e.FromInc != a.item.FromInc):
		return e, false, frameError("a part of another item")
	case e.Op != opItem && e.Op != opPart:
		return e, true, nil
	}
	it := &e
	if e.Op == opPart {
		it = &a.item
		over = over || it.refused || len(it.Data)+n > a.maxData
	}
	if over {
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return e, false, err
		}
		it.refused, it.Data = true, nil
	} else if it.Data, err = appendData(r, it.Data, n, a.maxData); err != nil {
		return e, false, err
	}
	if e.Flags&flagMore != 0 {
		if e.Op == opItem {
			a.item, a.open = e, true
			a.item.Flags &^= flagMore
		}
		return e, false, nil
	}
	if e.Op == opItem {
		return e, true, nil
	}
	out, a.item, a.open = a.item, Envelope{}, false
	return out, true, nil
}

// appendData reads n bytes of data onto b. Its buffer grows as the bytes
// arrive, doubling (so an item in parts is copied about once), never past
// limit nor to more than twice what arrived or a megabyte: a length alone
// allocates at most a megabyte more.
func appendData(r io.Reader, b []byte, n, limit int) ([]byte, error) {
	const step = 1 << 20
	end := len(b) + n
	if b == nil && n <= step {
		b = make([]byte, 0, n)
	}
	for len(b) < end {
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(max(2*cap(b), step), max(limit, end)))
			copy(grown, b)
			b = grown
		}
		m := min(end, cap(b))
		k, err := io.ReadFull(r, b[len(b):m])
		b = b[:len(b)+k]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// appendHeader appends the frame header of e (its data not included).
func appendHeader(b []byte, e *Envelope) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(headerLen-4+len(e.Data)))
	b = append(b, byte(e.Op), byte(e.Flags), e.Kind, 0)
	b = binary.BigEndian.AppendUint64(b, e.FromInc)
	b = binary.BigEndian.AppendUint64(b, e.ToInc)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, e.Ack)
	return binary.BigEndian.AppendUint64(b, e.Taken)
}

// appendFrame appends the whole frame of e.
func appendFrame(b []byte, e *Envelope) []byte {
	return append(appendHeader(b, e), e.Data...)
}

// ErrFrame is the kind of error a malformed frame from a peer gets: the
// connection it came on is closed (the peer's session sends again on a new
// one).
var errFrame = payload.ProtocolError

func frameError(detail string) error {
	return payload.NewError(errFrame, "tcp.frame", detail)
}

// decodeHeader decodes a frame header into e (Data not set) and returns
// the length of the data that follows, after checking every field: a
// known op, known flags, a kind only on items and a valid one there, the
// zero byte, no data but on an item, and a data length of at most maxData
// — past it, the error is of kind CapacityExceeded and e is whole (the
// item is refused, its data skipped). Nothing is allocated.
func decodeHeader(h *[headerLen]byte, maxData int) (e Envelope, dataLen int, err error) {
	n := binary.BigEndian.Uint32(h[0:4])
	if n < headerLen-4 {
		return e, 0, frameError("length " + strconv.FormatUint(uint64(n), 10) + " shorter than the header")
	}
	dataLen = int(n) - (headerLen - 4)
	e.Op, e.Flags, e.Kind = uint32(h[4]), uint32(h[5]), h[6]
	switch {
	case e.Op < opItem || e.Op > opPart:
		return e, 0, frameError("unknown op " + strconv.Itoa(int(e.Op)))
	case e.Flags&^(flagLeaving|flagGap|flagMore) != 0:
		return e, 0, frameError("unknown flags " + strconv.Itoa(int(e.Flags)))
	case e.Flags&flagMore != 0 && e.Op != opItem && e.Op != opPart:
		return e, 0, frameError("more data announced on a frame that is neither an item nor a part")
	case e.Op == opPart && e.Flags&^flagMore != 0:
		return e, 0, frameError("flags other than more on a part")
	case h[7] != 0:
		return e, 0, frameError("reserved byte set")
	case e.Op == opItem && (e.Kind < uint8(transport.Frame) || e.Kind > uint8(transport.Reply)):
		return e, 0, frameError("unknown item kind " + strconv.Itoa(int(e.Kind)))
	case e.Op == opPart && e.Kind != 0:
		return e, 0, frameError("a kind on a part")
	case e.Op != opItem && e.Op != opPart && (e.Kind != 0 || dataLen != 0):
		return e, 0, frameError("a kind or data on a frame that is neither an item nor a part")
	}
	e.FromInc = binary.BigEndian.Uint64(h[8:16])
	e.ToInc = binary.BigEndian.Uint64(h[16:24])
	e.Seq = binary.BigEndian.Uint64(h[24:32])
	e.Ack = binary.BigEndian.Uint64(h[32:40])
	e.Taken = binary.BigEndian.Uint64(h[40:48])
	if (e.Op == opItem || e.Op == opBye || e.Op == opPart) && e.Seq == 0 {
		return e, 0, frameError("an item numbered 0")
	}
	if dataLen > maxData {
		// A well-formed item past the limit: the caller skips its data
		// (reading it without keeping it) and refuses the item.
		return e, dataLen, payload.NewError(payload.CapacityExceeded, "tcp.frame",
			"data of "+strconv.Itoa(dataLen)+" bytes exceeds the limit of "+strconv.Itoa(maxData))
	}
	return e, dataLen, nil
}

// The connection preamble: the dialer's first bytes, once TLS is up.
//
//	magic   "berth/tcp/2\n"
//	from    u8 length, then the dialer's member name
//	to      u8 length, then the member name the dialer means to reach
//
// The listener checks that to is its own name and, with TLS, that the
// dialer's certificate names from; without TLS (Options.Insecure) from is
// taken as it stands.
//
// The magic names the wire's version: a host refuses a connection of
// another (every host of a cluster runs the same one), saying which.
const preambleMagic = "berth/tcp/2\n"

// preambleFamily is what every version's magic begins with.
const preambleFamily = "berth/tcp/"

// maxName is the longest member name the preamble carries.
const maxName = 255

// appendPreamble appends the preamble of a connection from from to to.
func appendPreamble(b []byte, from, to string) []byte {
	b = append(b, preambleMagic...)
	b = append(b, byte(len(from)))
	b = append(b, from...)
	b = append(b, byte(len(to)))
	return append(b, to...)
}

// byteReader is what readPreamble reads from.
type byteReader interface {
	ReadByte() (byte, error)
	Read(p []byte) (int, error)
}

// readPreamble reads a connection preamble: at most
// len(preambleMagic)+2+2*maxName bytes, whatever the peer sends.
func readPreamble(r byteReader) (from, to string, err error) {
	var magic [len(preambleMagic)]byte
	if err := readFull(r, magic[:]); err != nil {
		return "", "", err
	}
	if m := string(magic[:]); m != preambleMagic {
		if strings.HasPrefix(m, preambleFamily) {
			return "", "", frameError("a peer speaking wire version " + strconv.Quote(strings.TrimSuffix(m, "\n")) +
				"; this host speaks " + strconv.Quote(strings.TrimSuffix(preambleMagic, "\n")) + " (every host of a cluster runs the same version)")
		}
		return "", "", frameError("not a berth connection (bad preamble)")
	}
	name := func() (string, error) {
		n, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		if n == 0 {
			return "", frameError("an empty name in the preamble")
		}
		b := make([]byte, n)
		if err := readFull(r, b); err != nil {
			return "", err
		}
		return string(b), nil
	}
	if from, err = name(); err != nil {
		return "", "", err
	}
	if to, err = name(); err != nil {
		return "", "", err
	}
	return from, to, nil
}

func readFull(r byteReader, b []byte) error {
	for len(b) > 0 {
		n, err := r.Read(b)
		b = b[n:]
		if err != nil && len(b) > 0 {
			return err
		}
	}
	return nil
}

// The listener's answer to a preamble it accepts: a byte, then the
// largest item it takes (u32, big-endian), so that the dialer refuses a
// larger Send at once rather than have every connection closed on it.
const (
	acceptByte = 'k'
	acceptLen  = 5
)

// appendAccept appends the answer of a listener taking items of up to
// maxItem bytes.
func appendAccept(b []byte, maxItem int) []byte {
	return binary.BigEndian.AppendUint32(append(b, acceptByte), uint32(maxItem))
}

// readAccept decodes a listener's answer: the largest item it takes.
func readAccept(a *[acceptLen]byte) (int, error) {
	if a[0] != acceptByte {
		return 0, frameError("not an answer to the preamble")
	}
	n := binary.BigEndian.Uint32(a[1:])
	if n == 0 {
		return 0, frameError("a peer that takes no item")
	}
	return int(min(uint64(n), 1<<31-headerLen)), nil
}
