package tcp

import (
	"encoding/binary"
	"strconv"

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
	Seq     uint64 // of an item or bye: its number
	Ack     uint64 // the sender received, in order, through
	Taken   uint64 // the sender's handler took through
	Data    []byte // of an item

	refused bool // an item past this host's limit: its data was skipped, not read
}

// The frame of an envelope: a 4-byte big-endian length of what follows,
// then a fixed header, then the item's data.
//
//	length  u32   headerLen - 4 + len(data)
//	op      u8    1..5
//	flags   u8    flagLeaving | flagGap
//	kind    u8    an item's transport.Kind (1..6); 0 for the other ops
//	zero    u8    0
//	fromInc u64
//	toInc   u64
//	seq     u64
//	ack     u64
//	taken   u64
//	data    the rest (items only)
const (
	headerLen = 4 + 4 + 5*8
	// bigData is the size from which an item's data is written from where
	// it lies, not copied into the write buffer.
	bigData = 16 << 10
)

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
	case e.Op < opItem || e.Op > opByeAck:
		return e, 0, frameError("unknown op " + strconv.Itoa(int(e.Op)))
	case e.Flags&^(flagLeaving|flagGap) != 0:
		return e, 0, frameError("unknown flags " + strconv.Itoa(int(e.Flags)))
	case h[7] != 0:
		return e, 0, frameError("reserved byte set")
	case e.Op == opItem && (e.Kind < uint8(transport.Frame) || e.Kind > uint8(transport.Reply)):
		return e, 0, frameError("unknown item kind " + strconv.Itoa(int(e.Kind)))
	case e.Op != opItem && (e.Kind != 0 || dataLen != 0):
		return e, 0, frameError("a kind or data on a frame that is not an item")
	}
	e.FromInc = binary.BigEndian.Uint64(h[8:16])
	e.ToInc = binary.BigEndian.Uint64(h[16:24])
	e.Seq = binary.BigEndian.Uint64(h[24:32])
	e.Ack = binary.BigEndian.Uint64(h[32:40])
	e.Taken = binary.BigEndian.Uint64(h[40:48])
	if (e.Op == opItem || e.Op == opBye) && e.Seq == 0 {
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
//	magic   "berth/tcp/1\n"
//	from    u8 length, then the dialer's member name
//	to      u8 length, then the member name the dialer means to reach
//
// The listener checks that to is its own name and, with TLS, that the
// dialer's certificate names from; without TLS (Options.Insecure) from is
// taken as it stands.
const preambleMagic = "berth/tcp/1\n"

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
	if string(magic[:]) != preambleMagic {
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
