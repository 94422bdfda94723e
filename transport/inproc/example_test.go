package inproc_test

import (
	"fmt"

	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/inproc"
)

// printer prints what arrives and signals each delivery on got.
type printer struct {
	name string
	got  chan struct{}
}

func (p printer) Deliver(from string, it transport.Item) {
	fmt.Printf("%s got %v %q from %s\n", p.name, it.Kind, it.Data, from)
	p.got <- struct{}{}
}
func (p printer) Returned(to string, it transport.Item) {}
func (p printer) Event(e transport.Event)               {}

// Two hosts exchange an item.
func Example() {
	n := inproc.NewNetwork(inproc.Options{})
	got := make(chan struct{})
	a, _ := n.Attach("a", printer{"a", got})
	b, _ := n.Attach("b", printer{"b", got})

	buf := []byte("hello")
	if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: buf}); err != nil {
		fmt.Println(err)
	}
	copy(buf, "HELLO") // the transport copied the data: buf is the caller's again
	<-got
	if err := b.Send("a", transport.Item{Kind: transport.Hint, Data: []byte("ack")}); err != nil {
		fmt.Println(err)
	}
	<-got

	b.Close(true)
	a.Close(true)
	fmt.Println(a.Send("b", transport.Item{Kind: transport.Frame}))
	// Output:
	// b got frame "hello" from a
	// a got hint "ack" from b
	// transport.Send: shutting down: the transport is closed
}

// A host closes as a crash would, but takes back what its link had not
// delivered (transport.Reclaimer), to send it again elsewhere.
func Example_closeReclaim() {
	n := inproc.NewNetwork(inproc.Options{})
	got := make(chan struct{}, 8)
	a, _ := n.Attach("a", printer{"a", got})
	b, _ := n.Attach("b", printer{"b", got})
	defer b.Close(false)

	_ = a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte("one")})
	<-got
	n.Break("a", "b") // what a sends now waits on the link
	_ = a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte("two")})
	_ = a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte("three")})

	back := a.(transport.Reclaimer).CloseReclaim()
	for _, it := range back["b"] {
		fmt.Printf("taken back: %v %q\n", it.Kind, it.Data)
	}
	// Output:
	// b got frame "one" from a
	// taken back: frame "two"
	// taken back: frame "three"
}
