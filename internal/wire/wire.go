// Package wire holds the primitives of berth's byte encodings between
// hosts (relocation records, route hints, control items): append helpers
// and a Reader. Strings and byte slices are a uvarint length in its
// minimal form followed by the bytes; bools one byte, 0 or 1; integers
// fixed-width big-endian.
//
// Invariants of Reader: the first malformed field sticks as a
// ProtocolError (payload) naming the field, and every later read returns
// a zero value; a length is checked against the remaining input before
// anything is allocated; nothing it returns aliases its input unless
// Alias is set.
package wire

import (
	"encoding/binary"
	"strconv"

	"github.com/berthrt/berth/payload"
)

// AppendString appends s, length-prefixed.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendBytes appends b, length-prefixed.
func AppendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendBool appends v as one byte, 0 or 1.
func AppendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Reader reads the fields of one encoded item.
type Reader struct {
	// B is the input not read yet.
	B []byte
	// Op names the operation in errors (payload.Error.Op).
	Op string
	// What names the item in errors: a field f is "What.f".
	What string
	// Alias makes Bytes return slices of B instead of copies (the caller
	// hands its input over).
	Alias bool
	err   error
}

// Err returns the first problem, or nil.
func (r *Reader) Err() error { return r.err }

// Fail records detail as the reader's error (the first one sticks) and
// stops every later read.
func (r *Reader) Fail(detail string) {
	if r.err == nil {
		r.err = payload.NewError(payload.ProtocolError, r.Op, detail)
	}
	r.B = nil
}

func (r *Reader) name(field string) string { return r.What + "." + field }

// Take returns the next n bytes (aliasing B, capacity n), or fails.
func (r *Reader) Take(field string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.B) < n {
		r.Fail("truncated " + r.name(field) + ": need " + strconv.Itoa(n) + " bytes, " + strconv.Itoa(len(r.B)) + " left")
		return nil
	}
	out := r.B[:n:n]
	r.B = r.B[n:]
	return out
}

// Byte reads one byte.
func (r *Reader) Byte(field string) byte {
	if p := r.Take(field, 1); p != nil {
		return p[0]
	}
	return 0
}

// Uint32 reads a big-endian uint32.
func (r *Reader) Uint32(field string) uint32 {
	if p := r.Take(field, 4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

// Uint64 reads a big-endian uint64.
func (r *Reader) Uint64(field string) uint64 {
	if p := r.Take(field, 8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// Bool reads a byte that must be 0 or 1.
func (r *Reader) Bool(field string) bool {
	switch b := r.Byte(field); {
	case r.err != nil || b == 0:
		return false
	case b == 1:
		return true
	default:
		r.Fail("invalid " + r.name(field) + ": bool byte " + strconv.Itoa(int(b)) + " (want 0 or 1)")
		return false
	}
}

// Uvarint reads a uvarint in its minimal form.
func (r *Reader) Uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.B)
	switch {
	case k == 0:
		r.Fail("truncated " + r.name(field) + ": missing length")
		return 0
	case k < 0:
		r.Fail("invalid " + r.name(field) + ": length varint overflows 64 bits")
		return 0
	case k != uvarintLen(v):
		r.Fail("invalid " + r.name(field) + ": length varint is not minimally encoded")
		return 0
	}
	r.B = r.B[k:]
	return v
}

// Field reads a length-prefixed field, aliasing B.
func (r *Reader) Field(field string) []byte {
	n := r.Uvarint(field)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.B)) {
		r.Fail("invalid " + r.name(field) + ": length " + strconv.FormatUint(n, 10) +
			" past the end (" + strconv.Itoa(len(r.B)) + " bytes left)")
		return nil
	}
	return r.Take(field, int(n))
}

// String reads a length-prefixed string (a copy).
func (r *Reader) String(field string) string { return string(r.Field(field)) }

// Bytes reads a length-prefixed byte slice: a copy, or with Alias a slice
// of B whose capacity ends with it; nil when it is empty.
func (r *Reader) Bytes(field string) []byte {
	p := r.Field(field)
	switch {
	case len(p) == 0:
		return nil
	case r.Alias:
		return p
	}
	return append([]byte(nil), p...)
}

// End returns the first problem, or an error for bytes left after the
// item.
func (r *Reader) End() error {
	if r.err == nil && len(r.B) > 0 {
		r.Fail(strconv.Itoa(len(r.B)) + " trailing bytes after " + r.What)
	}
	return r.err
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
