package cart_test

import (
	"context"
	"fmt"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/cart"
)

// A host with the cart kind: two Adds, then a Get.
func ExampleKind() {
	h, err := actor.NewHost(actor.Config{Name: "example"})
	if err != nil {
		panic(err)
	}
	if err := h.Register(cart.Kind()); err != nil {
		panic(err)
	}
	if err := h.Start(); err != nil {
		panic(err)
	}
	defer h.Close()
	ctx := context.Background()
	ref := actor.Ref{Kind: cart.Name, ID: "alice"}
	_ = actor.Tell(ctx, h, ref, cart.Add{Item: "tea", Qty: 2})
	_ = actor.Tell(ctx, h, ref, cart.Add{Item: "tea", Qty: 1})
	c, err := actor.Ask[cart.Get, cart.Cart](ctx, h, ref, cart.Get{})
	fmt.Println(c.Items, err)
	// Output: map[tea:3] <nil>
}
