package counter_test

import (
	"context"
	"fmt"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/counter"
)

// A host with the counter kind; numbered Adds from one sender, then a
// Read. (A client of `berth node` processes registers the kind on a
// gateway host the same way: see docs/operations.md, "A client program".)
func ExampleKind() {
	h, err := actor.NewHost(actor.Config{Name: "example"})
	if err != nil {
		panic(err)
	}
	h.Register(counter.Kind())
	if err := h.Start(); err != nil {
		panic(err)
	}
	defer h.Close()
	ctx := context.Background()
	ref := actor.Ref{Kind: counter.Name, ID: "42"}
	for seq := 1; seq <= 3; seq++ {
		if err := actor.Tell(ctx, h, ref, counter.Add{Sender: "me", Seq: seq}); err != nil {
			panic(err)
		}
	}
	c, err := actor.Ask[counter.Read, counter.Counter](ctx, h, ref, counter.Read{})
	fmt.Println(c.Count["me"], c.Last["me"], c.OutOfOrder, err)
	// Output: 3 3 0 <nil>
}
