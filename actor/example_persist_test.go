package actor_test

import (
	"context"
	"fmt"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/relocation"
)

// Basket is a persistent object's state.
type Basket struct {
	Items []string
}

// PutInBasket adds an item to a basket; answered with the basket's size.
type PutInBasket struct{ Item string }

// BasketSize asks for the basket's size without changing it.
type BasketSize struct{}

// A persistent kind: its objects' state survives their host. The reply to
// PutInBasket leaves only once the basket that holds the item is durable; a read
// tells the host it changed nothing, so nothing is written after it.
func ExampleKind_PersistStateJSON() {
	ctx := context.Background()
	store := relocation.NewMemoryStore(nil) // a Location Store and a state store; pgstore.Store on Postgres
	baskets := func() *actor.Kind[Basket] {
		k := actor.NewKind("basket", func(*actor.Context, string) (*Basket, error) { return &Basket{}, nil })
		actor.HandleRequest(k, func(ctx *actor.Context, c *Basket, m PutInBasket) (int, error) {
			c.Items = append(c.Items, m.Item)
			return len(c.Items), nil
		})
		actor.HandleRequest(k, func(ctx *actor.Context, c *Basket, _ BasketSize) (int, error) {
			ctx.StateUnchanged()
			return len(c.Items), nil
		})
		k.PersistStateJSON()
		return k
	}
	ref := actor.Ref{Kind: "basket", ID: "ada"}

	h1, _ := actor.NewHost(actor.Config{Name: "h1", Store: store})
	_ = h1.Register(baskets())
	_ = h1.Start()
	_, _ = actor.Ask[PutInBasket, int](ctx, h1, ref, PutInBasket{"tea"})
	n, _ := actor.Ask[PutInBasket, int](ctx, h1, ref, PutInBasket{"cups"})
	fmt.Println("answered:", n) // durable before this answer
	_ = h1.Close()              // no Stop: as if the process died

	// Another host on the same store; h1's lease is let go at once here
	// (a crashed host's runs out).
	store.Expire("h1")
	h2, _ := actor.NewHost(actor.Config{Name: "h2", Store: store})
	_ = h2.Register(baskets())
	_ = h2.Start()
	defer h2.Close()
	n, _ = actor.Ask[BasketSize, int](ctx, h2, ref, BasketSize{})
	fmt.Println("after the crash:", n)
	fmt.Println("writes on h2:", h2.Stats().StateWrites)
	// Output:
	// answered: 2
	// after the crash: 2
	// writes on h2: 0
}
