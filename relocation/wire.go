package relocation

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/berthrt/berth/payload"
)

// WireVersion is the version byte that starts every encoded record
// (AppendRecord, DecodeRecord). A decoder rejects any other version.
const WireVersion = 1

// Record tags: the second byte of an encoded record names its type. Zero is
// never a tag.
const (
	tagPreflight      = 1
	tagPreflightReply = 2
	tagPrepare        = 3
	tagChunk          = 4
	tagRelayReady     = 5
	tagFailed         = 6
	tagAbort          = 7
	tagRelay          = 8
	tagCutover        = 9
	tagCommitted      = 10
	tagLimit          = 11 // one past the last tag
)

var tagNames = [tagLimit]string{
	tagPreflight:      "Preflight",
	tagPreflightReply: "PreflightReply",
	tagPrepare:        "Prepare",
	tagChunk:          "Chunk",
	tagRelayReady:     "RelayReady",
	tagFailed:         "Failed",
	tagAbort:          "Abort",
	tagRelay:          "Relay",
	tagCutover:        "Cutover",
	tagCommitted:      "Committed",
}

const opDecodeRecord = "relocation.DecodeRecord"

// AppendRecord appends the encoding of r, together with obj (the object the
// record is about, which the link carries alongside it), to dst and returns
// the extended slice. It allocates nothing beyond growing dst.
//
// The format is: the version byte (WireVersion), a one-byte tag naming the
// record type, obj's Kind and ID as strings, the 16-byte move id, then the
// record's own fields in declaration order. A string or byte slice is a
// uvarint length (minimal encoding) followed by its bytes; a bool is one
// byte, 0 or 1; uint32 and uint64 are fixed-width big-endian; an embedded
// Object is its Kind and ID, and an Ownership is its Host then its four
// generations as uint64. The tags are 1 Preflight, 2 PreflightReply,
// 3 Prepare, 4 Chunk, 5 RelayReady, 6 Failed, 7 Abort, 8 Relay, 9 Cutover,
// 10 Committed. Each record has exactly one encoding.
//
// A nil record (or a nil pointer of a record type) is a programming error:
// AppendRecord panics, as it does for a record type that has no tag.
func AppendRecord(dst []byte, obj Object, r Record) []byte {
	switch r := r.(type) {
	case *Preflight:
		if r != nil {
			dst = appendHead(dst, tagPreflight, obj, r.Move)
			dst = appendObject(dst, r.Object)
			return appendString(dst, r.AppVersion)
		}
	case *PreflightReply:
		if r != nil {
			dst = appendHead(dst, tagPreflightReply, obj, r.Move)
			dst = appendBool(dst, r.OK)
			return appendString(dst, r.Reason)
		}
	case *Prepare:
		if r != nil {
			dst = appendHead(dst, tagPrepare, obj, r.Move)
			dst = appendObject(dst, r.Object)
			dst = appendString(dst, r.Source)
			dst = appendString(dst, r.Owner.Host)
			dst = binary.BigEndian.AppendUint64(dst, r.Owner.LeaseGen)
			dst = binary.BigEndian.AppendUint64(dst, r.Owner.ObjectGen)
			dst = binary.BigEndian.AppendUint64(dst, r.Owner.OwnerGen)
			dst = binary.BigEndian.AppendUint64(dst, r.Owner.Version)
			dst = binary.BigEndian.AppendUint32(dst, r.TotalLen)
			dst = binary.BigEndian.AppendUint32(dst, r.ChunkCount)
			return binary.BigEndian.AppendUint32(dst, r.CRC)
		}
	case *Chunk:
		if r != nil {
			dst = appendHead(dst, tagChunk, obj, r.Move)
			dst = binary.BigEndian.AppendUint32(dst, r.Index)
			return appendBytes(dst, r.Data)
		}
	case *RelayReady:
		if r != nil {
			return appendHead(dst, tagRelayReady, obj, r.Move)
		}
	case *Failed:
		if r != nil {
			dst = appendHead(dst, tagFailed, obj, r.Move)
			return appendString(dst, r.Reason)
		}
	case *Abort:
		if r != nil {
			dst = appendHead(dst, tagAbort, obj, r.Move)
			return appendString(dst, r.Reason)
		}
	case *Relay:
		if r != nil {
			dst = appendHead(dst, tagRelay, obj, r.Move)
			dst = binary.BigEndian.AppendUint32(dst, r.Seq)
			return appendBytes(dst, r.Frame)
		}
	case *Cutover:
		if r != nil {
			dst = appendHead(dst, tagCutover, obj, r.Move)
			dst = binary.BigEndian.AppendUint32(dst, r.Boundary)
			return binary.BigEndian.AppendUint32(dst, r.Checksum)
		}
	case *Committed:
		if r != nil {
			dst = appendHead(dst, tagCommitted, obj, r.Move)
			return binary.BigEndian.AppendUint64(dst, r.OwnerGen)
		}
	}
	// A record type added without a tag lands here too.
	panic(fmt.Sprintf("relocation: AppendRecord of a nil record or one with no wire tag: %T", r))
}

func appendHead(dst []byte, tag byte, obj Object, move MoveID) []byte {
	dst = append(dst, WireVersion, tag)
	dst = appendObject(dst, obj)
	return append(dst, move[:]...)
}

func appendObject(dst []byte, o Object) []byte {
	dst = appendString(dst, o.Kind)
	return appendString(dst, o.ID)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// DecodeRecord decodes a record encoded by AppendRecord and the object it
// is about. Malformed input — truncated, an unknown version or tag, a
// length past the end or a non-minimal length, a bool other than 0 or 1,
// trailing bytes — is an error of kind payload.ProtocolError that names the
// record type and field. DecodeRecord never allocates more than in
// proportion to len(b).
//
// The strings and byte slices it returns are copies: they do not alias b,
// which the caller may reuse at once. An empty byte slice (Chunk.Data,
// Relay.Frame) decodes as nil whether it was nil or empty when encoded; the
// protocol does not tell the two apart (the target copies both into a
// fresh, non-nil slice).
func DecodeRecord(b []byte) (Object, Record, error) { return decodeRecord(b, false) }

// DecodeRecordOwned is DecodeRecord for a caller that hands b over: the
// byte slices of the record (Chunk.Data, Relay.Frame) alias b instead of
// being copied, so b must not be changed or reused afterwards. A receiver
// that owns the bytes it got from a transport uses it to save a copy of
// every chunk of state.
func DecodeRecordOwned(b []byte) (Object, Record, error) { return decodeRecord(b, true) }

func decodeRecord(b []byte, owned bool) (Object, Record, error) {
	if len(b) < 2 {
		return Object{}, nil, payload.NewError(payload.ProtocolError, opDecodeRecord,
			"truncated: "+strconv.Itoa(len(b))+" bytes, need at least the version and tag")
	}
	if b[0] != WireVersion {
		return Object{}, nil, payload.NewError(payload.ProtocolError, opDecodeRecord,
			"unknown version "+strconv.Itoa(int(b[0]))+" (want "+strconv.Itoa(WireVersion)+")")
	}
	tag := b[1]
	if tag == 0 || tag >= tagLimit {
		return Object{}, nil, payload.NewError(payload.ProtocolError, opDecodeRecord,
			"unknown record tag "+strconv.Itoa(int(tag)))
	}
	d := decoder{b: b[2:], rec: tagNames[tag], alias: owned}
	obj := Object{Kind: d.string("object.Kind"), ID: d.string("object.ID")}
	move := d.moveID()
	var r Record
	switch tag {
	case tagPreflight:
		r = &Preflight{Move: move, Object: Object{Kind: d.string("Object.Kind"), ID: d.string("Object.ID")}, AppVersion: d.string("AppVersion")}
	case tagPreflightReply:
		r = &PreflightReply{Move: move, OK: d.bool("OK"), Reason: d.string("Reason")}
	case tagPrepare:
		p := &Prepare{Move: move, Object: Object{Kind: d.string("Object.Kind"), ID: d.string("Object.ID")}, Source: d.string("Source")}
		p.Owner.Host = d.string("Owner.Host")
		p.Owner.LeaseGen = d.uint64("Owner.LeaseGen")
		p.Owner.ObjectGen = d.uint64("Owner.ObjectGen")
		p.Owner.OwnerGen = d.uint64("Owner.OwnerGen")
		p.Owner.Version = d.uint64("Owner.Version")
		p.TotalLen = d.uint32("TotalLen")
		p.ChunkCount = d.uint32("ChunkCount")
		p.CRC = d.uint32("CRC")
		r = p
	case tagChunk:
		r = &Chunk{Move: move, Index: d.uint32("Index"), Data: d.bytes("Data")}
	case tagRelayReady:
		r = &RelayReady{Move: move}
	case tagFailed:
		r = &Failed{Move: move, Reason: d.string("Reason")}
	case tagAbort:
		r = &Abort{Move: move, Reason: d.string("Reason")}
	case tagRelay:
		r = &Relay{Move: move, Seq: d.uint32("Seq"), Frame: d.bytes("Frame")}
	case tagCutover:
		r = &Cutover{Move: move, Boundary: d.uint32("Boundary"), Checksum: d.uint32("Checksum")}
	case tagCommitted:
		r = &Committed{Move: move, OwnerGen: d.uint64("OwnerGen")}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(strconv.Itoa(len(d.b)) + " trailing bytes after " + d.rec)
	}
	if d.err != nil {
		return Object{}, nil, d.err
	}
	return obj, r, nil
}

// decoder reads fields from b. The first failure sticks in err; later reads
// return zero values and allocate nothing.
type decoder struct {
	b     []byte
	rec   string // the record type's name, for error details
	err   error
	alias bool // byte fields alias b (DecodeRecordOwned)
}

func (d *decoder) fail(detail string) {
	if d.err == nil {
		d.err = payload.NewError(payload.ProtocolError, opDecodeRecord, detail)
	}
}

// take returns the next n bytes (aliasing d.b), or fails naming field.
func (d *decoder) take(field string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("truncated " + d.rec + "." + field + ": need " + strconv.Itoa(n) +
			" bytes, " + strconv.Itoa(len(d.b)) + " left")
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) moveID() MoveID {
	var id MoveID
	copy(id[:], d.take("Move", len(id)))
	return id
}

func (d *decoder) uint32(field string) uint32 {
	if p := d.take(field, 4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) uint64(field string) uint64 {
	if p := d.take(field, 8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) bool(field string) bool {
	p := d.take(field, 1)
	if p == nil {
		return false
	}
	switch p[0] {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("invalid " + d.rec + "." + field + ": bool byte " + strconv.Itoa(int(p[0])) + " (want 0 or 1)")
	return false
}

// field returns a length-prefixed field, aliasing d.b. The length is
// checked against the remaining input before anything uses it, so a
// forged length never causes a large allocation.
func (d *decoder) field(field string) []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	switch {
	case k == 0:
		d.fail("truncated " + d.rec + "." + field + ": missing length")
		return nil
	case k < 0:
		d.fail("invalid " + d.rec + "." + field + ": length varint overflows 64 bits")
		return nil
	case k != uvarintLen(n):
		d.fail("invalid " + d.rec + "." + field + ": length varint is not minimally encoded")
		return nil
	}
	d.b = d.b[k:]
	if n > uint64(len(d.b)) {
		d.fail("invalid " + d.rec + "." + field + ": length " + strconv.FormatUint(n, 10) +
			" past the end (" + strconv.Itoa(len(d.b)) + " bytes left)")
		return nil
	}
	return d.take(field, int(n))
}

func (d *decoder) string(field string) string {
	return string(d.field(field))
}

// bytes returns a length-prefixed field, a copy unless d.alias; nil when
// it is empty.
func (d *decoder) bytes(field string) []byte {
	p := d.field(field)
	switch {
	case len(p) == 0:
		return nil
	case d.alias:
		return p[:len(p):len(p)] // no append can reach past it into b
	}
	return append([]byte(nil), p...)
}

// uvarintLen is the length of the minimal uvarint encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
