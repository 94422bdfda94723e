//go:build !race

// The examples start two protoactor remotes in one process, which the race
// detector reports inside protoactor (see needProcessPerHost): they run in
// builds without -race.

package remote_test

import (
	"fmt"
	"sync"

	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/remote"
)

// printer prints what a host receives, and signals Up and Gone.
type printer struct {
	name     string
	up, gone chan struct{}
	once     sync.Once
	got      chan struct{}
}

func newPrinter(name string) *printer {
	return &printer{name: name, up: make(chan struct{}, 1), gone: make(chan struct{}, 1), got: make(chan struct{}, 16)}
}

func (p *printer) Deliver(from string, it transport.Item) {
	fmt.Printf("%s got %v %q from %s\n", p.name, it.Kind, it.Data, from)
	p.got <- struct{}{}
}

func (p *printer) Returned(to string, it transport.Item) {}

func (p *printer) Event(e transport.Event) {
	switch e.Kind {
	case transport.Up:
		p.once.Do(func() { p.up <- struct{}{} })
	case transport.Gone:
		p.gone <- struct{}{}
	}
}

// Two hosts, each with its own gRPC server: each is told the other's
// address (in a cluster, from the membership's Member.Address), the link
// comes up, and items go across in order. A graceful Close delivers what
// was sent first; the peer then gets Gone.
func ExampleListen() {
	ha, hb := newPrinter("a"), newPrinter("b")
	a, err := remote.Listen("a", ha, remote.Options{})
	if err != nil {
		panic(err)
	}
	b, err := remote.Listen("b", hb, remote.Options{})
	if err != nil {
		panic(err)
	}
	_ = a.AddPeer("b", b.Addr())
	_ = b.AddPeer("a", a.Addr())
	<-ha.up
	<-hb.up
	fmt.Println(a.Peers(), b.Peers())

	_ = a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte("hello")})
	_ = a.Send("b", transport.Item{Kind: transport.Record, Data: []byte("world")})
	<-hb.got
	<-hb.got
	fmt.Println(a.Close(true))
	<-hb.gone
	fmt.Println(b.Send("a", transport.Item{Kind: transport.Frame, Data: []byte("late")}))
	fmt.Println(b.Close(true))
	// Output:
	// [b] [a]
	// b got frame "hello" from a
	// b got record "world" from a
	// <nil>
	// transport.Send: unavailable: no such peer (or it is gone)
	// <nil>
}

// An Attacher is what a host's Config takes (a transport.Attacher); the
// code that follows the membership finds the host's Transport by name to
// tell it its peers.
func ExampleAttacher() {
	att := remote.New(remote.Options{})
	tr, err := att.Attach("a", newPrinter("a"))
	if err != nil {
		panic(err)
	}
	fmt.Println(att.Transport("a") == tr, tr.Local())
	_, err = att.Attach("a", newPrinter("a"))
	fmt.Println(err)
	fmt.Println(tr.Close(true))
	// Output:
	// true a
	// remote.Attacher.Attach: already exists: a transport named a is attached
	// <nil>
}
