package relocation

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/berthrt/berth/internal/wire"
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
// byte, 0 or 1; uint32 and uint64 are fixed-width big-endian (a
// time.Duration is a uint64 of nanoseconds, at most math.MaxInt64); an embedded
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
			return wire.AppendString(dst, r.AppVersion)
		}
	case *PreflightReply:
		if r != nil {
			dst = appendHead(dst, tagPreflightReply, obj, r.Move)
			dst = wire.AppendBool(dst, r.OK)
			return wire.AppendString(dst, r.Reason)
		}
	case *Prepare:
		if r != nil {
			dst = appendHead(dst, tagPrepare, obj, r.Move)
			dst = appendObject(dst, r.Object)
			dst = wire.AppendString(dst, r.Source)
			dst = wire.AppendString(dst, r.Owner.Host)
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
			return wire.AppendBytes(dst, r.Data)
		}
	case *RelayReady:
		if r != nil {
			return appendHead(dst, tagRelayReady, obj, r.Move)
		}
	case *Failed:
		if r != nil {
			dst = appendHead(dst, tagFailed, obj, r.Move)
			return wire.AppendString(dst, r.Reason)
		}
	case *Abort:
		if r != nil {
			dst = appendHead(dst, tagAbort, obj, r.Move)
			return wire.AppendString(dst, r.Reason)
		}
	case *Relay:
		if r != nil {
			dst = appendHead(dst, tagRelay, obj, r.Move)
			dst = binary.BigEndian.AppendUint32(dst, r.Seq)
			return wire.AppendBytes(dst, r.Frame)
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
			dst = binary.BigEndian.AppendUint64(dst, r.OwnerGen)
			dst = binary.BigEndian.AppendUint64(dst, uint64(r.Paused))
			return binary.BigEndian.AppendUint64(dst, uint64(r.Turnaround))
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
	dst = wire.AppendString(dst, o.Kind)
	return wire.AppendString(dst, o.ID)
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
	d := &wire.Reader{B: b[2:], Op: opDecodeRecord, What: tagNames[tag], Alias: owned}
	obj := Object{Kind: d.String("object.Kind"), ID: d.String("object.ID")}
	var move MoveID
	copy(move[:], d.Take("Move", len(move)))
	var r Record
	switch tag {
	case tagPreflight:
		r = &Preflight{Move: move, Object: Object{Kind: d.String("Object.Kind"), ID: d.String("Object.ID")}, AppVersion: d.String("AppVersion")}
	case tagPreflightReply:
		r = &PreflightReply{Move: move, OK: d.Bool("OK"), Reason: d.String("Reason")}
	case tagPrepare:
		p := &Prepare{Move: move, Object: Object{Kind: d.String("Object.Kind"), ID: d.String("Object.ID")}, Source: d.String("Source")}
		p.Owner.Host = d.String("Owner.Host")
		p.Owner.LeaseGen = d.Uint64("Owner.LeaseGen")
		p.Owner.ObjectGen = d.Uint64("Owner.ObjectGen")
		p.Owner.OwnerGen = d.Uint64("Owner.OwnerGen")
		p.Owner.Version = d.Uint64("Owner.Version")
		p.TotalLen = d.Uint32("TotalLen")
		p.ChunkCount = d.Uint32("ChunkCount")
		p.CRC = d.Uint32("CRC")
		r = p
	case tagChunk:
		r = &Chunk{Move: move, Index: d.Uint32("Index"), Data: d.Bytes("Data")}
	case tagRelayReady:
		r = &RelayReady{Move: move}
	case tagFailed:
		r = &Failed{Move: move, Reason: d.String("Reason")}
	case tagAbort:
		r = &Abort{Move: move, Reason: d.String("Reason")}
	case tagRelay:
		r = &Relay{Move: move, Seq: d.Uint32("Seq"), Frame: d.Bytes("Frame")}
	case tagCutover:
		r = &Cutover{Move: move, Boundary: d.Uint32("Boundary"), Checksum: d.Uint32("Checksum")}
	case tagCommitted:
		c := &Committed{Move: move, OwnerGen: d.Uint64("OwnerGen"),
			Paused: time.Duration(d.Uint64("Paused")), Turnaround: time.Duration(d.Uint64("Turnaround"))}
		if c.Paused < 0 || c.Turnaround < 0 {
			return Object{}, nil, payload.NewError(payload.ProtocolError, opDecodeRecord, "a duration of Committed is negative")
		}
		r = c
	}
	if err := d.End(); err != nil {
		return Object{}, nil, err
	}
	return obj, r, nil
}
