package payload_test

import (
	"errors"
	"fmt"

	"github.com/berthrt/berth/internal/testpb"
	"github.com/berthrt/berth/payload"
)

type AddItem struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// The whole path of one payload: encode by declared type, open (header
// only), decode once on typed access, release.
func Example() {
	pool := payload.NewPool(payload.PoolOptions{
		OnRelease: func(ev payload.ReleaseEvent) { fmt.Println("released", ev.Len, "bytes") },
	})
	reg := payload.NewRegistry()
	reg.Freeze()

	h := payload.Header{
		Target: payload.Target{Scope: payload.ScopeObject, Name: "cart", ID: "cart-42"},
		Op:     payload.NewOpID(),
	}
	frame, err := payload.Encode(pool, reg, h, AddItem{SKU: "apple", Qty: 3})
	if err != nil {
		panic(err)
	}
	m, err := reg.Open(frame) // m now owns the frame
	if err != nil {
		frame.Release()
		panic(err)
	}
	hv := m.Header()
	fmt.Printf("%s %s for %s/%s\n", hv.Type(), hv.ContentType(), hv.TargetName(), hv.TargetID())

	item, err := payload.Value[AddItem](m)
	fmt.Println(item, err)
	_, err = payload.Value[string](m) // the first typed access decided the type
	fmt.Println(errors.Is(err, payload.TypeMismatch))
	fmt.Println("decodes:", pool.Stats().Decodes)
	m.Release()
	// Output:
	// payload_test.AddItem application/json for cart/cart-42
	// {apple 3} <nil>
	// true
	// decodes: 1
	// released 133 bytes
}

// Codecs are chosen by the declared type on send and by the content type on
// receive. The later of two matching registrations wins.
func ExampleRegistry_Register() {
	reg := payload.NewRegistry() // JSON is registered and is the default
	if err := reg.Register(payload.Protobuf, payload.IsProtoMessage); err != nil {
		panic(err)
	}
	if err := reg.Register(payload.Raw, payload.ForType[[]byte]()); err != nil {
		panic(err)
	}
	reg.Freeze()

	order, _ := payload.SendCodecFor[*testpb.Order](reg)
	raw, _ := payload.SendCodecFor[[]byte](reg)
	item, _ := payload.SendCodecFor[AddItem](reg)
	fmt.Println(order.ContentType())
	fmt.Println(raw.ContentType())
	fmt.Println(item.ContentType())
	_, err := reg.ReceiveCodec([]byte("application/xml"))
	fmt.Println(errors.Is(err, payload.ProtocolError))
	// Output:
	// application/protobuf
	// application/octet-stream
	// application/json
	// true
}

// A Buffer is released once, when its last reference goes.
func ExampleBuffer_Retain() {
	pool := payload.NewPool(payload.PoolOptions{
		OnRelease: func(ev payload.ReleaseEvent) { fmt.Println("storage released") },
	})
	b := pool.Copy([]byte("hello")) // the one copy a boundary makes of lent bytes
	shared := b.Retain()
	b.Release()
	fmt.Println("still readable:", string(shared.Bytes()))
	shared.Release()
	fmt.Println("full copies:", pool.Stats().FullCopies)
	// Output:
	// still readable: hello
	// storage released
	// full copies: 1
}

// Adopt takes ownership of bytes without copying them.
func ExamplePool_Adopt() {
	var pool payload.Pool
	data := []byte("owned by the transport until now")
	b := pool.Adopt(data, func(d []byte) { fmt.Println("returned", len(d), "bytes") })
	b.Release()
	// Output:
	// returned 32 bytes
}

// Headers are read without touching the payload; a damaged header is a
// ProtocolError.
func ExampleDecodeHeader() {
	h := payload.Header{
		Target: payload.Target{Scope: payload.ScopeChannel, Name: "prices"},
		Op:     payload.NewOpID(),
		Meta:   []payload.MetaEntry{{Key: "trace", Value: "t-1"}},
	}
	frame, _ := payload.AppendHeader(nil, &h)
	frame = append(frame, "payload..."...)

	v, n, err := payload.DecodeHeader(frame)
	trace, _ := v.Meta("trace")
	fmt.Println(v.Scope(), string(v.TargetName()), string(trace), string(frame[n:]), err)

	_, _, err = payload.DecodeHeader(frame[:20])
	fmt.Println(errors.Is(err, payload.ProtocolError))
	// Output:
	// channel prices t-1 payload... <nil>
	// true
}

func ExampleNormalizeContentType() {
	ct, err := payload.NormalizeContentType("  Application/JSON ")
	fmt.Printf("%q %v\n", ct, err)
	_, err = payload.NormalizeContentType("application/json; charset=utf-8")
	fmt.Println(errors.Is(err, payload.ProtocolError))
	// Output:
	// "application/json" <nil>
	// true
}

// Share hands one frame to several receivers; each decodes its own value.
func ExampleMessage_Share() {
	pool := payload.NewPool(payload.PoolOptions{
		OnRelease: func(payload.ReleaseEvent) { fmt.Println("frame released") },
	})
	reg := payload.NewRegistry()
	reg.Freeze()
	h := payload.Header{Target: payload.Target{Scope: payload.ScopeChannel, Name: "news"}, Op: payload.NewOpID()}
	m, _ := payload.NewMessage(pool, reg, h, "hello subscribers")
	a, b := m.Share(), m.Share()
	m.Release()
	for _, child := range []*payload.Message{a, b} {
		s, _ := payload.Value[string](child)
		fmt.Println(s)
		child.Release()
	}
	// Output:
	// hello subscribers
	// hello subscribers
	// frame released
}

// Every berth error carries a kind, tested with errors.Is.
func ExampleKind() {
	err := fmt.Errorf("sending: %w", payload.NewError(payload.Unavailable, "actor.Tell", "route is gone"))
	fmt.Println(errors.Is(err, payload.Unavailable), payload.KindOf(err).String())
	fmt.Println(err)
	// Output:
	// true unavailable
	// sending: actor.Tell: unavailable: route is gone
}
