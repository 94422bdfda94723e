package actor_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
)

// ErrSoldOut is a sentinel a handler returns.
var ErrSoldOut = errors.New("sold out")

// Registered in every process (next to the sentinel), so that errors.Is
// matches it wherever the handler ran.
func init() { actor.RegisterError("shop.sold_out", ErrSoldOut) }

// A handler's error reaches the asker the same way on every host: its
// message, its kind, and the registered sentinels it matched.
func ExampleRegisterError() {
	shop := actor.NewKind("shop", func(ctx *actor.Context, id string) (*Cart, error) { return &Cart{}, nil })
	actor.HandleRequest(shop, func(ctx *actor.Context, c *Cart, m AddItem) (int, error) {
		return 0, fmt.Errorf("%s: %w", m.SKU, ErrSoldOut)
	})
	host, _ := actor.NewHost(actor.Config{})
	host.Register(shop)
	host.Start()
	defer host.Close()

	_, err := actor.Ask[AddItem, int](context.Background(), host, actor.Ref{Kind: "shop", ID: "s"}, AddItem{SKU: "tea"})
	fmt.Println(err, errors.Is(err, ErrSoldOut), payload.KindOf(err))
	// Output: tea: sold out true berth: internal failure
}

// Delivering a message its producer encoded (a queue record, a database
// row): the type name and content type select the handler and the codec.
func ExampleHost_Deliver() {
	carts := cartKind()
	host, _ := actor.NewHost(actor.Config{})
	host.Register(carts)
	host.Start()
	defer host.Close()
	ctx := context.Background()
	cart := actor.Ref{Kind: "cart", ID: "bob"}

	rep, err := host.Deliver(ctx, cart, actor.Encoded{
		Type: actor.TypeName[AddItem](), ContentType: "application/json", Body: []byte(`{"SKU":"tea","Qty":2}`)})
	fmt.Println(rep, err) // a one-way handler: no reply
	rep, err = host.Deliver(ctx, cart, actor.Encoded{
		Type: actor.TypeName[CountItems](), ContentType: "application/json", Body: []byte(`{}`)})
	n, _ := payload.Value[int](rep)
	rep.Release()
	fmt.Println(n, err)
	// Output:
	// <nil> <nil>
	// 2 <nil>
}
