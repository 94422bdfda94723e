package relocation_test

import (
	"context"
	"fmt"

	"github.com/berthrt/berth/relocation"
)

// Source and Target are pure state machines: the driver feeds each one's
// records to the other and carries out their effects, in order. Here the
// "driver" is a loop that answers every action at once; an answer is
// stepped after the rest of the effects, as a driver must.
func Example() {
	move := relocation.MoveID{1}
	obj := relocation.Object{Kind: "cart", ID: "42"}
	src := relocation.NewSource(relocation.SourceConfig{Move: move, Object: obj, Source: "A", Target: "B",
		Owner: relocation.Ownership{Host: "A", OwnerGen: 1, Version: 1}})
	tgt := relocation.NewTarget(relocation.TargetConfig{Host: "B"})

	var toTarget, toSource []relocation.Record
	var handle func(who string, out relocation.Output)
	handle = func(who string, out relocation.Output) {
		var answers []relocation.Input
		for _, e := range out.Effects {
			switch e := e.(type) {
			case relocation.Send:
				if who == "source" {
					toTarget = append(toTarget, e.Record)
				} else {
					toSource = append(toSource, e.Record)
				}
			case relocation.SealAndCapture:
				answers = append(answers, relocation.Captured{Record: relocation.MoveRecord{
					State: []byte(`{"items":3}`), Queue: [][]byte{[]byte("queued-1")}}})
			case relocation.RestoreObject:
				answers = append(answers, relocation.Restored{})
			case relocation.TakeHeld:
				answers = append(answers, relocation.HeldTaken{Frames: [][]byte{[]byte("held-1")}})
			case relocation.StoreNewOwner:
				answers = append(answers, relocation.StoreResult{Row: relocation.Row{Ownership: relocation.Ownership{Host: "B", OwnerGen: 2}}})
			case relocation.OpenQueue:
				fmt.Printf("%s opens: captured %q, relayed %q\n", who, e.Captured, e.Relayed)
			case relocation.Finish:
				fmt.Println(who, "finished:", e.Outcome)
			}
		}
		for _, in := range answers {
			if who == "source" {
				handle(who, src.Step(in))
			} else {
				handle(who, tgt.Step(in))
			}
		}
	}
	handle("source", src.Step(relocation.Start{}))
	for len(toTarget)+len(toSource) > 0 {
		for len(toTarget) > 0 {
			r := toTarget[0]
			toTarget = toTarget[1:]
			if _, ok := r.(*relocation.Preflight); ok { // the driver answers preflights
				toSource = append(toSource, &relocation.PreflightReply{Move: move, OK: true})
				continue
			}
			handle("target", tgt.Step(relocation.Receive{Record: r}))
		}
		for len(toSource) > 0 {
			r := toSource[0]
			toSource = toSource[1:]
			handle("source", src.Step(relocation.Receive{Record: r}))
		}
	}
	// Output:
	// target opens: captured ["queued-1"], relayed ["held-1"]
	// target finished: moved
	// source finished: moved
}

// The in-memory Location Store: conditional writes only.
func ExampleMemoryStore() {
	ctx := context.Background()
	s := relocation.NewMemoryStore(nil)
	s.RenewLease(ctx, "A", 1, 0)
	s.RenewLease(ctx, "B", 1, 0)
	obj := relocation.Object{Kind: "cart", ID: "42"}
	r, _ := s.Reserve(ctx, obj, "A")
	r, _ = s.Commit(ctx, obj, r.Ownership)
	moved, _ := s.NewOwner(ctx, obj, r.Ownership, "B")
	fmt.Println(moved.Host, moved.ObjectGen, moved.OwnerGen)
	_, err := s.NewOwner(ctx, obj, r.Ownership, "A") // stale: B owns it now
	fmt.Println(err)
	// Output:
	// B 1 2
	// relocation.Store: rejected: object cart/42 has a newer owner
}
