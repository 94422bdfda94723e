package actor

import (
	"context"
	"testing"
)

type counter struct{ n int }
type inc struct{ By int }
type get struct{}

func TestSmoke(t *testing.T) {
	k := NewKind("counter", func(ctx *Context, id string) (*counter, error) { return &counter{}, nil })
	Handle(k, func(ctx *Context, c *counter, m inc) error { c.n += m.By; return nil })
	HandleRequest(k, func(ctx *Context, c *counter, _ get) (int, error) { return c.n, nil })
	h, err := NewHost(Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.Register(k)
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref := Ref{"counter", "a"}
	for i := 0; i < 100; i++ {
		if err := Tell(ctx, h, ref, inc{By: 2}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := Ask[get, int](ctx, h, ref, get{})
	if err != nil || n != 200 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
