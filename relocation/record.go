package relocation

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strconv"
	"time"

	"github.com/berthrt/berth/payload"
)

// MoveID identifies one move; the source makes it (a fresh operation id).
type MoveID = payload.OpID

// Object names the object being moved.
type Object struct {
	Kind, ID string
}

// String returns "kind/id".
func (o Object) String() string { return o.Kind + "/" + o.ID }

// Record is a protocol record between source and target. Records travel on
// the same ordered link as ordinary traffic between the two hosts.
type Record interface {
	// MoveID returns the move the record belongs to.
	MoveID() MoveID
	record()
}

// Preflight asks the target whether it can take the object: whether it
// hosts the kind, at a compatible application version.
type Preflight struct {
	Move       MoveID
	Object     Object
	AppVersion string
}

// PreflightReply answers a Preflight.
type PreflightReply struct {
	Move   MoveID
	OK     bool
	Reason string // why not, when !OK
}

// Prepare announces the move record: the object, the generations the source
// read, and the shape of the record that follows in chunks.
type Prepare struct {
	Move       MoveID
	Object     Object
	Source     string // the source host
	Owner      Ownership
	TotalLen   uint32 // bytes of the move record
	ChunkCount uint32
	CRC        uint32 // CRC-32C (Castagnoli) over the whole record
}

// Chunk is one piece of the move record.
type Chunk struct {
	Move  MoveID
	Index uint32
	Data  []byte
}

// RelayReady is the target's reply: it has the move record, restored the
// state and installed its temporary queue. Once the source accepts it the
// move can no longer be aborted.
type RelayReady struct{ Move MoveID }

// Failed is the target's explicit failure before relay-ready (restore
// failed, checksum mismatch, duplicate-but-different assembly): the source
// aborts and reopens.
type Failed struct {
	Move   MoveID
	Reason string
}

// Abort is the source's explicit abort before relay-ready: the target
// discards its temporary queue unrun.
type Abort struct {
	Move   MoveID
	Reason string
}

// Relay carries one message held at the source after the seal, in order.
type Relay struct {
	Move  MoveID
	Seq   uint32 // 0-based position in the pre-boundary batch
	Frame []byte
}

// Cutover ends the pre-boundary batch: Boundary relays were sent, and
// Checksum is the CRC-32C over their frames in order.
type Cutover struct {
	Move     MoveID
	Boundary uint32
	Checksum uint32
}

// Committed tells the source that the target owns the object in the
// Location Store; the source may forget the move (keeping only its forward
// route).
//
// Paused and Turnaround are measurements, not protocol, by the target's
// own clock (zero: not measured): Paused from the arrival of the Prepare
// to the opening of the object, Turnaround from the arrival of the Cutover
// to the sending of this record. The machines leave them zero; the
// target's PauseClock fills them in on a copy as it is sent
// (PauseClock.Sent), and the source's works out the pause from them and
// its own times (see actor.Host.Pauses), so that no clock is compared
// between hosts.
type Committed struct {
	Move       MoveID
	OwnerGen   uint64
	Paused     time.Duration
	Turnaround time.Duration
}

func (r *Preflight) MoveID() MoveID      { return r.Move }
func (r *PreflightReply) MoveID() MoveID { return r.Move }
func (r *Prepare) MoveID() MoveID        { return r.Move }
func (r *Chunk) MoveID() MoveID          { return r.Move }
func (r *RelayReady) MoveID() MoveID     { return r.Move }
func (r *Failed) MoveID() MoveID         { return r.Move }
func (r *Abort) MoveID() MoveID          { return r.Move }
func (r *Relay) MoveID() MoveID          { return r.Move }
func (r *Cutover) MoveID() MoveID        { return r.Move }
func (r *Committed) MoveID() MoveID      { return r.Move }

func (*Preflight) record()      {}
func (*PreflightReply) record() {}
func (*Prepare) record()        {}
func (*Chunk) record()          {}
func (*RelayReady) record()     {}
func (*Failed) record()         {}
func (*Abort) record()          {}
func (*Relay) record()          {}
func (*Cutover) record()        {}
func (*Committed) record()      {}

// castagnoli is the CRC-32C table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// MoveRecord is the captured object: its state (through the kind's
// relocation policy; empty when the state is rebuilt by the factory) and
// its accepted-but-unexecuted queue, in order, as encoded frames (each
// keeping its operation id, reply route and deadline in its header). It is
// built only after the seal took effect.
type MoveRecord struct {
	State []byte
	Queue [][]byte
	// Extra is the driver's own data about the object (opaque here),
	// restored with it; for berth's hosts, the object's receive order (route.Snapshot).
	Extra []byte
}

// MaxMoveRecord is the largest move record a move can carry: its
// lengths are 32-bit.
const MaxMoveRecord = math.MaxUint32

// EncodedLen returns the length of the record's encoding; a record longer
// than MaxMoveRecord cannot move (the source refuses to capture it).
func (m *MoveRecord) EncodedLen() int {
	n := 8 + len(m.State)
	for _, f := range m.Queue {
		n += 4 + len(f)
	}
	if len(m.Extra) > 0 {
		n += 4 + len(m.Extra)
	}
	return n
}

// Encode appends the record's encoding to dst: the state length and bytes,
// the number of queued frames, then each frame's length and bytes, then —
// only if Extra is not empty — its length and bytes (all lengths
// big-endian uint32).
func (m *MoveRecord) Encode(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.State)))
	dst = append(dst, m.State...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Queue)))
	for _, f := range m.Queue {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(f)))
		dst = append(dst, f...)
	}
	if len(m.Extra) > 0 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Extra)))
		dst = append(dst, m.Extra...)
	}
	return dst
}

// DecodeMoveRecord decodes a move record. The state and frames it returns
// alias b. A malformed record is a ProtocolError.
func DecodeMoveRecord(b []byte) (MoveRecord, error) {
	const op = "relocation.DecodeMoveRecord"
	var m MoveRecord
	take := func() ([]byte, bool) {
		if len(b) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, false
		}
		out := b[4 : 4+n : 4+n]
		b = b[4+n:]
		return out, true
	}
	var ok bool
	if m.State, ok = take(); !ok {
		return MoveRecord{}, payload.NewError(payload.ProtocolError, op, "truncated state")
	}
	if len(b) < 4 {
		return MoveRecord{}, payload.NewError(payload.ProtocolError, op, "truncated queue count")
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b))/4 {
		return MoveRecord{}, payload.NewError(payload.ProtocolError, op, "queue count larger than the record")
	}
	m.Queue = make([][]byte, 0, n)
	for i := uint32(0); i < n; i++ {
		f, ok := take()
		if !ok {
			return MoveRecord{}, payload.NewError(payload.ProtocolError, op, "truncated frame "+strconv.Itoa(int(i)))
		}
		m.Queue = append(m.Queue, f)
	}
	if len(b) != 0 {
		extra, ok := take()
		if !ok || len(extra) == 0 || len(b) != 0 {
			return MoveRecord{}, payload.NewError(payload.ProtocolError, op, "malformed extra section after the queue")
		}
		m.Extra = extra
	}
	return m, nil
}

// DefaultChunkSize is the move record chunk size: 256 KiB.
const DefaultChunkSize = 256 << 10

// split cuts b into chunks of at most size bytes (at least one chunk, even
// for an empty record).
func split(b []byte, size int) [][]byte {
	if len(b) == 0 {
		return [][]byte{{}}
	}
	var out [][]byte
	for len(b) > 0 {
		n := min(size, len(b))
		out = append(out, b[:n:n])
		b = b[n:]
	}
	return out
}
