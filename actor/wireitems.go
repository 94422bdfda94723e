package actor

import (
	"encoding/binary"
	"strconv"

	"github.com/berthrt/berth/internal/wire"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Byte encodings of the link items that are neither frames (package
// payload) nor relocation records (relocation.AppendRecord): route hints
// and the control items of Relocate across hosts (remotemove.go) and of
// load reports (peers.go), so that
// a transport carries them as bytes. Each starts with a version byte;
// strings are a uvarint length and the bytes, integers fixed-width
// big-endian (package internal/wire). Decoding copies what it keeps and
// returns ProtocolError for any malformed input, naming what is wrong.

const wireItemsVersion = 1

// Control item tags.
const (
	ctlRelocateRequest byte = iota + 1
	ctlRelocateAnswer
	ctlRelocateCancel
	ctlLoad
	ctlPressure
	ctlCredit
	ctlCreditAsk
)

// loadReport tells the peers how many objects (owners) a host has, for
// PlaceLeastLoaded; a host sends one when the number changed.
type loadReport struct{ load int64 }

// maxWireCodes bounds the sentinel codes of an error answer.
const maxWireCodes = 64

// appendHint encodes a route hint: obj runs on hint.host with owner
// generation hint.gen.
func appendHint(dst []byte, obj relocation.Object, hint routeHint) []byte {
	dst = append(dst, wireItemsVersion)
	dst = wire.AppendString(dst, obj.Kind)
	dst = wire.AppendString(dst, obj.ID)
	dst = wire.AppendString(dst, hint.host)
	return binary.BigEndian.AppendUint64(dst, hint.gen)
}

// decodeHint decodes a route hint (appendHint).
func decodeHint(b []byte) (relocation.Object, routeHint, error) {
	r := wireItemReader(b, "route hint")
	obj := relocation.Object{Kind: r.String("object kind"), ID: r.String("object id")}
	hint := routeHint{host: r.String("host")}
	hint.gen = r.Uint64("generation")
	return obj, hint, r.End()
}

// appendControl encodes a relocate request, answer or cancel; it panics on
// any other value (a bug in the caller).
func appendControl(dst []byte, ctl any) []byte {
	dst = append(dst, wireItemsVersion)
	switch c := ctl.(type) {
	case *relocateRequest:
		dst = append(dst, ctlRelocateRequest)
		dst = append(dst, c.op[:]...)
		dst = wire.AppendString(dst, c.ref.Kind)
		dst = wire.AppendString(dst, c.ref.ID)
		dst = wire.AppendString(dst, c.target)
		return binary.BigEndian.AppendUint64(dst, uint64(c.deadline))
	case *relocateAnswer:
		dst = append(dst, ctlRelocateAnswer)
		dst = append(dst, c.op[:]...)
		dst = wire.AppendBool(dst, c.err != nil)
		if c.err == nil {
			return dst
		}
		dst = append(dst, byte(c.err.Kind))
		dst = wire.AppendString(dst, c.err.Msg)
		dst = binary.AppendUvarint(dst, uint64(len(c.err.Codes)))
		for _, code := range c.err.Codes {
			dst = wire.AppendString(dst, code)
		}
		return dst
	case *relocateCancel:
		dst = append(dst, ctlRelocateCancel)
		return append(dst, c.op[:]...)
	case *loadReport:
		dst = append(dst, ctlLoad)
		return binary.BigEndian.AppendUint64(dst, uint64(c.load))
	case *pressureItem:
		dst = append(dst, ctlPressure)
		dst = wire.AppendString(dst, c.obj.Kind)
		dst = wire.AppendString(dst, c.obj.ID)
		return wire.AppendBool(dst, c.paused)
	case *creditAsk:
		return append(dst, ctlCreditAsk)
	case *creditReport:
		dst = append(dst, ctlCredit)
		for _, v := range []uint64{c.settledN, c.settledB, c.windowN, c.windowB} {
			dst = binary.BigEndian.AppendUint64(dst, v)
		}
		return dst
	}
	panic("actor: appendControl of an unknown control item")
}

// decodeControl decodes a control item (appendControl).
func decodeControl(b []byte) (any, error) {
	r := wireItemReader(b, "control item")
	tag := r.Byte("tag")
	if tag == ctlLoad {
		lr := &loadReport{load: int64(r.Uint64("load"))}
		if lr.load < 0 {
			r.Fail("malformed control item: negative load")
		}
		if err := r.End(); err != nil {
			return nil, err
		}
		return lr, nil
	}
	if tag == ctlPressure {
		p := &pressureItem{obj: relocation.Object{Kind: r.String("kind"), ID: r.String("id")}}
		p.paused = r.Bool("paused")
		if err := r.End(); err != nil {
			return nil, err
		}
		return p, nil
	}
	if tag == ctlCreditAsk {
		if err := r.End(); err != nil {
			return nil, err
		}
		return &creditAsk{}, nil
	}
	if tag == ctlCredit {
		c := &creditReport{settledN: r.Uint64("settled messages"), settledB: r.Uint64("settled bytes"),
			windowN: r.Uint64("window messages"), windowB: r.Uint64("window bytes")}
		if err := r.End(); err != nil {
			return nil, err
		}
		return c, nil
	}
	var op payload.OpID
	copy(op[:], r.Take("operation id", len(op)))
	var ctl any
	switch tag {
	case ctlRelocateRequest:
		c := &relocateRequest{op: op}
		c.ref = Ref{Kind: r.String("kind"), ID: r.String("id")}
		c.target = r.String("target")
		c.deadline = int64(r.Uint64("deadline"))
		ctl = c
	case ctlRelocateAnswer:
		c := &relocateAnswer{op: op}
		if r.Bool("error flag") {
			he := &HandlerError{Kind: payload.Kind(r.Byte("error kind"))}
			he.Msg = r.String("error text")
			n := r.Uvarint("error codes")
			if n > maxWireCodes {
				r.Fail("more than " + strconv.Itoa(maxWireCodes) + " error codes")
			}
			for i := uint64(0); i < n && r.Err() == nil; i++ {
				he.Codes = append(he.Codes, r.String("error code"))
			}
			c.err = he
		}
		ctl = c
	case ctlRelocateCancel:
		ctl = &relocateCancel{op: op}
	default:
		if r.Err() == nil {
			r.Fail("malformed control item: unknown tag " + strconv.Itoa(int(tag)))
		}
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return ctl, nil
}

// wireItemReader reads an item of this file's encodings after checking its
// version byte.
func wireItemReader(b []byte, what string) *wire.Reader {
	r := &wire.Reader{B: b, Op: "actor", What: what}
	if v := r.Byte("version"); r.Err() == nil && v != wireItemsVersion {
		r.Fail("malformed " + what + ": unknown version " + strconv.Itoa(int(v)))
	}
	return r
}

// encodeWireError encodes err as the error reply of request op.
func (h *hostEnv) encodeWireError(op payload.OpID, err error) (payload.Buffer, error) {
	he := handlerError(err)
	return payload.Encode(h.pool, h.reg, payload.Header{Op: op, Flags: flagReply | flagError},
		wireError{Kind: uint8(he.Kind), Text: he.Msg, Codes: he.Codes})
}

// decodeWireError decodes an error reply into the HandlerError it carries.
func (h *hostEnv) decodeWireError(buf payload.Buffer) error {
	m, err := h.reg.Open(buf.Retain())
	if err != nil {
		return err
	}
	defer m.Release()
	we, err := payload.Value[wireError](m)
	if err != nil {
		return err
	}
	k := payload.Kind(we.Kind)
	if k == 0 {
		k = payload.InternalFailure
	}
	return &HandlerError{Kind: k, Msg: we.Text, Codes: we.Codes}
}

// Bounces (how often a message went back to its origin) are kept in the
// flags' upper nibble.
const (
	bounceShift = 4
	bounceMask  = 0xF0
)

// flagSkip marks a skip notice: a frame that carries a stamp and nothing
// to run.
const flagSkip uint8 = 4

// flagAgain marks a message frame that a new run of its sender sent again
// after the old run's links closed (runlink.go): its owner may have had it
// from the old run, and drops it if so (route.StepRepeat). On a reply
// frame the same bit is flagError.
const flagAgain uint8 = 2

// sentAgain reports whether a frame's flags mark a message sent again.
func sentAgain(flags uint8) bool { return flags&(flagReply|flagAgain) == flagAgain }

func bouncesOf(flags uint8) uint8 { return flags >> bounceShift }

// flagError marks a reply frame that carries an error.
const flagError uint8 = 2

// routeHint tells a host where an object runs now.
type routeHint struct {
	host string
	gen  uint64
}

// flagReply marks a reply frame.
const flagReply uint8 = 1

// flagAck marks the empty reply a one-way handler sends when its message
// carries a reply route (only an encoded Request does): the handler
// returned nil.
const flagAck uint8 = 8

// Relocate called on a host that does not own the object asks the owner's
// host to move it: a relocateRequest on the link to that host, answered
// by a relocateAnswer (a relocateCancel withdraws it when the caller's
// context ends first). The owner's host runs the move as its own
// Relocate would, under the caller's deadline.
type (
	relocateRequest struct {
		op       payload.OpID
		ref      Ref
		target   string
		deadline int64 // wall clock, Unix ns; 0: none
	}
	relocateAnswer struct {
		op  payload.OpID
		err *HandlerError // nil: moved
	}
	relocateCancel struct{ op payload.OpID }
)

// wireError is how an error reply travels between hosts: its kind and
// text. Errors other than berth kinds arrive as their text only.
// wireError is a HandlerError between hosts.
type wireError struct {
	Kind  uint8    `json:"k"`
	Text  string   `json:"t"`
	Codes []string `json:"c,omitempty"`
}
