package payload

import (
	stdjson "encoding/json"
	"reflect"
	"testing"

	"github.com/berthrt/berth/internal/testpb"
	"google.golang.org/protobuf/proto"
)

// Run with: go test -run '^$' -bench . -benchmem ./payload

func benchRegistry(b *testing.B) *Registry {
	r := NewRegistry()
	if err := r.Register(Protobuf, IsProtoMessage); err != nil {
		b.Fatal(err)
	}
	if err := r.Register(Raw, ForType[[]byte]()); err != nil {
		b.Fatal(err)
	}
	r.Freeze()
	return r
}

func BenchmarkSendLookupCached(b *testing.B) {
	r := benchRegistry(b)
	if _, err := SendCodecFor[Item](r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SendCodecFor[Item](r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSendLookupUncachedPastBound(b *testing.B) {
	r := benchRegistry(b)
	for i := 0; i < SendCacheLimit; i++ {
		if _, err := r.SendCodec(reflect.ArrayOf(i, reflect.TypeFor[byte]())); err != nil {
			b.Fatal(err)
		}
	}
	late := reflect.TypeFor[Item]() // first seen after the bound: never cached
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.SendCodec(late); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReceiveLookup(b *testing.B) {
	r := benchRegistry(b)
	ct := []byte("application/protobuf")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReceiveCodec(ct); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHeaderEncode(b *testing.B) {
	h := fullHeader()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendHeader(buf[:0], &h); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkHeaderDecode(b *testing.B) {
	h := fullHeader()
	frame, _ := AppendHeader(nil, &h)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeHeader(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBufferGetRelease(b *testing.B) {
	var p Pool
	b.ReportAllocs()
	for b.Loop() {
		p.Get(200).Release()
	}
}

func BenchmarkBufferGetRetainRelease(b *testing.B) {
	var p Pool
	b.ReportAllocs()
	for b.Loop() {
		buf := p.Get(200)
		c := buf.Retain()
		buf.Release()
		c.Release()
	}
}

func BenchmarkBufferGetRetainReleaseParallel(b *testing.B) {
	var p Pool
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			buf := p.Get(200)
			c := buf.Retain()
			buf.Release()
			c.Release()
		}
	})
}

var smallItem = Item{SKU: "sku-123456", Qty: 3, Notes: []string{"gift", "fragile"}}
var smallOrder = &testpb.Order{Kind: "cart.add", Id: 123456789, Amount: 12.5, Tags: []string{"a", "bb", "ccc"}}

// BenchmarkMessageJSON is the whole payload path of a small JSON message:
// encode into pooled storage, open (header decode, codec lookup), one typed
// decode, release.
func BenchmarkMessageJSON(b *testing.B) {
	var p Pool
	r := benchRegistry(b)
	h := testHeader()
	b.ReportAllocs()
	for b.Loop() {
		m, err := NewMessage(&p, r, h, smallItem)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Value[Item](m); err != nil {
			b.Fatal(err)
		}
		m.Release()
	}
}

// BenchmarkMessageProtobuf is BenchmarkMessageJSON for a protobuf message.
func BenchmarkMessageProtobuf(b *testing.B) {
	var p Pool
	r := benchRegistry(b)
	h := testHeader()
	b.ReportAllocs()
	for b.Loop() {
		m, err := NewMessage(&p, r, h, smallOrder)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Value[*testpb.Order](m); err != nil {
			b.Fatal(err)
		}
		m.Release()
	}
}

// BenchmarkMessageOverhead is the framework's share alone: a []byte payload
// through the raw codec (encode, open, release) with no typed decode.
func BenchmarkMessageOverhead(b *testing.B) {
	var p Pool
	r := benchRegistry(b)
	h := testHeader()
	body := []byte("0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	for b.Loop() {
		m, err := NewMessage(&p, r, h, body)
		if err != nil {
			b.Fatal(err)
		}
		m.Release()
	}
}

// Baselines: the raw libraries alone, for the same values.

func BenchmarkBaselineStdJSONEncodeDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		data, err := stdjson.Marshal(smallItem)
		if err != nil {
			b.Fatal(err)
		}
		var out Item
		if err := stdjson.Unmarshal(data, &out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBaselineJSONCodecEncodeDecode(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = JSON.Encode(buf[:0], &smallItem); err != nil {
			b.Fatal(err)
		}
		var out Item
		if err := JSON.Decode(buf, &out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBaselineProtoEncodeDecode(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], smallOrder); err != nil {
			b.Fatal(err)
		}
		out := new(testpb.Order)
		if err := proto.Unmarshal(buf, out); err != nil {
			b.Fatal(err)
		}
	}
}
