package actor_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/berthrt/berth/actor"
)

// Cart is the in-memory state of one shopping cart.
type Cart struct{ Items map[string]int }

// AddItem and CountItems are the messages a cart takes.
type AddItem struct {
	SKU string
	Qty int
}
type CountItems struct{}

// Embedding a host in a service: define a kind, start a host, send.
func Example() {
	carts := actor.NewKind("cart", func(ctx *actor.Context, id string) (*Cart, error) {
		return &Cart{Items: map[string]int{}}, nil
	})
	actor.Handle(carts, func(ctx *actor.Context, c *Cart, m AddItem) error {
		c.Items[m.SKU] += m.Qty
		return nil
	})
	actor.HandleRequest(carts, func(ctx *actor.Context, c *Cart, _ CountItems) (int, error) {
		n := 0
		for _, q := range c.Items {
			n += q
		}
		return n, nil
	})

	host, err := actor.NewHost(actor.Config{}) // the zero Config works
	if err != nil {
		panic(err)
	}
	host.Register(carts)
	if err := host.Start(); err != nil {
		panic(err)
	}
	defer host.Stop(context.Background())

	ctx := context.Background()
	cart := actor.Ref{Kind: "cart", ID: "alice"}
	actor.Tell(ctx, host, cart, AddItem{SKU: "apple", Qty: 2})
	actor.Tell(ctx, host, cart, AddItem{SKU: "pear", Qty: 1})
	n, err := actor.Ask[CountItems, int](ctx, host, cart, CountItems{})
	fmt.Println(n, err)
	// Output: 3 <nil>
}

// Kinds can run code when an object passivates or the host stops.
func ExampleKind_OnDeactivate() {
	carts := actor.NewKind("cart", func(ctx *actor.Context, id string) (*Cart, error) {
		return &Cart{Items: map[string]int{}}, nil
	})
	actor.Handle(carts, func(ctx *actor.Context, c *Cart, m AddItem) error {
		c.Items[m.SKU] += m.Qty
		return nil
	})
	carts.OnDeactivate(func(ctx context.Context, id string, c *Cart) {
		fmt.Println("saving", id, c.Items)
	})
	host, _ := actor.NewHost(actor.Config{})
	host.Register(carts)
	host.Start()
	actor.Tell(context.Background(), host, actor.Ref{Kind: "cart", ID: "bob"}, AddItem{SKU: "fig", Qty: 4})
	host.Stop(context.Background()) // graceful: queued work runs, then the hooks
	// Output: saving bob map[fig:4]
}

// Tell returns once the message is accepted; the handler runs later, in
// order with the sender's other messages to the same object.
func ExampleTell() {
	type Log struct{ Line string }
	var mu sync.Mutex
	var lines []string
	journal := actor.NewKind("journal", func(*actor.Context, string) (*struct{}, error) { return &struct{}{}, nil })
	actor.Handle(journal, func(ctx *actor.Context, _ *struct{}, m Log) error {
		mu.Lock()
		lines = append(lines, m.Line)
		mu.Unlock()
		return nil
	})
	host, _ := actor.NewHost(actor.Config{})
	host.Register(journal)
	host.Start()
	for _, l := range []string{"one", "two", "three"} {
		actor.Tell(context.Background(), host, actor.Ref{Kind: "journal", ID: "j"}, Log{Line: l})
	}
	host.Stop(context.Background())
	fmt.Println(lines)
	// Output: [one two three]
}

// Ask waits for the request handler's reply or error.
func ExampleAsk() {
	type Square struct{ N int }
	calc := actor.NewKind("calc", func(*actor.Context, string) (*struct{}, error) { return &struct{}{}, nil })
	actor.HandleRequest(calc, func(ctx *actor.Context, _ *struct{}, q Square) (int, error) {
		if q.N < 0 {
			return 0, fmt.Errorf("negative input %d", q.N)
		}
		return q.N * q.N, nil
	})
	host, _ := actor.NewHost(actor.Config{})
	host.Register(calc)
	host.Start()
	defer host.Close()
	ctx := context.Background()
	fmt.Println(actor.Ask[Square, int](ctx, host, actor.Ref{Kind: "calc", ID: "c"}, Square{N: 7}))
	fmt.Println(actor.Ask[Square, int](ctx, host, actor.Ref{Kind: "calc", ID: "c"}, Square{N: -1}))
	// Output:
	// 49 <nil>
	// 0 negative input -1
}

// Publish fans a message out to every subscriber of its type on a channel.
func ExamplePublish() {
	type PriceChanged struct {
		SKU   string
		Cents int
	}
	var mu sync.Mutex
	var seen []string
	prices := actor.NewChannel("prices")
	for _, name := range []string{"cache", "audit", "search"} {
		actor.Subscribe(prices, func(ctx *actor.Context, p PriceChanged) error {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s:%s=%d", name, p.SKU, p.Cents))
			mu.Unlock()
			return nil
		})
	}
	host, _ := actor.NewHost(actor.Config{})
	host.Register(prices)
	host.Start()
	actor.Publish(context.Background(), host, "prices", PriceChanged{SKU: "apple", Cents: 99})
	host.Stop(context.Background())
	sort.Strings(seen)
	fmt.Println(seen)
	// Output: [audit:apple=99 cache:apple=99 search:apple=99]
}

// AskChannel sends a request to one of the channel's servers.
func ExampleAskChannel() {
	type Lookup struct{ Key string }
	dir := actor.NewChannel("directory")
	actor.Serve(dir, func(ctx *actor.Context, q Lookup) (string, error) { return "value-of-" + q.Key, nil })
	host, _ := actor.NewHost(actor.Config{})
	host.Register(dir)
	host.Start()
	defer host.Close()
	fmt.Println(actor.AskChannel[Lookup, string](context.Background(), host, "directory", Lookup{Key: "k"}))
	// Output: value-of-k <nil>
}

// A program that embeds a host watches Done: the host closes itself if its
// lease ran out before it could renew it (Err is then ErrLeaseLost: its
// objects may run elsewhere by now, and the program starts a new host),
// and Done is closed by Close and Stop too (Err is then nil).
func ExampleHost_Done() {
	host, _ := actor.NewHost(actor.Config{})
	host.Start()
	go host.Stop(context.Background()) // say, on SIGTERM
	<-host.Done()
	if errors.Is(host.Err(), actor.ErrLeaseLost) {
		fmt.Println("lease lost: start a new host")
		return
	}
	fmt.Println("stopped:", host.Err())
	// Output: stopped: <nil>
}

// A readiness probe asks Ready: nil while the host serves, an error that
// says why once it is draining, stopping or closed (or before it starts).
func ExampleHost_Ready() {
	host, _ := actor.NewHost(actor.Config{})
	fmt.Println("before Start:", host.Ready())
	host.Start()
	fmt.Println("serving:", host.Ready())
	host.Stop(context.Background())
	fmt.Println("stopped:", host.Ready())
	// Output:
	// before Start: actor.Host.Ready: unavailable: not started
	// serving: <nil>
	// stopped: actor.Host.Ready: shutting down: closed
}
