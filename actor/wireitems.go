package actor

import (
	"encoding/binary"
	"strconv"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Byte encodings of the link items that are neither frames (package
// payload) nor relocation records (relocation.AppendRecord): route hints
// and the control items of Relocate across hosts (remotemove.go), so that
// a transport carries them as bytes. Each starts with a version byte;
// strings are a uvarint length and the bytes, integers fixed-width
// big-endian. Decoding copies what it keeps and returns ProtocolError for
// any malformed input, naming what is wrong.

const wireItemsVersion = 1

// Control item tags.
const (
	ctlRelocateRequest byte = iota + 1
	ctlRelocateAnswer
	ctlRelocateCancel
)

// maxWireCodes bounds the sentinel codes of an error answer.
const maxWireCodes = 64

// appendHint encodes a route hint: obj runs on hint.host with owner
// generation hint.gen.
func appendHint(dst []byte, obj relocation.Object, hint routeHint) []byte {
	dst = append(dst, wireItemsVersion)
	dst = appendWireString(dst, obj.Kind)
	dst = appendWireString(dst, obj.ID)
	dst = appendWireString(dst, hint.host)
	return binary.BigEndian.AppendUint64(dst, hint.gen)
}

// decodeHint decodes a route hint (appendHint).
func decodeHint(b []byte) (relocation.Object, routeHint, error) {
	r := wireReader{b: b, what: "route hint"}
	r.version()
	obj := relocation.Object{Kind: r.string("object kind"), ID: r.string("object id")}
	hint := routeHint{host: r.string("host")}
	hint.gen = r.uint64("generation")
	return obj, hint, r.end()
}

// appendControl encodes a relocate request, answer or cancel; it panics on
// any other value (a bug in the caller).
func appendControl(dst []byte, ctl any) []byte {
	dst = append(dst, wireItemsVersion)
	switch c := ctl.(type) {
	case *relocateRequest:
		dst = append(dst, ctlRelocateRequest)
		dst = append(dst, c.op[:]...)
		dst = appendWireString(dst, c.ref.Kind)
		dst = appendWireString(dst, c.ref.ID)
		dst = appendWireString(dst, c.target)
		return binary.BigEndian.AppendUint64(dst, uint64(c.deadline))
	case *relocateAnswer:
		dst = append(dst, ctlRelocateAnswer)
		dst = append(dst, c.op[:]...)
		if c.err == nil {
			return append(dst, 0)
		}
		dst = append(dst, 1, byte(c.err.Kind))
		dst = appendWireString(dst, c.err.Msg)
		dst = binary.AppendUvarint(dst, uint64(len(c.err.Codes)))
		for _, code := range c.err.Codes {
			dst = appendWireString(dst, code)
		}
		return dst
	case *relocateCancel:
		dst = append(dst, ctlRelocateCancel)
		return append(dst, c.op[:]...)
	}
	panic("actor: appendControl of an unknown control item")
}

// decodeControl decodes a control item (appendControl).
func decodeControl(b []byte) (any, error) {
	r := wireReader{b: b, what: "control item"}
	r.version()
	tag := r.byte("tag")
	var op payload.OpID
	copy(op[:], r.take("operation id", len(op)))
	var ctl any
	switch tag {
	case ctlRelocateRequest:
		c := &relocateRequest{op: op}
		c.ref = Ref{Kind: r.string("kind"), ID: r.string("id")}
		c.target = r.string("target")
		c.deadline = int64(r.uint64("deadline"))
		ctl = c
	case ctlRelocateAnswer:
		c := &relocateAnswer{op: op}
		switch r.byte("error flag") {
		case 0:
		case 1:
			he := &HandlerError{Kind: payload.Kind(r.byte("error kind"))}
			he.Msg = r.string("error text")
			n := r.uvarint("error codes")
			if n > maxWireCodes {
				r.fail("more than " + strconv.Itoa(maxWireCodes) + " error codes")
			}
			for i := uint64(0); i < n && r.err == nil; i++ {
				he.Codes = append(he.Codes, r.string("error code"))
			}
			c.err = he
		default:
			r.fail("error flag is neither 0 nor 1")
		}
		ctl = c
	case ctlRelocateCancel:
		ctl = &relocateCancel{op: op}
	default:
		r.fail("unknown tag " + strconv.Itoa(int(tag)))
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return ctl, nil
}

func appendWireString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// wireReader reads a wire item; the first problem sticks in err and
// every later read returns zero values.
type wireReader struct {
	b    []byte
	what string
	err  error
}

func (r *wireReader) fail(detail string) {
	if r.err == nil {
		r.err = payload.NewError(payload.ProtocolError, "actor", "malformed "+r.what+": "+detail)
	}
	r.b = nil
}

func (r *wireReader) take(field string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail(field + " truncated")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *wireReader) version() {
	if v := r.byte("version"); r.err == nil && v != wireItemsVersion {
		r.fail("unknown version " + strconv.Itoa(int(v)))
	}
}

func (r *wireReader) byte(field string) byte {
	if b := r.take(field, 1); b != nil {
		return b[0]
	}
	return 0
}

func (r *wireReader) uint64(field string) uint64 {
	if b := r.take(field, 8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *wireReader) uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(field + ": bad length")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// string reads a length-prefixed string (a copy: strings do not alias).
func (r *wireReader) string(field string) string {
	n := r.uvarint(field)
	if n > uint64(len(r.b)) {
		r.fail(field + ": length " + strconv.FormatUint(n, 10) + " past the end")
		return ""
	}
	return string(r.take(field, int(n)))
}

// end reports the first problem, or trailing bytes.
func (r *wireReader) end() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail(strconv.Itoa(len(r.b)) + " trailing bytes")
	}
	return r.err
}
