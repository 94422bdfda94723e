package actor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/inproc"
)

// cartKind is a cart whose state moves with it.
func cartKind() *actor.Kind[Cart] {
	carts := actor.NewKind("cart", func(ctx *actor.Context, id string) (*Cart, error) {
		return &Cart{Items: map[string]int{}}, nil
	})
	actor.Handle(carts, func(ctx *actor.Context, c *Cart, m AddItem) error { c.Items[m.SKU] += m.Qty; return nil })
	actor.HandleRequest(carts, func(ctx *actor.Context, c *Cart, _ CountItems) (int, error) {
		n := 0
		for _, q := range c.Items {
			n += q
		}
		return n, nil
	})
	carts.PreserveStateJSON()
	return carts
}

// startHosts starts hosts with the given names in this process, each with
// its own instance of the kind, and waits until each knows the others.
// Hosts in one process share an in-process transport, a Location Store
// and a membership; closeAll closes them.
func startHosts(kind func() *actor.Kind[Cart], names ...string) (hosts []*actor.Host, closeAll func()) {
	net := inproc.NewNetwork(inproc.Options{})
	store := relocation.NewMemoryStore(nil)
	members := membership.NewMemory(membership.Options{})
	for _, name := range names {
		h, _ := actor.NewHost(actor.Config{Name: name, Transport: net, Store: store, Membership: members})
		h.Register(kind())
		h.Start()
		hosts = append(hosts, h)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		known := 0
		for _, h := range hosts {
			known += len(h.Peers())
		}
		if known == len(hosts)*(len(hosts)-1) {
			break
		}
	}
	return hosts, func() {
		for _, h := range hosts {
			h.Close()
		}
		members.Close()
	}
}

// Moving a live object to another host: its state and queued messages go
// with it, and messages sent to the old host follow it.
func ExampleHost_Relocate() {
	ctx := context.Background()
	hosts, closeAll := startHosts(cartKind, "a", "b") // on one in-process Network
	defer closeAll()
	a, b := hosts[0], hosts[1]
	cart := actor.Ref{Kind: "cart", ID: "alice"}
	actor.Tell(ctx, a, cart, AddItem{SKU: "apple", Qty: 2}) // activates on a

	err := a.Relocate(ctx, cart, "b")
	fmt.Println("moved:", err)
	actor.Tell(ctx, a, cart, AddItem{SKU: "pear", Qty: 1}) // followed to b
	n, err := actor.Ask[CountItems, int](ctx, a, cart, CountItems{})
	fmt.Println(n, err, "owners on b:", b.Stats().OwnersActive)
	// Output:
	// moved: <nil>
	// 3 <nil> owners on b: 1
}

// Draining a host for a deploy: every object moves to the other hosts while
// traffic continues, then the host stops.
func ExampleHost_Drain() {
	ctx := context.Background()
	hosts, closeAll := startHosts(cartKind, "a", "b", "c") // on one in-process Network
	defer closeAll()
	for i := 0; i < 10; i++ {
		actor.Tell(ctx, hosts[0], actor.Ref{Kind: "cart", ID: fmt.Sprint(i)}, AddItem{SKU: "apple", Qty: 1})
	}
	err := hosts[0].Drain(ctx)
	fmt.Println("drained:", err, hosts[0].DrainState())
	total := 0
	for i := 0; i < 10; i++ {
		n, _ := actor.Ask[CountItems, int](ctx, hosts[1], actor.Ref{Kind: "cart", ID: fmt.Sprint(i)}, CountItems{})
		total += n
	}
	fmt.Println("items:", total, "owners on b and c:", hosts[1].Stats().OwnersActive+hosts[2].Stats().OwnersActive)
	// Output:
	// drained: <nil> stopped
	// items: 10 owners on b and c: 10
}

// Finding where an object lives, from any host.
func ExampleHost_Locate() {
	ctx := context.Background()
	hosts, closeAll := startHosts(cartKind, "a", "b") // on one in-process Network
	defer closeAll()
	a, b := hosts[0], hosts[1]
	cart := actor.Ref{Kind: "cart", ID: "alice"}
	_, err := a.Locate(ctx, cart)
	fmt.Println("before:", errors.Is(err, actor.ErrNotActive))
	actor.Tell(ctx, b, cart, AddItem{SKU: "apple", Qty: 1}) // activates on b
	loc, _ := a.Locate(ctx, cart)
	fmt.Println("owner:", loc.Host, "generation:", loc.OwnerGeneration)
	b.Relocate(ctx, cart, "a")
	loc, _ = b.Locate(ctx, cart)
	fmt.Println("owner:", loc.Host, "generation:", loc.OwnerGeneration)
	// Output:
	// before: true
	// owner: b generation: 1
	// owner: a generation: 2
}

// Relocate may be called on any host: the owner's host is asked to move
// the object.
func ExampleHost_Relocate_fromAnyHost() {
	ctx := context.Background()
	hosts, closeAll := startHosts(cartKind, "a", "b", "c") // on one in-process Network
	defer closeAll()
	a, c := hosts[0], hosts[2]
	cart := actor.Ref{Kind: "cart", ID: "alice"}
	actor.Tell(ctx, a, cart, AddItem{SKU: "apple", Qty: 2}) // activates on a

	fmt.Println("moved:", c.Relocate(ctx, cart, "b")) // called on c
	loc, _ := c.Locate(ctx, cart)
	fmt.Println("owner:", loc.Host)
	err := c.Relocate(ctx, cart, "b")
	fmt.Println("again:", errors.Is(err, actor.ErrAlreadyThere))
	// Output:
	// moved: <nil>
	// owner: b
	// again: true
}

// A kind's placement decides where its objects activate; PlaceHashed
// spreads them by id, and every host picks the same owner.
func ExampleKind_SetPlacement() {
	ctx := context.Background()
	hashedCarts := func() *actor.Kind[Cart] {
		carts := cartKind()
		carts.SetPlacement(actor.PlaceHashed) // the same on every host
		return carts
	}
	hosts, closeAll := startHosts(hashedCarts, "a", "b", "c")
	defer closeAll()
	owners := map[string]bool{}
	for i := 0; i < 30; i++ {
		cart := actor.Ref{Kind: "cart", ID: fmt.Sprint("user-", i)}
		actor.Ask[CountItems, int](ctx, hosts[0], cart, CountItems{}) // all sent from a
		loc, _ := hosts[0].Locate(ctx, cart)
		owners[loc.Host] = true
	}
	fmt.Println("hosts used:", len(owners))
	// Output:
	// hosts used: 3
}

// byRegion is a program's own Placement: a cart whose id begins with a
// host's name activates on that host, and drains to the host after it.
type byRegion struct{}

func (byRegion) Activate(id, self string, among []actor.HostLoad) string {
	for _, h := range among {
		if strings.HasPrefix(id, h.Name+"-") {
			return h.Name
		}
	}
	return "" // here
}

func (byRegion) Drain(id string, among []actor.HostLoad) []string {
	var order []string
	for _, h := range among {
		order = append(order, h.Name)
	}
	return order // sorted by name
}

func (byRegion) String() string { return "by-region" }

// A Placement of the program's own: where a kind's objects activate, and
// where a drain sends them.
func ExamplePlacement() {
	ctx := context.Background()
	regional := func() *actor.Kind[Cart] {
		carts := cartKind()
		carts.SetPlacement(byRegion{}) // the same on every host
		return carts
	}
	hosts, closeAll := startHosts(regional, "a", "b", "c")
	defer closeAll()
	for _, id := range []string{"b-7", "c-1", "x-2"} {
		cart := actor.Ref{Kind: "cart", ID: id}
		actor.Ask[CountItems, int](ctx, hosts[0], cart, CountItems{}) // sent from a
		loc, _ := hosts[0].Locate(ctx, cart)
		fmt.Println(id, "on", loc.Host)
	}
	// Output:
	// b-7 on b
	// c-1 on c
	// x-2 on a
}

// Hosts in one process: an in-process transport, a Location Store and a
// membership, shared. Each host learns the others from the membership;
// one that joined later is known a moment after its Start returned.
func ExampleHost_Peers() {
	net := inproc.NewNetwork(inproc.Options{})
	store := relocation.NewMemoryStore(nil)
	members := membership.NewMemory(membership.Options{})
	defer members.Close()
	var hosts []*actor.Host
	for _, name := range []string{"a", "b", "c"} {
		h, _ := actor.NewHost(actor.Config{Name: name, Transport: net, Store: store, Membership: members})
		h.Register(cartKind())
		h.Start()
		defer h.Close()
		hosts = append(hosts, h)
	}
	fmt.Println("c knows", hosts[2].Peers()) // c joined last: it read the list when it joined
	for deadline := time.Now().Add(5 * time.Second); len(hosts[0].Peers()) < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // a learns of b and c from its membership watch
	}
	fmt.Println("a knows", hosts[0].Peers())
	// Output:
	// c knows [a b]
	// a knows [b c]
}

// The pause of each move a host was the source of: from the seal (the
// object stops running here) to its opening at the target (it runs
// there), worked out without comparing the hosts' clocks.
func ExampleHost_Pauses() {
	ctx := context.Background()
	hosts, closeAll := startHosts(cartKind, "a", "b")
	defer closeAll()
	cart := actor.Ref{Kind: "cart", ID: "alice"}
	actor.Tell(ctx, hosts[0], cart, AddItem{SKU: "tea", Qty: 1})
	hosts[0].Relocate(ctx, cart, "b")
	hosts[1].Relocate(ctx, cart, "a")
	fmt.Println("moves from a:", len(hosts[0].Pauses()), "from b:", len(hosts[1].Pauses()))
	// Output:
	// moves from a: 1 from b: 1
}

// A gateway (Config.Gateway) sends to objects of the kinds it registers
// but hosts none: the object runs on a host that serves the kind.
func ExampleConfig_gateway() {
	ctx := context.Background()
	net := inproc.NewNetwork(inproc.Options{})
	store := relocation.NewMemoryStore(nil)
	members := membership.NewMemory(membership.Options{})
	defer members.Close()
	server, _ := actor.NewHost(actor.Config{Name: "server", Transport: net, Store: store, Membership: members})
	server.Register(cartKind())
	server.Start()
	defer server.Close()
	gw, _ := actor.NewHost(actor.Config{Name: "gw", Gateway: true, Transport: net, Store: store, Membership: members})
	gw.Register(cartKind()) // for the cart's message types
	gw.Start()
	defer gw.Close()
	for len(gw.Peers()) == 0 { // it learns of the server from the membership
		time.Sleep(time.Millisecond)
	}
	cart := actor.Ref{Kind: "cart", ID: "bob"}
	actor.Tell(ctx, gw, cart, AddItem{SKU: "tea", Qty: 2})
	n, _ := actor.Ask[CountItems, int](ctx, gw, cart, CountItems{})
	loc, _ := gw.Locate(ctx, cart)
	fmt.Println(n, "items; the cart runs on", loc.Host)
	// Output: 2 items; the cart runs on server
}

// A host on a network transport publishes the address its peers reach it
// at in the membership (Host.Addr); on the in-process transport it has
// none.
func ExampleHost_Addr() {
	net := inproc.NewNetwork(inproc.Options{})
	members := membership.NewMemory(membership.Options{})
	defer members.Close()
	h, _ := actor.NewHost(actor.Config{Name: "a", Transport: net, Store: relocation.NewMemoryStore(nil), Membership: members})
	h.Start()
	defer h.Close()
	fmt.Printf("%q\n", h.Addr())
	// Output: ""
}

// The event log: what a host saw happen to the cluster. Here b drains
// away, and a records the drain, the objects it received and b's leave.
func ExampleHost_Events() {
	ctx := context.Background()
	hosts, closeAll := startHosts(cartKind, "a", "b")
	defer closeAll()
	a, b := hosts[0], hosts[1]
	for _, id := range []string{"alice", "bob", "carol"} {
		actor.Tell(ctx, b, actor.Ref{Kind: "cart", ID: id}, AddItem{SKU: "apple", Qty: 1}) // activate on b
	}
	b.Drain(ctx) // the carts move to a; b stops

	// a's log names b's leave at once; the objects it received are
	// counted once a second.
	var seen []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		seen = nil
		moved := 0
		for _, e := range a.Events(0) {
			if e.Host != "b" {
				continue
			}
			if e.Kind == actor.EventMovedIn {
				moved += e.Count
				continue
			}
			seen = append(seen, string(e.Kind))
		}
		if moved == 3 && slices.Contains(seen, string(actor.EventLeft)) {
			fmt.Println(strings.Join(seen, ", "), "— moved in from b:", moved)
			return
		}
	}
	fmt.Println("not seen:", seen)
	// Output:
	// joined, draining, left — moved in from b: 3
}

// Inspect asks an object, in a turn of its own on the host that runs it,
// where it runs and how; Summarize gives its kind's summary of the state.
func ExampleHost_Inspect() {
	ctx := context.Background()
	hosts, closeAll := startHosts(func() *actor.Kind[Cart] {
		k := cartKind()
		k.Summarize(func(c *Cart) string { return fmt.Sprintf("%d SKUs", len(c.Items)) })
		return k
	}, "a", "b")
	defer closeAll()
	a, b := hosts[0], hosts[1]
	cart := actor.Ref{Kind: "cart", ID: "alice"}
	_, err := a.Inspect(ctx, cart)
	fmt.Println("before:", errors.Is(err, actor.ErrNotActive)) // and not activated by it
	actor.Tell(ctx, b, cart, AddItem{SKU: "apple", Qty: 1})    // activates on b
	actor.Tell(ctx, b, cart, AddItem{SKU: "pear", Qty: 2})
	in, _ := a.Inspect(ctx, cart)
	fmt.Println("runs on:", in.Host, "messages run:", in.Turns, "queued:", in.Queued, "summary:", in.Summary)
	// Output:
	// before: true
	// runs on: b messages run: 2 queued: 0 summary: 2 SKUs
}
