package payload

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"iter"
	"strconv"
	"sync/atomic"
	"time"
)

// Header wire format, version 2. All integers are big-endian.
//
//	off len field
//	0   1   magic/version: 0xB2
//	1   2   header length H, including these three bytes
//	3   1   flags (opaque to this package)
//	4   1   hop count
//	5   1   scope: 0 none, 1 object, 2 channel
//	6   16  operation id (non-zero)
//	22  8   object generation
//	30  8   deadline, Unix nanoseconds; 0 means none; never negative
//	38  8   sender's stream epoch for the target; 0 means not stamped
//	46  8   sender's sequence number in that epoch; 0 means not stamped
//	54  1+n message type name        (n ≤ 255)
//	    1+n content type             (n ≤ 255)
//	    1+n target name: kind or channel (n ≤ 255)
//	    2+n target id                (n ≤ MaxTargetIDLen)
//	    1+n reply route              (n ≤ 255)
//	    1+n origin host              (n ≤ 255)
//	    2+n metadata                 (n ≤ MaxMetadataLen)
//
// Metadata is a sequence of entries: 1-byte key length (≥ 1), key, 2-byte
// value length, value; keys are unique. The header is followed directly by
// the payload, which runs to the end of the frame. The fixed-offset fields
// (flags, hops, generation, deadline, epoch, sequence) can be rewritten in
// place by a forwarder that owns the only reference. A frame of another
// version (0xB1 is version 1) does not decode.
const (
	headerMagic = 0xB2

	offFlags      = 3
	offHops       = 4
	offScope      = 5
	offOp         = 6
	offGeneration = 22
	offDeadline   = 30
	offEpoch      = 38
	offSeq        = 46
	fixedLen      = 54

	// minVarLen is the length of the variable part with every field empty:
	// the length bytes of type, content type, target name, target id, reply
	// route, origin and metadata.
	minVarLen = 1 + 1 + 1 + 2 + 1 + 1 + 2

	// MaxTargetIDLen is the longest object id a header can carry.
	MaxTargetIDLen = 1024
	// MaxMetadataLen is the largest encoded metadata block, in bytes.
	MaxMetadataLen = 1024
	// MaxHeaderLen bounds the encoded header.
	MaxHeaderLen = fixedLen + 5*(1+255) + (2 + MaxTargetIDLen) + (2 + MaxMetadataLen)
)

// Scope says what a message is addressed to.
type Scope uint8

// The scopes.
const (
	// ScopeNone: not addressed to an object or channel (a reply, say, which
	// travels by its reply route).
	ScopeNone Scope = iota
	// ScopeObject: addressed to object Target.ID of kind Target.Name.
	ScopeObject
	// ScopeChannel: addressed to channel Target.Name.
	ScopeChannel
)

// String returns "none", "object" or "channel".
func (s Scope) String() string {
	switch s {
	case ScopeNone:
		return "none"
	case ScopeObject:
		return "object"
	case ScopeChannel:
		return "channel"
	}
	return "scope(" + strconv.Itoa(int(s)) + ")"
}

// Target names the owner a message is addressed to.
type Target struct {
	Scope Scope
	Name  string // object kind, or channel name
	ID    string // object id; empty for channels and ScopeNone
}

// OpID is a 128-bit operation id. The zero OpID is invalid on the wire.
type OpID [16]byte

var (
	opPrefix  [8]byte
	opCounter atomic.Uint64
)

func init() {
	// A random per-process prefix plus a counter: unique across processes
	// with overwhelming probability, and no system call per message.
	if _, err := rand.Read(opPrefix[:]); err != nil {
		panic("payload: cannot read random bytes: " + err.Error())
	}
}

// NewOpID returns a fresh, non-zero operation id.
func NewOpID() OpID {
	var id OpID
	copy(id[:8], opPrefix[:])
	binary.BigEndian.PutUint64(id[8:], opCounter.Add(1))
	return id
}

// IsZero reports whether id is the zero OpID.
func (id OpID) IsZero() bool { return id == OpID{} }

// String returns the id in hexadecimal.
func (id OpID) String() string { return hex.EncodeToString(id[:]) }

// MetaEntry is one metadata key and value.
type MetaEntry struct {
	Key, Value string
}

// Header is an owned, editable message header, used to encode one. Decoding
// produces a HeaderView instead, which lends its bytes from the frame.
type Header struct {
	Type        string    // message type name, set by Encode when empty
	ContentType string    // canonical content type, set by Encode
	Target      Target    // who the message is for
	Op          OpID      // operation id; must not be zero
	ReplyTo     string    // opaque reply route; empty for one-way messages
	Deadline    time.Time // absolute deadline; zero for none
	Generation  uint64    // object generation the sender addressed
	Hops        uint8     // forwarding hops so far
	Flags       uint8     // opaque to this package
	Origin      string    // host that first sent the message; may be empty
	Epoch       uint64    // sender's stream epoch for the target object; 0 = not stamped
	Seq         uint64    // sender's sequence number for the target object; 0 = not stamped
	Meta        []MetaEntry
}

const opAppendHeader = "payload.AppendHeader"

// AppendHeader appends the encoded header h to dst and returns the extended
// slice. It returns an InvalidOperation error, and dst unchanged, when a
// field is out of bounds: zero Op, a string longer than its limit, a scope
// whose name or id are missing or present when they must not be, a negative
// deadline, duplicate or empty metadata keys, or metadata over MaxMetadataLen.
func AppendHeader(dst []byte, h *Header) ([]byte, error) {
	if err := checkHeader(h); err != nil {
		return dst, err
	}
	metaLen := 0
	for _, e := range h.Meta {
		metaLen += 1 + len(e.Key) + 2 + len(e.Value)
	}
	if metaLen > MaxMetadataLen {
		return dst, NewError(InvalidOperation, opAppendHeader, "metadata is larger than 1 KiB")
	}
	n := fixedLen + 1 + len(h.Type) + 1 + len(h.ContentType) + 1 + len(h.Target.Name) +
		2 + len(h.Target.ID) + 1 + len(h.ReplyTo) + 1 + len(h.Origin) + 2 + metaLen
	var deadline int64
	if !h.Deadline.IsZero() {
		deadline = h.Deadline.UnixNano()
		if deadline <= 0 {
			return dst, NewError(InvalidOperation, opAppendHeader, "deadline before 1970")
		}
	}
	start := len(dst)
	dst = grow(dst, n)
	b := dst[start : start+n]
	b[0] = headerMagic
	binary.BigEndian.PutUint16(b[1:], uint16(n))
	b[offFlags] = h.Flags
	b[offHops] = h.Hops
	b[offScope] = byte(h.Target.Scope)
	copy(b[offOp:], h.Op[:])
	binary.BigEndian.PutUint64(b[offGeneration:], h.Generation)
	binary.BigEndian.PutUint64(b[offDeadline:], uint64(deadline))
	binary.BigEndian.PutUint64(b[offEpoch:], h.Epoch)
	binary.BigEndian.PutUint64(b[offSeq:], h.Seq)
	i := fixedLen
	i = put8(b, i, h.Type)
	i = put8(b, i, h.ContentType)
	i = put8(b, i, h.Target.Name)
	i = put16(b, i, h.Target.ID)
	i = put8(b, i, h.ReplyTo)
	i = put8(b, i, h.Origin)
	binary.BigEndian.PutUint16(b[i:], uint16(metaLen))
	i += 2
	for _, e := range h.Meta {
		i = put8(b, i, e.Key)
		i = put16(b, i, e.Value)
	}
	return dst, nil
}

func checkHeader(h *Header) error {
	bad := func(detail string) error { return NewError(InvalidOperation, opAppendHeader, detail) }
	switch {
	case h.Op.IsZero():
		return bad("operation id is zero")
	case len(h.Type) > 255:
		return bad("message type name is longer than 255 bytes")
	case len(h.ContentType) > 255:
		return bad("content type is longer than 255 bytes")
	case len(h.Target.Name) > 255:
		return bad("target name is longer than 255 bytes")
	case len(h.Target.ID) > MaxTargetIDLen:
		return bad("target id is longer than 1024 bytes")
	case len(h.ReplyTo) > 255:
		return bad("reply route is longer than 255 bytes")
	case len(h.Origin) > 255:
		return bad("origin is longer than 255 bytes")
	}
	if msg := scopeProblem(h.Target.Scope, len(h.Target.Name), len(h.Target.ID)); msg != "" {
		return bad(msg)
	}
	for i, e := range h.Meta {
		if len(e.Key) == 0 || len(e.Key) > 255 {
			return bad("metadata key is empty or longer than 255 bytes")
		}
		if len(e.Value) > MaxMetadataLen {
			return bad("metadata value is larger than 1 KiB")
		}
		for _, f := range h.Meta[:i] {
			if f.Key == e.Key {
				return bad("duplicate metadata key " + strconv.Quote(e.Key))
			}
		}
	}
	return nil
}

func scopeProblem(s Scope, nameLen, idLen int) string {
	switch s {
	case ScopeNone:
		if nameLen != 0 || idLen != 0 {
			return "scope none with a target name or id"
		}
	case ScopeObject:
		if nameLen == 0 || idLen == 0 {
			return "object target without kind or id"
		}
	case ScopeChannel:
		if nameLen == 0 || idLen != 0 {
			return "channel target without a name, or with an id"
		}
	default:
		return "unknown scope " + strconv.Itoa(int(s))
	}
	return ""
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	return append(b, make([]byte, n)...)
}

func put8(b []byte, i int, s string) int {
	b[i] = byte(len(s))
	return i + 1 + copy(b[i+1:], s)
}

func put16(b []byte, i int, s string) int {
	binary.BigEndian.PutUint16(b[i:], uint16(len(s)))
	return i + 2 + copy(b[i+2:], s)
}

// span is an offset and length inside a header.
type span struct{ off, n uint16 }

// HeaderView is a decoded header. It reads the frame's bytes in place: the
// byte slices its methods return are lent from the frame and are valid until
// the frame's buffer is released; callers must not modify them. Use Header to
// get an owned copy.
type HeaderView struct {
	raw                                             []byte
	typ, contentType, targetName, targetID, replyTo span
	origin, meta                                    span
}

const opDecodeHeader = "payload.DecodeHeader"

func malformed(detail string) error {
	return NewError(ProtocolError, opDecodeHeader, detail)
}

// DecodeHeader decodes the header at the start of frame, without touching
// the payload after it, and returns the view and the header's length (the
// payload starts there). A malformed or truncated header returns a
// ProtocolError; DecodeHeader never panics and does not allocate for a valid
// header.
func DecodeHeader(frame []byte) (HeaderView, int, error) {
	var v HeaderView
	if len(frame) < fixedLen {
		return v, 0, malformed("frame shorter than the fixed header")
	}
	if frame[0] != headerMagic {
		return v, 0, malformed("unknown header version")
	}
	n := int(binary.BigEndian.Uint16(frame[1:]))
	if n < fixedLen+minVarLen || n > len(frame) {
		return v, 0, malformed("header length out of range")
	}
	b := frame[:n:n]
	if binary.BigEndian.Uint64(b[offDeadline:]) > 1<<63-1 {
		return v, 0, malformed("negative deadline")
	}
	if OpID(b[offOp:offGeneration]).IsZero() {
		return v, 0, malformed("zero operation id")
	}
	i := fixedLen
	var ok bool
	if v.typ, i, ok = get8(b, i); !ok {
		return v, 0, malformed("truncated message type")
	}
	if v.contentType, i, ok = get8(b, i); !ok {
		return v, 0, malformed("truncated content type")
	}
	if v.targetName, i, ok = get8(b, i); !ok {
		return v, 0, malformed("truncated target name")
	}
	if v.targetID, i, ok = get16(b, i); !ok || v.targetID.n > MaxTargetIDLen {
		return v, 0, malformed("truncated or oversized target id")
	}
	if v.replyTo, i, ok = get8(b, i); !ok {
		return v, 0, malformed("truncated reply route")
	}
	if v.origin, i, ok = get8(b, i); !ok {
		return v, 0, malformed("truncated origin")
	}
	if v.meta, i, ok = get16(b, i); !ok || v.meta.n > MaxMetadataLen {
		return v, 0, malformed("truncated or oversized metadata")
	}
	if i != n {
		return v, 0, malformed("header length does not match its fields")
	}
	if msg := scopeProblem(Scope(b[offScope]), int(v.targetName.n), int(v.targetID.n)); msg != "" {
		return v, 0, malformed(msg)
	}
	v.raw = b
	if err := v.checkMeta(); err != nil {
		return HeaderView{}, 0, err
	}
	return v, n, nil
}

func get8(b []byte, i int) (span, int, bool) {
	if i >= len(b) {
		return span{}, i, false
	}
	n := int(b[i])
	i++
	if n > len(b)-i {
		return span{}, i, false
	}
	return span{uint16(i), uint16(n)}, i + n, true
}

func get16(b []byte, i int) (span, int, bool) {
	if i+2 > len(b) {
		return span{}, i, false
	}
	n := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if n > len(b)-i {
		return span{}, i, false
	}
	return span{uint16(i), uint16(n)}, i + n, true
}

// checkMeta verifies the metadata block: well-formed entries, non-empty and
// unique keys.
func (v *HeaderView) checkMeta() error {
	m := v.bytes(v.meta)
	for i := 0; i < len(m); {
		k, j, ok := get8(m, i)
		if !ok || k.n == 0 {
			return malformed("malformed metadata key")
		}
		_, j, ok = get16(m, j)
		if !ok {
			return malformed("malformed metadata value")
		}
		key := m[k.off : k.off+k.n]
		for p := 0; p < i; {
			pk, q, _ := get8(m, p)
			if bytes.Equal(m[pk.off:pk.off+pk.n], key) {
				return malformed("duplicate metadata key")
			}
			_, p, _ = get16(m, q)
		}
		i = j
	}
	return nil
}

func (v *HeaderView) bytes(s span) []byte { return v.raw[s.off : s.off+s.n : s.off+s.n] }

// Len returns the encoded header's length: the payload starts at this offset
// of the frame.
func (v *HeaderView) Len() int { return len(v.raw) }

// Raw returns the encoded header bytes (lent, read-only).
func (v *HeaderView) Raw() []byte { return v.raw }

// Type returns the message type name (lent, read-only).
func (v *HeaderView) Type() []byte { return v.bytes(v.typ) }

// ContentType returns the content type exactly as carried (lent, read-only).
func (v *HeaderView) ContentType() []byte { return v.bytes(v.contentType) }

// Scope returns what the message is addressed to.
func (v *HeaderView) Scope() Scope { return Scope(v.raw[offScope]) }

// TargetName returns the object kind or channel name (lent, read-only).
func (v *HeaderView) TargetName() []byte { return v.bytes(v.targetName) }

// TargetID returns the object id (lent, read-only); empty for channels.
func (v *HeaderView) TargetID() []byte { return v.bytes(v.targetID) }

// Op returns the operation id.
func (v *HeaderView) Op() OpID { return OpID(v.raw[offOp:offGeneration]) }

// ReplyTo returns the reply route (lent, read-only); empty for one-way messages.
func (v *HeaderView) ReplyTo() []byte { return v.bytes(v.replyTo) }

// Origin returns the host that first sent the message (lent, read-only);
// empty when not set.
func (v *HeaderView) Origin() []byte { return v.bytes(v.origin) }

// Epoch returns the sender's stream epoch for the target object; 0 means
// not stamped.
func (v *HeaderView) Epoch() uint64 { return binary.BigEndian.Uint64(v.raw[offEpoch:]) }

// Seq returns the sender's sequence number for the target object; 0 means
// not stamped.
func (v *HeaderView) Seq() uint64 { return binary.BigEndian.Uint64(v.raw[offSeq:]) }

// DeadlineUnixNano returns the absolute deadline in Unix nanoseconds, or 0.
func (v *HeaderView) DeadlineUnixNano() int64 {
	return int64(binary.BigEndian.Uint64(v.raw[offDeadline:]))
}

// Deadline returns the absolute deadline and whether there is one.
func (v *HeaderView) Deadline() (time.Time, bool) {
	d := v.DeadlineUnixNano()
	if d == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, d), true
}

// Generation returns the object generation the sender addressed.
func (v *HeaderView) Generation() uint64 { return binary.BigEndian.Uint64(v.raw[offGeneration:]) }

// Hops returns the number of forwarding hops so far.
func (v *HeaderView) Hops() uint8 { return v.raw[offHops] }

// Flags returns the flags byte.
func (v *HeaderView) Flags() uint8 { return v.raw[offFlags] }

// Meta returns the value of metadata key and whether it is present. The
// value is lent and read-only.
func (v *HeaderView) Meta(key string) ([]byte, bool) {
	if v.raw == nil {
		return nil, false
	}
	m := v.bytes(v.meta)
	for i := 0; i < len(m); {
		k, val, next := metaEntry(m, i)
		if string(k) == key {
			return val, true
		}
		i = next
	}
	return nil, false
}

// MetaAll iterates over the metadata entries in order. Keys and values are
// lent and read-only.
func (v *HeaderView) MetaAll() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		if v.raw == nil {
			return
		}
		m := v.bytes(v.meta)
		for i := 0; i < len(m); {
			k, val, next := metaEntry(m, i)
			if !yield(k, val) {
				return
			}
			i = next
		}
	}
}

// metaEntry returns the entry at offset i of a validated metadata block and
// the offset of the next one.
func metaEntry(m []byte, i int) (key, val []byte, next int) {
	k, j, _ := get8(m, i)
	vs, next, _ := get16(m, j)
	return m[k.off : k.off+k.n : k.off+k.n], m[vs.off : vs.off+vs.n : vs.off+vs.n], next
}

// Header returns an owned copy of the header. It allocates.
func (v *HeaderView) Header() Header {
	h := Header{
		Type:        string(v.Type()),
		ContentType: string(v.ContentType()),
		Target:      Target{Scope: v.Scope(), Name: string(v.TargetName()), ID: string(v.TargetID())},
		Op:          v.Op(),
		ReplyTo:     string(v.ReplyTo()),
		Generation:  v.Generation(),
		Hops:        v.Hops(),
		Flags:       v.Flags(),
		Origin:      string(v.Origin()),
		Epoch:       v.Epoch(),
		Seq:         v.Seq(),
	}
	if d, ok := v.Deadline(); ok {
		h.Deadline = d
	}
	for k, val := range v.MetaAll() {
		h.Meta = append(h.Meta, MetaEntry{Key: string(k), Value: string(val)})
	}
	return h
}

// SetForward rewrites, in place, the hop count and the addressed generation
// of an encoded frame: what a forwarder changes when it hands a message on.
// The caller must hold the only reference to the frame. It returns a
// ProtocolError if frame does not start with a header.
func SetForward(frame []byte, hops uint8, generation uint64) error {
	if len(frame) < fixedLen || frame[0] != headerMagic {
		return malformed("not a frame")
	}
	frame[offHops] = hops
	binary.BigEndian.PutUint64(frame[offGeneration:], generation)
	return nil
}

// SetFlags rewrites, in place, the flags byte of an encoded frame; the
// caller must hold the only reference.
func SetFlags(frame []byte, flags uint8) error {
	if len(frame) < fixedLen || frame[0] != headerMagic {
		return malformed("not a frame")
	}
	frame[offFlags] = flags
	return nil
}

// SetStamp rewrites, in place, the stream epoch and sequence number of an
// encoded frame: what a sender changes when it stamps a message for its
// target. The caller must hold the only reference to the frame. It returns
// a ProtocolError if frame does not start with a header.
func SetStamp(frame []byte, epoch, seq uint64) error {
	if len(frame) < fixedLen || frame[0] != headerMagic {
		return malformed("not a frame")
	}
	binary.BigEndian.PutUint64(frame[offEpoch:], epoch)
	binary.BigEndian.PutUint64(frame[offSeq:], seq)
	return nil
}
