package actor

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/berthrt/berth/relocation"
)

// A move's source, between relay-ready and the target's commit, is still
// the object's owner in the Location Store but no longer has an owner for
// it. A send there that finds no route — a message that came back to its
// origin, a send tried again after a leaving host refused it, a forward
// that asks the store again: each forgets the host's routes to the object,
// the forwarding route with them — must not activate the object there
// again. Before, the look-up found the row naming this host, activated a
// fresh object (its state empty) and wrote the row, so the target's commit
// found it changed and abandoned the move: the moved state was lost and the
// messages ran twice over two objects' orders.
func TestAMovesSourceNeverActivatesTheObjectAgainBeforeTheCommit(t *testing.T) {
	store := relocation.NewMemoryStore(nil)
	n := NewNetwork(store)
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), seqKind())
	startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), seqKind())
	ref := Ref{"seq", "o"}
	obj := relocation.Object{Kind: "seq", ID: "o"}
	for i := 1; i <= 5; i++ {
		if err := Tell(bg, a, ref, SeqMsg{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Ask[GetSeqs, []int](bg, a, ref, GetSeqs{}); err != nil || len(got) != 5 {
		t.Fatalf("before the move: %v, %v", got, err)
	}
	reached, hold := make(chan struct{}, 1), make(chan struct{})
	store.Fault(func(_ context.Context, op string) error {
		if op == "NewOwner" {
			select {
			case reached <- struct{}{}:
			default:
			}
			<-hold
		}
		return nil
	})
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(bg, ref, "b") }()
	<-reached // the target commits: the source is past relay-ready
	if a.owners.kinds["seq"].local("o") != nil {
		t.Fatal("the source still has an owner while the target commits")
	}
	a.routes.forget(obj, true) // every route to the object lost
	sent := make(chan error, 1)
	go func() { sent <- Tell(bg, a, ref, SeqMsg{Seq: 6}) }()
	// The send is resolved (or has activated the object) before the
	// commit goes on: it is a look-up on a, which the store answers now.
	waitFor(t, "the sixth message handed on or run", func() bool {
		return len(sent) == 1 || a.owners.kinds["seq"].local("o") != nil
	})
	close(hold)
	store.Fault(nil)
	if err := <-moved; err != nil {
		t.Fatalf("the move: %v", err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("the sixth message: %v", err)
	}
	want := []int{1, 2, 3, 4, 5, 6}
	waitFor(t, "the sixth message run", func() bool {
		got, err := Ask[GetSeqs, []int](bg, a, ref, GetSeqs{})
		return err == nil && len(got) >= len(want)
	})
	got, err := Ask[GetSeqs, []int](bg, a, ref, GetSeqs{})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("the object ran %v (%v), want %v: its state moved and the message after it ran once, on it", got, err, want)
	}
	if a.owners.kinds["seq"].local("o") != nil {
		t.Fatal("a has an owner of the object after the move")
	}
	waitFor(t, "no owner on a", func() bool { return a.Stats().OwnersActive == 0 })
}

// A move's Preflight waits for a Location Store that cannot answer (an
// outage, a restart): the target asks again until the store answers, and
// the move then goes on. It is not refused for a store that is away.
func TestAPreflightWaitsForAStoreThatCannotAnswer(t *testing.T) {
	store := relocation.NewMemoryStore(nil)
	n := NewNetwork(store)
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), seqKind())
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), seqKind())
	waitViews(t, a, b)
	ref := Ref{"seq", "o"}
	if err := Tell(bg, a, ref, SeqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	// The source's own look at the row (its first Get) is answered; the
	// store then stops answering, as in a restart.
	var gets, refusedGets atomic.Int64
	store.Fault(func(_ context.Context, op string) error {
		if op == "Get" && gets.Add(1) > 1 {
			refusedGets.Add(1)
			return errStoreDown
		}
		return nil
	})
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(bg, ref, "b") }()
	waitFor(t, "the target's check refused by the store a few times", func() bool { return refusedGets.Load() >= 3 })
	select {
	case err := <-moved:
		t.Fatalf("the move ended while the store could not answer: %v", err)
	default:
	}
	store.Fault(nil)
	if err := <-moved; err != nil {
		t.Fatalf("the move after the store answered again: %v", err)
	}
	if got, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{}); err != nil || !slices.Equal(got, []int{1}) {
		t.Fatalf("the object on b: %v, %v", got, err)
	}
}
