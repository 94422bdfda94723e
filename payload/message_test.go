package payload

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testpb"
	"google.golang.org/protobuf/proto"
)

// Spec §9, Deserialization Timing and Count: "Repeated typed access to the
// same message preserves the first value or error, with at most one codec
// deserialization callback invocation."
func TestSpec9_RepeatedTypedAccessPreservesFirstValueOrErrorWithAtMostOneDecode(t *testing.T) {
	t.Run("value", func(t *testing.T) {
		c := &countingCodec{ct: "application/x-counted"}
		r := frozen(t, func(r *Registry) error { return r.Register(c, ForType[Item]()) })
		var p Pool
		m, err := NewMessage(&p, r, testHeader(), Item{SKU: "apple", Qty: 3, Notes: []string{"ripe"}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Release()
		if c.decodes.Load() != 0 {
			t.Fatal("decoded before the first typed access")
		}
		first, err := Value[Item](m)
		if err != nil || first.SKU != "apple" || first.Qty != 3 {
			t.Fatalf("first access = %+v, %v", first, err)
		}
		first.Notes[0] = "changed by the handler"
		for i := 0; i < 3; i++ {
			again, err := Value[Item](m)
			if err != nil || again.SKU != "apple" || again.Notes[0] != "changed by the handler" {
				t.Fatalf("access %d = %+v, %v; want the first value", i, again, err)
			}
			if _, err := Value[Other](m); !errors.Is(err, TypeMismatch) {
				t.Fatalf("access as another type = %v, want TypeMismatch", err)
			}
		}
		if n := c.decodes.Load(); n != 1 {
			t.Fatalf("codec decode callback ran %d times, want 1", n)
		}
	})
	t.Run("error", func(t *testing.T) {
		c := &countingCodec{ct: "application/x-failing", fail: true}
		r := frozen(t, func(r *Registry) error { return r.Register(c, ForType[Item]()) })
		var p Pool
		m, err := NewMessage(&p, r, testHeader(), Item{SKU: "apple"})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Release()
		_, first := Value[Item](m)
		if !errors.Is(first, ProtocolError) || !errors.Is(first, errDecodeFailed) {
			t.Fatalf("failed decode = %v, want ProtocolError wrapping the codec's error", first)
		}
		for i := 0; i < 3; i++ {
			if _, err := Value[Item](m); err != first {
				t.Fatalf("access %d = %v, want the first error itself", i, err)
			}
			if _, err := Value[Other](m); err != first {
				t.Fatalf("access %d as another type = %v, want the first error itself", i, err)
			}
		}
		if n := c.decodes.Load(); n != 1 {
			t.Fatalf("codec decode callback ran %d times, want 1", n)
		}
	})
	t.Run("concurrent first access", func(t *testing.T) {
		c := &countingCodec{ct: "application/x-counted"}
		r := frozen(t, func(r *Registry) error { return r.Register(c, ForType[Item]()) })
		var p Pool
		m, _ := NewMessage(&p, r, testHeader(), Item{SKU: "pear"})
		defer m.Release()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if v, err := Value[Item](m); err != nil || v.SKU != "pear" {
					t.Errorf("Value = %+v, %v", v, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := c.decodes.Load(); n != 1 {
			t.Fatalf("codec decode callback ran %d times under concurrent access, want 1", n)
		}
	})
}

func TestRawViewAndCopyDoNotProduceTheTypedOutcome(t *testing.T) {
	c := &countingCodec{ct: "application/x-counted"}
	r := frozen(t, func(r *Registry) error { return r.Register(c, ForType[Item]()) })
	var p Pool
	m, _ := NewMessage(&p, r, testHeader(), Item{SKU: "fig"})
	defer m.Release()
	view := m.RawView()
	cp := m.CopyPayload()
	if !bytes.Equal(view, cp) || string(cp) != `{"sku":"fig","qty":0}` {
		t.Fatalf("view %q, copy %q", view, cp)
	}
	if &cp[0] == &view[0] {
		t.Fatal("CopyPayload returned a view")
	}
	if !bytes.HasSuffix(m.Frame(), view) || len(m.Frame()) != m.Len() || m.PayloadLen() != len(view) {
		t.Fatal("frame, length and payload disagree")
	}
	if c.decodes.Load() != 0 {
		t.Fatal("a raw accessor decoded the payload")
	}
	if v, err := Value[Item](m); err != nil || v.SKU != "fig" || c.decodes.Load() != 1 {
		t.Fatalf("typed access after raw access = %+v, %v, decodes %d", v, err, c.decodes.Load())
	}
	st := p.Stats()
	if st.FullCopies != 1 || st.FullCopyBytes != uint64(len(cp)) || st.Views != 3 || st.Decodes != 1 {
		t.Fatalf("copy accounting = %+v; want 1 full copy, 3 views (RawView, Frame twice), 1 decode", st)
	}
}

func TestEncodeAppendsIntoPooledStorageWithoutCopies(t *testing.T) {
	var p Pool
	r := frozen(t)
	for i := 0; i < 10; i++ {
		m, err := NewMessage(&p, r, testHeader(), Item{SKU: "x", Qty: i})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := Value[Item](m); err != nil || v.Qty != i {
			t.Fatal(v, err)
		}
		m.Release()
	}
	if st := p.Stats(); st.FullCopies != 0 || st.Decodes != 10 {
		t.Fatalf("stats = %+v; encoding must make no full copy", st)
	}
	// A payload larger than the storage the encoder was given is counted
	// as a copy once; the size hint then avoids it.
	big := Item{SKU: strings.Repeat("s", 5000)}
	for i := 0; i < 3; i++ {
		m, err := NewMessage(&p, r, testHeader(), big)
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
	if st := p.Stats(); st.FullCopies != 1 {
		t.Fatalf("full copies after 3 large encodes = %d, want 1 (the first outgrows the hint)", st.FullCopies)
	}
}

func TestDecodedValuesNeverReferToMessageStorage(t *testing.T) {
	r := frozen(t,
		func(r *Registry) error { return r.Register(Raw, ForType[[]byte]()) },
		func(r *Registry) error { return r.Register(Protobuf, IsProtoMessage) },
	)
	var p Pool
	m1, _ := NewMessage(&p, r, testHeader(), Item{SKU: "json-string"})
	m2, _ := NewMessage(&p, r, testHeader(), []byte("raw bytes"))
	m3, _ := NewMessage(&p, r, testHeader(), &testpb.Order{Kind: "proto-string", Tags: []string{"t"}})
	v1, err1 := Value[Item](m1)
	v2, err2 := Value[[]byte](m2)
	v3, err3 := Value[*testpb.Order](m3)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	// Scribble over the frames as a reused buffer would.
	for _, m := range []*Message{m1, m2, m3} {
		f := m.Frame()
		for i := range f {
			f[i] = 'Z'
		}
		m.Release()
	}
	if v1.SKU != "json-string" || string(v2) != "raw bytes" || v3.GetKind() != "proto-string" || v3.GetTags()[0] != "t" {
		t.Fatalf("decoded values changed with the storage: %q %q %q", v1.SKU, v2, v3.GetKind())
	}
}

func TestProtobufAndRawCodecsRoundTrip(t *testing.T) {
	r := frozen(t,
		func(r *Registry) error { return r.Register(Raw, ForType[[]byte]()) },
		func(r *Registry) error { return r.Register(Protobuf, IsProtoMessage) },
	)
	var p Pool
	in := &testpb.Order{Kind: "buy", Id: 7, Amount: 1.5, Tags: []string{"a", "b"}}
	m, err := NewMessage(&p, r, testHeader(), in)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if ct := string(m.Header().ContentType()); ct != "application/protobuf" {
		t.Fatalf("proto message sent as %q", ct)
	}
	if string(m.Header().Type()) != "*testpb.Order" {
		t.Fatalf("type name %q", m.Header().Type())
	}
	out, err := Value[*testpb.Order](m)
	if err != nil || !proto.Equal(in, out) {
		t.Fatalf("proto round trip = %v, %v", out, err)
	}
	if _, err := Value[testpb.Order](m); !errors.Is(err, TypeMismatch) {
		t.Fatalf("access as the value type = %v, want TypeMismatch", err)
	}
	// Codec misuse is a typed error, not a panic.
	if _, err := Protobuf.Encode(nil, &Item{}); !errors.Is(err, TypeMismatch) {
		t.Fatalf("Protobuf.Encode(non-proto) = %v", err)
	}
	var notProto Item
	if err := Protobuf.Decode(nil, &notProto); !errors.Is(err, TypeMismatch) {
		t.Fatalf("Protobuf.Decode(non-proto) = %v", err)
	}
	if _, err := Raw.Encode(nil, []byte("not a pointer")); !errors.Is(err, TypeMismatch) {
		t.Fatalf("Raw.Encode(string) = %v", err)
	}
	if err := Raw.Decode(nil, nil); !errors.Is(err, TypeMismatch) {
		t.Fatalf("Raw.Decode(nil) = %v", err)
	}
	var nilOrder *testpb.Order
	nm, err := NewMessage(&p, r, testHeader(), nilOrder)
	if err != nil || nm.PayloadLen() != 0 {
		t.Fatalf("nil proto message: %v, payload %d bytes", err, nm.PayloadLen())
	}
	if o, err := Value[*testpb.Order](nm); err != nil || o == nil || o.GetKind() != "" {
		t.Fatalf("nil proto message decodes to %v, %v; want an empty message", o, err)
	}
	nm.Release()
	rm, _ := NewMessage(&p, r, testHeader(), []byte{1, 2, 3})
	defer rm.Release()
	if b, err := Value[[]byte](rm); err != nil || !bytes.Equal(b, []byte{1, 2, 3}) {
		t.Fatalf("raw round trip = %v, %v", b, err)
	}
}

func TestEncodeErrorsAreTypedAndRecycleStorage(t *testing.T) {
	log := newReleaseLog()
	p := NewPool(PoolOptions{OnRelease: log.observe})
	r := frozen(t)
	if _, err := Encode(p, r, testHeader(), func() {}); !errors.Is(err, InvalidOperation) {
		t.Fatalf("JSON encode of a func = %v, want InvalidOperation", err)
	}
	h := testHeader()
	h.Op = OpID{}
	if _, err := Encode(p, r, h, Item{}); !errors.Is(err, InvalidOperation) {
		t.Fatalf("encode with a zero op id = %v, want InvalidOperation", err)
	}
	if _, err := Encode(p, NewRegistry(), testHeader(), Item{}); !errors.Is(err, NotConfigured) {
		t.Fatalf("encode with an unfrozen registry = %v, want NotConfigured", err)
	}
	if log.total.Load() != 0 {
		t.Fatal("a failed encode handed out a buffer")
	}
}

func TestMessageWithoutPayload(t *testing.T) {
	var p Pool
	r := frozen(t)
	h := testHeader()
	frame, _ := AppendHeader(nil, &h)
	m, err := r.Open(p.Copy(frame))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if m.Codec() != nil || m.PayloadLen() != 0 {
		t.Fatal("a frame without payload has a codec")
	}
	if _, err := Value[Item](m); !errors.Is(err, ProtocolError) {
		t.Fatalf("Value of an empty message = %v, want ProtocolError", err)
	}
}

func TestShareGivesEachChildItsOwnDecodeAndReleasesFrameOnce(t *testing.T) {
	log := newReleaseLog()
	p := NewPool(PoolOptions{OnRelease: log.observe})
	c := &countingCodec{ct: "application/x-counted"}
	r := frozen(t, func(r *Registry) error { return r.Register(c, ForType[Item]()) })
	parent, _ := NewMessage(p, r, testHeader(), Item{SKU: "shared"})
	const n = 16
	children := make([]*Message, n)
	for i := range children {
		children[i] = parent.Share()
	}
	parent.Release()
	var wg sync.WaitGroup
	for _, ch := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := Value[Item](ch)
			if err != nil || v.SKU != "shared" {
				t.Errorf("child value %+v, %v", v, err)
			}
			ch.Release()
		}()
	}
	wg.Wait()
	if got := log.total.Load(); got != 1 {
		t.Fatalf("frame released %d times, want once after all children", got)
	}
	if got := c.decodes.Load(); got != n {
		t.Fatalf("children decoded %d times, want %d (each its own value)", got, n)
	}
}

func TestMessageUseAfterReleasePanics(t *testing.T) {
	var p Pool
	r := frozen(t)
	m, _ := NewMessage(&p, r, testHeader(), Item{})
	m.Release()
	mustPanic(t, "second Release", func() { m.Release() })
	mustPanic(t, "Value after Release", func() { Value[Item](m) })
	mustPanic(t, "RawView after Release", func() { m.RawView() })
}

func TestHeaderFieldsSurviveEncode(t *testing.T) {
	var p Pool
	r := frozen(t)
	h := fullHeader()
	h.Type, h.ContentType = "", "ignored/by-encode"
	m, err := NewMessage(&p, r, h, Item{SKU: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	v := m.Header()
	if string(v.Type()) != "payload.Item" || string(v.ContentType()) != "application/json" {
		t.Fatalf("type %q content type %q", v.Type(), v.ContentType())
	}
	if v.Op() != h.Op || v.Hops() != 3 || string(v.ReplyTo()) != h.ReplyTo {
		t.Fatal("header fields lost in Encode")
	}
	if string(v.Origin()) != h.Origin || v.Epoch() != h.Epoch || v.Seq() != h.Seq {
		t.Fatalf("stamp lost in Encode: origin %q epoch %d seq %d", v.Origin(), v.Epoch(), v.Seq())
	}
	if d, _ := v.Deadline(); !d.Equal(time.Unix(1_900_000_000, 123)) {
		t.Fatal("deadline lost")
	}
}

// The JSON codec must keep encoding/json semantics for the shapes berth
// users send; this pins the library choice (see the JSON doc comment).
func TestJSONMatchesEncodingJSON(t *testing.T) {
	type Embedded struct {
		E int `json:"e"`
	}
	type Shape struct {
		Embedded
		Name     string             `json:"name"`
		Skip     string             `json:"-"`
		Omit     string             `json:"omit,omitempty"`
		HTML     string             `json:"html"`
		Ptr      *int               `json:"ptr"`
		Map      map[string]int     `json:"map"`
		Raw      stdjson.RawMessage `json:"raw"`
		Time     time.Time          `json:"time"`
		Bytes    []byte             `json:"bytes"`
		Untagged int
		Str      int64 `json:",string"`
		Any      any   `json:"any"`
		unexp    int
	}
	seven := 7
	str := "unicode \u2028 é 😀 \x01"
	num := 3.25
	var null *Shape
	// Encode hands the codec a pointer to the value, so compare with
	// json.Marshal of the same pointer.
	values := []any{
		&Shape{Embedded: Embedded{E: 1}, Name: "n", Skip: "s", HTML: "<a>&</a>", Ptr: &seven,
			Map: map[string]int{"z": 1, "a": 2, "m": 3}, Raw: stdjson.RawMessage(`{"x":[1,2]}`),
			Time: time.Date(2026, 11, 29, 1, 2, 3, 4, time.UTC), Bytes: []byte{0, 1, 2}, Untagged: 9, Str: 42,
			Any: map[string]any{"k": []any{1.5, "v", nil, true}}, unexp: 3},
		&Shape{},
		&[]int{1, 2, 3},
		&map[string]string{"b": "1", "a": "2"},
		&str,
		&num,
		&null,
	}
	for _, v := range values {
		want, err := stdjson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := JSON.Encode([]byte("pre"), v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[3:]) != string(want) || string(got[:3]) != "pre" {
			t.Errorf("encode differs from encoding/json:\n got %s\nwant %s", got[3:], want)
		}
		var a, b Shape
		errA, errB := JSON.Decode(want, &a), stdjson.Unmarshal(want, &b)
		if (errA == nil) != (errB == nil) {
			t.Errorf("decode error differs: %v vs %v", errA, errB)
		}
		ja, _ := stdjson.Marshal(a)
		jb, _ := stdjson.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("decode differs from encoding/json:\n got %s\nwant %s", ja, jb)
		}
	}
	for _, bad := range []string{`{"name":`, `{"name":1}`, `[1,2]`, `{"ptr":"x"}`, `{} trailing`} {
		var a, b Shape
		errA, errB := JSON.Decode([]byte(bad), &a), stdjson.Unmarshal([]byte(bad), &b)
		if (errA == nil) != (errB == nil) {
			t.Errorf("decode of %q: error %v, encoding/json says %v", bad, errA, errB)
		}
	}
}

func TestTakeBufferMovesOwnershipWithoutRelease(t *testing.T) {
	log := newReleaseLog()
	p := NewPool(PoolOptions{OnRelease: log.observe})
	r := frozen(t)
	m, _ := NewMessage(p, r, testHeader(), Item{SKU: "moved"})
	b := m.TakeBuffer()
	if log.total.Load() != 0 {
		t.Fatal("TakeBuffer released the frame")
	}
	m2, err := r.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Value[Item](m2); v.SKU != "moved" {
		t.Fatal("frame lost its payload")
	}
	m2.Release()
	if log.total.Load() != 1 {
		t.Fatal("frame not released exactly once")
	}
}
