package payload

import (
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// SendCacheLimit is the most declared types whose send selection a Registry
// caches (docs/architecture.md, "The payload contract", rule 7). Entries are never evicted; a type first seen after the
// cache is full is evaluated against the registrations on every send.
const SendCacheLimit = 1024

// CodecEntry is a registered codec with its canonical content type.
// Entries are immutable.
type CodecEntry struct {
	codec       Codec
	contentType string
	sel         Selector // nil: receive only (or the default)
}

// Codec returns the codec.
func (e *CodecEntry) Codec() Codec { return e.codec }

// ContentType returns the canonical content type the codec was registered
// under; it is what goes on the wire.
func (e *CodecEntry) ContentType() string { return e.contentType }

// sendEntry is a cached send selection for one declared type.
type sendEntry struct {
	entry    *CodecEntry
	typeName string
	sizeHint atomic.Int32 // largest frame encoded for the type
	boxes    sync.Pool    // *M for the declared type M: what Encode hands the codec
}

// Registry maps declared message types to codecs for sending, and content
// types to codecs for receiving (docs/architecture.md, "Codec" and "The payload contract", rule 7).
//
// A Registry has two phases. Before Freeze, Register adds codecs; lookups
// fail with NotConfigured. Freeze fixes the registrations and precomputes the
// receive table, which is then read without locks. After Freeze, Register
// fails with InvalidOperation. Send selections are computed on first use of
// a declared type and cached, up to SendCacheLimit types.
//
// JSON is always registered first and is the default: a declared type that
// no selector matches is sent as JSON. When several selectors match, the
// codec registered last wins.
//
// The zero Registry is ready to use and holds only JSON. A Registry is safe
// for concurrent use.
type Registry struct {
	mu      sync.Mutex    // guards entries until Freeze, and send cache inserts
	entries []*CodecEntry // registration order; entries[0] is JSON
	recv    atomic.Pointer[recvTable]
	// send is the send cache, copied on write (at most SendCacheLimit
	// inserts, ever) so that reads are a plain map lookup without a lock.
	// It is keyed by the type's descriptor pointer: hashing a pointer is
	// several times cheaper than hashing a reflect.Type interface value.
	send atomic.Pointer[map[unsafe.Pointer]*sendEntry]
}

// typeKey returns the descriptor pointer inside a reflect.Type, which is
// unique per type and, as a map key of type unsafe.Pointer, keeps the
// descriptor alive.
func typeKey(t reflect.Type) unsafe.Pointer {
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&t))[1]
}

// recvTable is the receive table built at Freeze. Few codecs are the norm,
// and then a scan that compares lengths first beats hashing; many codecs go
// through the map.
type recvTable struct {
	list []*CodecEntry // nil when byType is used
	m    map[string]*CodecEntry
}

const recvScanMax = 8

func (t *recvTable) lookup(ct []byte) *CodecEntry {
	if t.list != nil {
		for _, e := range t.list {
			if len(e.contentType) == len(ct) && e.contentType == string(ct) {
				return e
			}
		}
		return nil
	}
	return t.m[string(ct)]
}

// NewRegistry returns a Registry holding only the JSON codec.
func NewRegistry() *Registry {
	r := &Registry{}
	r.mu.Lock()
	r.initLocked()
	r.mu.Unlock()
	return r
}

func (r *Registry) initLocked() {
	if r.entries == nil {
		r.entries = []*CodecEntry{{codec: JSON, contentType: JSON.ContentType()}}
	}
}

// Register adds codec c for the declared types that sel matches; a nil sel
// registers c for receiving only. The codec's content type is normalized
// here, once. Register fails with InvalidOperation after Freeze, for a nil
// codec or a content type that does not normalize, and with AlreadyExists if
// a codec with the same canonical content type is registered.
func (r *Registry) Register(c Codec, sel Selector) error {
	const op = "payload.Registry.Register"
	if c == nil {
		return NewError(InvalidOperation, op, "nil codec")
	}
	ct, err := NormalizeContentType(c.ContentType())
	if err != nil {
		return &Error{Kind: InvalidOperation, Op: op, Detail: "codec content type " + strconv.Quote(c.ContentType()), Err: err}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recv.Load() != nil {
		return NewError(InvalidOperation, op, "registry is frozen")
	}
	r.initLocked()
	for _, e := range r.entries {
		if e.contentType == ct {
			return NewError(AlreadyExists, op, "a codec for "+strconv.Quote(ct)+" is already registered")
		}
	}
	r.entries = append(r.entries, &CodecEntry{codec: c, contentType: ct, sel: sel})
	return nil
}

// Freeze fixes the registrations and builds the receive table. Calling it
// again does nothing.
func (r *Registry) Freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recv.Load() != nil {
		return
	}
	r.initLocked()
	t := &recvTable{}
	if len(r.entries) <= recvScanMax {
		t.list = append([]*CodecEntry(nil), r.entries...)
	} else {
		t.m = make(map[string]*CodecEntry, len(r.entries))
		for _, e := range r.entries {
			t.m[e.contentType] = e
		}
	}
	empty := map[unsafe.Pointer]*sendEntry{}
	r.send.Store(&empty)
	r.recv.Store(t)
}

// Frozen reports whether Freeze has been called.
func (r *Registry) Frozen() bool { return r.recv.Load() != nil }

// SendCodec returns the codec for sending a value of the declared type:
// the last registered codec whose selector matches, else JSON. It fails with
// NotConfigured before Freeze. A cached lookup does not allocate.
func (r *Registry) SendCodec(declared reflect.Type) (*CodecEntry, error) {
	se, e, err := r.sendSelect(declared)
	if se != nil {
		return se.entry, nil
	}
	return e, err
}

// SendCodecFor is SendCodec for the declared type M.
func SendCodecFor[M any](r *Registry) (*CodecEntry, error) {
	return r.SendCodec(reflect.TypeFor[M]())
}

// SendCacheLen returns the number of declared types in the send cache.
func (r *Registry) SendCacheLen() int {
	if c := r.send.Load(); c != nil {
		return len(*c)
	}
	return 0
}

// sendSelect returns the cached selection for t, or, when t cannot be
// cached, a freshly evaluated entry.
func (r *Registry) sendSelect(t reflect.Type) (*sendEntry, *CodecEntry, error) {
	c := r.send.Load()
	if c == nil {
		return nil, nil, NewError(NotConfigured, "payload.Registry.SendCodec", "registry is not frozen")
	}
	k := typeKey(t)
	if se, ok := (*c)[k]; ok {
		return se, nil, nil
	}
	e := r.evaluate(t)
	if len(*c) >= SendCacheLimit {
		return nil, e, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c = r.send.Load()
	if se, ok := (*c)[k]; ok {
		return se, nil, nil
	}
	if len(*c) >= SendCacheLimit {
		return nil, e, nil
	}
	next := make(map[unsafe.Pointer]*sendEntry, len(*c)+1)
	for k, v := range *c {
		next[k] = v
	}
	se := &sendEntry{entry: e, typeName: t.String()}
	next[k] = se
	r.send.Store(&next)
	return se, nil, nil
}

// evaluate runs the selectors, last registration first. Registrations are
// immutable once frozen, so entries is read without the lock.
func (r *Registry) evaluate(t reflect.Type) *CodecEntry {
	for i := len(r.entries) - 1; i > 0; i-- {
		if e := r.entries[i]; e.sel != nil && e.sel(t) {
			return e
		}
	}
	return r.entries[0]
}

// ReceiveCodec returns the codec registered under the content type carried by
// a message, compared byte for byte with the canonical registry keys. An
// unregistered or non-canonical content type is a ProtocolError: there is no
// fallback to JSON. It fails with NotConfigured before Freeze. The lookup
// takes no lock and does not allocate.
func (r *Registry) ReceiveCodec(contentType []byte) (*CodecEntry, error) {
	t := r.recv.Load()
	if t == nil {
		return nil, NewError(NotConfigured, "payload.Registry.ReceiveCodec", "registry is not frozen")
	}
	if e := t.lookup(contentType); e != nil {
		return e, nil
	}
	return nil, unknownContentType(contentType)
}

func unknownContentType(ct []byte) error {
	const op = "payload.Registry.ReceiveCodec"
	if !IsCanonicalContentType(ct) {
		return NewError(ProtocolError, op, "non-canonical content type "+strconv.Quote(string(ct)))
	}
	return NewError(ProtocolError, op, "no codec registered for content type "+strconv.Quote(string(ct)))
}
