package route_test

import (
	"fmt"

	"github.com/berthrt/berth/route"
)

// A sending host stamps its messages to one object; the object's owner
// runs them in that order, whatever order they arrive in.
func ExampleOrder() {
	streams := route.NewStreams(100, 1, int64(60e9))
	obj := route.Object{Kind: "cart", ID: "alice"}
	s1 := streams.Next(obj, 0)
	s2 := streams.Next(obj, 0)
	s3 := streams.Next(obj, 0)

	var o route.Order[string]
	sender := []byte("host-a")
	offer := func(st route.Stamp, msg string) {
		switch o.Check(sender, st) {
		case route.Hold:
			o.Hold(sender, st, msg, 0)
			fmt.Println("hold", msg)
			return
		default:
			fmt.Println("run", msg)
			o.Released(sender, st, 0)
		}
		for {
			next, ok := o.Next()
			if !ok {
				return
			}
			fmt.Println("run", next)
		}
	}
	offer(s2, "second") // overtook the first on another path
	offer(s3, "third")
	offer(s1, "first")
	// Output:
	// hold second
	// hold third
	// run first
	// run second
	// run third
}

// A host the object left forwards a message to the newest owner it knows,
// but never towards an owner generation the message has already been
// sent towards: then it asks the store, and if the store knows nothing
// newer either, the message goes back to its origin.
func ExampleForward() {
	known := route.Entry{Host: "q", Gen: 5}
	fmt.Println(route.Forward(route.Hop{Hops: 0}, known, true, "p"))
	fmt.Println(route.Forward(route.Hop{Hops: 2, Gen: 5}, known, true, "p"))
	fmt.Println(route.Placed(route.Hop{Hops: 2, Gen: 5}, "q", 5, "p"))
	fmt.Println(route.Forward(route.Hop{Hops: route.MaxHops}, known, true, "p"))
	// Output:
	// {to-host q 5}
	// {resolve  0}
	// {to-origin  0}
	// {to-origin  0}
}

// An owner's Inbox holds a message that overtook an older one for as long
// as the older one takes while no host fails; only a failure fact — here
// the membership reporting a host gone two minutes in — lets the gap
// close, after the fact's wait.
func ExampleInbox() {
	var in route.Inbox[string]
	sender := []byte("host-a")
	offer := func(seq uint64, msg string, now int64) {
		st := route.Stamp{Epoch: 1, Seq: seq}
		step, _ := in.Offer(sender, st, false, false, msg, now)
		fmt.Println(step, msg)
		if step == route.StepAdmit {
			in.Admitted(sender, st, now)
		}
		for next, ok := in.Next(); ok; next, ok = in.Next() {
			fmt.Println("admit", next)
		}
	}
	offer(1, "first", 0)
	offer(3, "third", 10) // the second is on a slow path
	fmt.Println("closed after a minute:", in.CloseGaps(60e9, nil))
	facts := []route.Fact{{At: 120e9, Window: 35e9, Wait: 5e9}}
	fmt.Println("closed after the failure's wait:", in.CloseGaps(125e9, facts))
	for next, ok := in.Next(); ok; next, ok = in.Next() {
		fmt.Println("admit", next)
	}
	// Output:
	// admit first
	// held third
	// closed after a minute: 0
	// closed after the failure's wait: 1
	// admit third
}
