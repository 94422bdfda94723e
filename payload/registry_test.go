package payload

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type shape interface{ Area() float64 }

type square struct {
	Side float64 `json:"side"`
}

func (s square) Area() float64 { return s.Side * s.Side }

// Spec §9, Codec Selection: "If no codec matches the receive content-type, it
// ends in ProtocolError instead of falling back to JSON."
func TestSpec9_CodecSelection_UnmatchedReceiveContentTypeEndsInProtocolErrorNotJSONFallback(t *testing.T) {
	var p Pool
	r := frozen(t)
	for _, ct := range []string{"application/x-unregistered", "Application/JSON", " application/json", "application/json; charset=utf-8", ""} {
		t.Run(fmt.Sprintf("%q", ct), func(t *testing.T) {
			h := testHeader()
			h.ContentType = ct
			frame, err := AppendHeader(nil, &h)
			if err != nil {
				t.Fatal(err)
			}
			frame = append(frame, `{"sku":"valid json","qty":1}`...)
			b := p.Copy(frame)
			m, err := r.Open(b)
			if !errors.Is(err, ProtocolError) || m != nil {
				t.Fatalf("Open = %v, %v; want ProtocolError", m, err)
			}
			b.Release() // the caller still owns the buffer after a failed Open
			if d := p.Stats().Decodes; d != 0 {
				t.Fatalf("payload decoded %d times; there must be no JSON test-parse", d)
			}
		})
	}
	if _, err := r.ReceiveCodec([]byte("text/unknown")); !errors.Is(err, ProtocolError) {
		t.Fatalf("ReceiveCodec(unregistered) = %v, want ProtocolError", err)
	}
}

// Spec §9, Codec Selection: "If the declared message type matches more than
// one codec at send time, the later-registered codec is selected."
func TestSpec9_CodecSelection_DeclaredTypeMatchingSeveralCodecsSelectsLaterRegistered(t *testing.T) {
	first := &countingCodec{ct: "application/x-first"}
	second := &countingCodec{ct: "application/x-second"}
	r := frozen(t,
		func(r *Registry) error { return r.Register(first, ForType[square]()) },
		func(r *Registry) error { return r.Register(second, Implementing[shape]()) },
	)
	e, err := SendCodecFor[square](r)
	if err != nil || e.Codec() != Codec(second) {
		t.Fatalf("square selected %v, want the later registration %q", e.ContentType(), second.ct)
	}
	// Reverse the registration order: now the exact-type codec is later.
	r2 := frozen(t,
		func(r *Registry) error { return r.Register(second, Implementing[shape]()) },
		func(r *Registry) error { return r.Register(first, ForType[square]()) },
	)
	if e, _ := SendCodecFor[square](r2); e.Codec() != Codec(first) {
		t.Fatalf("square selected %v after reordering, want %q", e.ContentType(), first.ct)
	}
	// Selection is by the declared type, not the dynamic type: a square sent
	// as a shape is still matched by Implementing[shape] (shape implements
	// itself), and sent as any it gets the JSON default.
	var p Pool
	b, err := Encode[any](&p, r, testHeader(), square{Side: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if ct := string(m.Header().ContentType()); ct != "application/json" {
		t.Fatalf("square declared as any went out as %q, want application/json", ct)
	}
	if first.encodes.Load()+second.encodes.Load() != 0 {
		t.Fatal("a codec selected by the dynamic type encoded the value")
	}
	b2, err := Encode[square](&p, r, testHeader(), square{Side: 2})
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := r.Open(b2)
	defer m2.Release()
	if ct := string(m2.Header().ContentType()); ct != second.ct || second.encodes.Load() != 1 {
		t.Fatalf("square went out as %q, want %q", ct, second.ct)
	}
}

// Spec §7: the send cache holds at most 1,024 declared types, keeps the
// existing entries once full, and evaluates every later type against the
// registrations on each send.
func TestSpec7_SendCacheBoundRetentionAndReevaluation(t *testing.T) {
	var calls sync.Map // reflect.Type → *atomic.Int64
	sel := func(d reflect.Type) bool {
		c, _ := calls.LoadOrStore(d, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return false
	}
	r := frozen(t, func(r *Registry) error { return r.Register(&countingCodec{ct: "application/x-never"}, sel) })
	calledFor := func(d reflect.Type) int64 {
		c, ok := calls.Load(d)
		if !ok {
			return 0
		}
		return c.(*atomic.Int64).Load()
	}
	const extra = 100
	types := make([]reflect.Type, SendCacheLimit+extra)
	for i := range types {
		types[i] = reflect.ArrayOf(i, reflect.TypeFor[byte]()) // distinct types
	}
	for round := 1; round <= 3; round++ {
		for _, d := range types {
			e, err := r.SendCodec(d)
			if err != nil || e.ContentType() != "application/json" {
				t.Fatalf("SendCodec(%v) = %v, %v", d, e, err)
			}
		}
		if n := r.SendCacheLen(); n != SendCacheLimit {
			t.Fatalf("round %d: send cache holds %d types, want %d", round, n, SendCacheLimit)
		}
		for i, d := range types {
			want := int64(1) // cached: evaluated once, ever
			if i >= SendCacheLimit {
				want = int64(round) // uncached: evaluated on every send
			}
			if got := calledFor(d); got != want {
				t.Fatalf("round %d: selector ran %d times for type %d, want %d", round, got, i, want)
			}
		}
	}
}

// Spec §7: the receive table is fixed at freeze and read without locks.
func TestSpec7_ReceiveTableFixedAtFreezeAndReadWithoutLocks(t *testing.T) {
	extra := &countingCodec{ct: "application/x-extra"}
	r := frozen(t, func(r *Registry) error { return r.Register(extra, nil) })

	// Registration after freeze fails and changes nothing.
	late := &countingCodec{ct: "application/x-late"}
	if err := r.Register(late, nil); !errors.Is(err, InvalidOperation) {
		t.Fatalf("Register after Freeze = %v, want InvalidOperation", err)
	}
	if _, err := r.ReceiveCodec([]byte("application/x-late")); !errors.Is(err, ProtocolError) {
		t.Fatalf("a codec registered after Freeze is visible: %v", err)
	}

	// Lookups proceed while the registry's lock is held elsewhere: they take
	// no lock. (If they did, this would block and the test would time out.)
	r.mu.Lock()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 1000; i++ {
			if e, err := r.ReceiveCodec([]byte("application/x-extra")); err != nil || e.Codec() != Codec(extra) {
				done <- fmt.Errorf("lookup %d: %v", i, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		r.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		r.mu.Unlock()
		t.Fatal("receive lookup blocked on the registry lock")
	}

	// Concurrent lookups in both directions, checked by -race.
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if _, err := r.ReceiveCodec([]byte("application/json")); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.SendCodec(reflect.ArrayOf(i%50, reflect.TypeFor[int]())); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Spec §7: content types are normalized at registration and compared without
// new strings on the message path.
func TestSpec7_ContentTypeNormalizedAtRegistrationComparedWithoutNewStrings(t *testing.T) {
	c := &countingCodec{ct: "  Application/X-Thing+JSON "}
	r := frozen(t, func(r *Registry) error { return r.Register(c, ForType[Item]()) })
	e, err := SendCodecFor[Item](r)
	if err != nil || e.ContentType() != "application/x-thing+json" {
		t.Fatalf("registered content type %q, want it normalized", e.ContentType())
	}
	var p Pool
	m, err := NewMessage(&p, r, testHeader(), Item{SKU: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if ct := string(m.Header().ContentType()); ct != "application/x-thing+json" {
		t.Fatalf("wire content type %q, want the canonical one", ct)
	}
	wire := m.Header().ContentType()
	allocs := testing.AllocsPerRun(1000, func() {
		if got, err := r.ReceiveCodec(wire); err != nil || got != e {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("receive lookup allocates %.1f times", allocs)
	}
	// The un-normalized spelling is not accepted on the wire.
	if _, err := r.ReceiveCodec([]byte("Application/X-Thing+JSON")); !errors.Is(err, ProtocolError) {
		t.Fatalf("non-canonical wire content type accepted: %v", err)
	}
}

func TestSendLookupCachedAllocatesNothing(t *testing.T) {
	r := frozen(t, func(r *Registry) error { return r.Register(Protobuf, IsProtoMessage) })
	if _, err := SendCodecFor[Item](r); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if e, err := SendCodecFor[Item](r); err != nil || e.ContentType() != "application/json" {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("cached send lookup allocates %.1f times", allocs)
	}
}

func TestRegistryPhasesAndRegistrationErrors(t *testing.T) {
	var r Registry // the zero Registry works and holds JSON
	if _, err := SendCodecFor[Item](&r); !errors.Is(err, NotConfigured) {
		t.Fatalf("send lookup before Freeze = %v, want NotConfigured", err)
	}
	if _, err := r.ReceiveCodec([]byte("application/json")); !errors.Is(err, NotConfigured) {
		t.Fatalf("receive lookup before Freeze = %v, want NotConfigured", err)
	}
	mustPanic(t, "Open of a zero Buffer", func() { r.Open(Buffer{}) })
	var p Pool
	h := testHeader()
	h.ContentType = "application/json"
	frame, _ := AppendHeader(nil, &h)
	b := p.Copy(append(frame, "{}"...))
	if _, err := r.Open(b); !errors.Is(err, NotConfigured) {
		t.Fatalf("Open before Freeze = %v, want NotConfigured", err)
	}
	b.Release()
	if err := r.Register(nil, nil); !errors.Is(err, InvalidOperation) {
		t.Fatalf("Register(nil) = %v", err)
	}
	if err := r.Register(&countingCodec{ct: "not a content type"}, nil); !errors.Is(err, InvalidOperation) || !errors.Is(err, ProtocolError) {
		t.Fatalf("Register(bad content type) = %v, want InvalidOperation caused by ProtocolError", err)
	}
	if err := r.Register(&countingCodec{ct: "APPLICATION/JSON"}, nil); !errors.Is(err, AlreadyExists) {
		t.Fatalf("Register(duplicate of JSON) = %v, want AlreadyExists", err)
	}
	if r.Frozen() {
		t.Fatal("frozen before Freeze")
	}
	r.Freeze()
	r.Freeze() // idempotent
	if !r.Frozen() {
		t.Fatal("not frozen after Freeze")
	}
	if e, err := SendCodecFor[Item](&r); err != nil || e.Codec() != JSON {
		t.Fatalf("default send codec = %v, %v; want JSON", e, err)
	}
}
