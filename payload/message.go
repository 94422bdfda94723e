package payload

import (
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Message is a header and an encoded payload in one reference-counted frame.
//
// The header is decoded when the message is opened; the payload is decoded
// only by the first typed access (Value), at most once, and the value or the
// error is kept: later accesses, with the same type or another, never call
// the codec again. Handlers receive typed values only; the raw accessors
// (RawView, CopyPayload, Frame) exist for transports and codec extensions.
//
// A Message holds one reference to its frame and is released exactly once
// with Release, which drops that reference and recycles the Message. Using a
// Message after Release is a bug; a second Release panics unless the Message
// has already been reused.
//
// Value is safe for concurrent use. The other methods may be called
// concurrently with each other and with Value, but not with Release.
type Message struct {
	buf   Buffer
	hdr   HeaderView
	codec *CodecEntry // nil when the frame carries no payload

	decoded atomic.Bool
	mu      sync.Mutex // serializes the first decode
	value   any        // *T of the first typed access; guarded by mu until decoded
	err     error      // the first decode's failure; guarded by mu until decoded
}

var messages = sync.Pool{New: func() any { return new(Message) }}

// Open makes a Message of the frame in b: it decodes the header (without
// touching the payload) and looks up the codec for its content type. On
// success the Message owns the reference b. On failure the caller keeps b
// and must release it; the error is a ProtocolError for a malformed header
// or an unregistered or non-canonical content type. A frame without a
// payload may have an empty content type.
func (r *Registry) Open(b Buffer) (*Message, error) {
	s := b.live("Open")
	hv, n, err := DecodeHeader(s.data)
	if err != nil {
		return nil, err
	}
	var ce *CodecEntry
	if ct := hv.ContentType(); len(ct) > 0 || n < len(s.data) {
		if ce, err = r.ReceiveCodec(ct); err != nil {
			return nil, err
		}
	}
	m := messages.Get().(*Message)
	m.buf, m.hdr, m.codec = b, hv, ce
	return m, nil
}

// Encode encodes v, of the declared type M, behind header h into a new frame
// from pool p. The codec is chosen by M (SendCodec), never by v's dynamic
// type; Encode sets the frame's content type to the codec's and, when
// h.Type is empty, the message type name to M's name. The payload is
// appended directly after the header into pooled storage: no intermediate
// byte slice, no copy. Errors: those of AppendHeader (InvalidOperation),
// SendCodec (NotConfigured), and the codec's, wrapped as InvalidOperation.
func Encode[M any](p *Pool, r *Registry, h Header, v M) (Buffer, error) {
	se, ce, err := r.sendSelect(reflect.TypeFor[M]())
	if err != nil {
		return Buffer{}, err
	}
	hint := 512
	if se != nil {
		ce = se.entry
		if h.Type == "" {
			h.Type = se.typeName
		}
		if n := int(se.sizeHint.Load()); n > 0 {
			hint = n
		}
	} else if h.Type == "" {
		h.Type = reflect.TypeFor[M]().String()
	}
	h.ContentType = ce.contentType

	s := p.storage(hint)
	base := unsafe.SliceData(s.data)
	d, err := AppendHeader(s.data[:0], &h)
	if err == nil {
		// The codec gets a pointer to a pooled copy of v: passing v itself
		// as an interface would allocate for every non-pointer M.
		var box *M
		if se != nil {
			box, _ = se.boxes.Get().(*M)
		}
		if box == nil {
			box = new(M)
		}
		*box = v
		d, err = ce.codec.Encode(d, box)
		var zero M
		*box = zero
		if se != nil {
			se.boxes.Put(box)
		}
		if err != nil {
			err = Wrap(InvalidOperation, "payload.Encode", err)
		}
	}
	if err != nil {
		p.recycle(s)
		return Buffer{}, err
	}
	if unsafe.SliceData(d) != base {
		// The codec outgrew the storage and append copied what was there.
		p.stats.fullCopies.add(1)
		p.stats.fullCopyBytes.add(uint64(cap(s.data)))
	}
	s.data = d
	if se != nil && len(d) > int(se.sizeHint.Load()) && len(d) <= MaxPooledSize {
		se.sizeHint.Store(int32(len(d)))
	}
	return p.hand(s), nil
}

// NewMessage encodes v, of the declared type M, and opens the frame: Encode
// followed by Open.
func NewMessage[M any](p *Pool, r *Registry, h Header, v M) (*Message, error) {
	b, err := Encode(p, r, h, v)
	if err != nil {
		return nil, err
	}
	m, err := r.Open(b)
	if err != nil {
		b.Release()
		return nil, err
	}
	return m, nil
}

func (m *Message) live(op string) {
	if m.buf.s == nil {
		panic("payload: Message." + op + " after Release")
	}
}

// Header returns the decoded header. It reads the frame in place and is
// valid until the Message is released.
func (m *Message) Header() *HeaderView {
	m.live("Header")
	return &m.hdr
}

// Len returns the length of the whole frame, header and payload.
func (m *Message) Len() int {
	m.live("Len")
	return len(m.buf.s.data)
}

// PayloadLen returns the length of the encoded payload.
func (m *Message) PayloadLen() int {
	m.live("PayloadLen")
	return len(m.buf.s.data) - m.hdr.Len()
}

// Codec returns the codec entry chosen for the payload, or nil when
// the frame carries none.
func (m *Message) Codec() *CodecEntry {
	m.live("Codec")
	return m.codec
}

// RawView returns the encoded payload without copying: lent until the
// Message is released, read-only. It is for transport inspection and codec
// extensions; it does not decode and does not produce the typed outcome.
// It counts a view.
func (m *Message) RawView() []byte {
	m.live("RawView")
	m.buf.s.pool.stats.views.add(1)
	return m.buf.s.data[m.hdr.Len():]
}

// Frame returns the whole encoded frame, header and payload, without
// copying: lent until the Message is released, read-only. Transports send
// it as is. It counts a view.
func (m *Message) Frame() []byte {
	m.live("Frame")
	m.buf.s.pool.stats.views.add(1)
	return m.buf.s.data
}

// CopyPayload returns a new copy of the encoded payload, which the caller
// owns. It counts a full copy. Like RawView it does not decode.
func (m *Message) CopyPayload() []byte {
	m.live("CopyPayload")
	src := m.buf.s.data[m.hdr.Len():]
	st := &m.buf.s.pool.stats
	st.fullCopies.add(1)
	st.fullCopyBytes.add(uint64(len(src)))
	return append([]byte(nil), src...)
}

// Share returns a new Message on the same frame, for 1:N delivery: it adds
// a reference to the frame and has its own typed access, so each child
// decodes into its own value. Each child is released on its own; the frame
// is released once, after the last of them.
func (m *Message) Share() *Message {
	m.live("Share")
	c := messages.Get().(*Message)
	c.buf, c.hdr, c.codec = m.buf.Retain(), m.hdr, m.codec
	return c
}

// TakeBuffer ends the Message and returns its reference to the frame
// instead of releasing it: ownership of the encoded frame moves to the
// caller (a transport handing it on). The Message must not be used after.
func (m *Message) TakeBuffer() Buffer {
	m.live("TakeBuffer")
	b := m.buf
	m.buf, m.hdr, m.codec = Buffer{}, HeaderView{}, nil
	m.value, m.err = nil, nil
	m.decoded.Store(false)
	messages.Put(m)
	return b
}

// Release drops the Message's reference to its frame and recycles the
// Message. The frame's storage is released when its last reference goes.
func (m *Message) Release() {
	m.live("Release")
	b := m.buf
	m.buf, m.hdr, m.codec = Buffer{}, HeaderView{}, nil
	m.value, m.err = nil, nil
	m.decoded.Store(false)
	messages.Put(m)
	b.Release()
}

// Value returns the message payload decoded as T.
//
// The first typed access decodes through the codec chosen by the content
// type and keeps the result. Every later access returns that result without
// calling the codec: the same value (as a fresh copy of T) for the same T; a
// TypeMismatch error for a different T; the first access's error if the
// decode failed. A decode failure is a ProtocolError wrapping the codec's
// error; a frame without a payload gives a ProtocolError.
func Value[T any](m *Message) (T, error) {
	var zero T
	if !m.decoded.Load() {
		m.live("Value")
		m.mu.Lock()
		if !m.decoded.Load() {
			p := new(T)
			if err := m.decodeInto(p); err != nil {
				m.err = err
			} else {
				m.value = p
			}
			m.decoded.Store(true)
		}
		m.mu.Unlock()
	}
	if m.err != nil {
		return zero, m.err
	}
	p, ok := m.value.(*T)
	if !ok {
		return zero, &Error{Kind: TypeMismatch, Op: "payload.Value",
			Detail: "message was decoded as " + reflect.TypeOf(m.value).Elem().String() +
				", not " + reflect.TypeFor[T]().String()}
	}
	return *p, nil
}

func (m *Message) decodeInto(p any) error {
	if m.codec == nil {
		return NewError(ProtocolError, "payload.Value", "message has no payload")
	}
	m.buf.s.pool.stats.decodes.add(1)
	if err := m.codec.codec.Decode(m.buf.s.data[m.hdr.Len():], p); err != nil {
		return &Error{Kind: ProtocolError, Op: "payload.Value", Detail: "decode " + m.codec.contentType, Err: err}
	}
	return nil
}

// Stamp rewrites, in place, the message's stream epoch and sequence number
// (SetStamp): what a sending host does when it routes the message. The
// caller must hold the only reference to the frame. It counts no view.
func (m *Message) Stamp(epoch, seq uint64) {
	m.live("Stamp")
	_ = SetStamp(m.buf.s.data, epoch, seq)
}

// Frame builds a frame from a header and an already-encoded body — bytes lent
// by their source (a database row, a network read) that do not outlive the
// call. The body is copied once into pooled storage, and that copy is counted
// (Stats.FullCopies, FullCopyBytes): it is the boundary copy of the message
// path. h.ContentType must be set; Registry.Open resolves it (an unknown one
// is a ProtocolError there). h.Type names the body's type.
func (p *Pool) Frame(h *Header, body []byte) (Buffer, error) {
	s := p.storage(headerSizeHint(h) + len(body))
	base := unsafe.SliceData(s.data)
	d, err := AppendHeader(s.data[:0], h)
	if err != nil {
		p.recycle(s)
		return Buffer{}, err
	}
	d = append(d, body...)
	p.stats.fullCopies.add(1)
	p.stats.fullCopyBytes.add(uint64(len(body)))
	if unsafe.SliceData(d) != base {
		p.stats.fullCopies.add(1)
		p.stats.fullCopyBytes.add(uint64(cap(s.data)))
	}
	s.data = d
	return p.hand(s), nil
}

// headerSizeHint is an upper estimate of h's encoded size.
func headerSizeHint(h *Header) int {
	n := 96 + len(h.Type) + len(h.ContentType) + len(h.Target.Name) + len(h.Target.ID) + len(h.ReplyTo) + len(h.Origin)
	for _, m := range h.Meta {
		n += 4 + len(m.Key) + len(m.Value)
	}
	return n
}
