// Package cart is a shopping cart kind: the example of a program's own
// kind run as a cluster of nodes (cartnode is that program). A client
// registers Kind on its gateway host for the message types.
//
// Invariant: a cart's state is the quantity of each item added to it; it
// moves with the cart (PreserveStateJSON).
package cart

import "github.com/berthrt/berth/actor"

// Name is the kind's name: a cart is actor.Ref{Kind: Name, ID: ...}.
const Name = "cart"

// Cart is a cart's state: the quantity of each item in it.
type Cart struct {
	Items map[string]int `json:"items"`
}

// Add puts Qty more of Item in the cart (a Tell).
type Add struct {
	Item string
	Qty  int
}

// Get asks for the cart (a request: answered with Cart).
type Get struct{}

// Kind returns the cart kind.
func Kind() *actor.Kind[Cart] {
	k := actor.NewKind(Name, func(*actor.Context, string) (*Cart, error) {
		return &Cart{Items: map[string]int{}}, nil
	})
	actor.Handle(k, func(_ *actor.Context, c *Cart, a Add) error {
		c.Items[a.Item] += a.Qty
		return nil
	})
	actor.HandleRequest(k, func(_ *actor.Context, c *Cart, _ Get) (Cart, error) { return *c, nil })
	k.PreserveStateJSON() // the state moves with the cart
	return k
}
