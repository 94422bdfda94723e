package actor

import (
	"errors"
	"testing"

	"github.com/berthrt/berth/payload"
)

// movableKind is counterKind whose state moves with the object.
func movableKind(g *gates) *Kind[Counter] {
	k := counterKind(g)
	k.PreserveStateJSON()
	return k
}

func startNetwork(t *testing.T, names ...string) (*Network, []*Host) {
	t.Helper()
	n := NewNetwork(nil)
	var hs []*Host
	for _, name := range names {
		hs = append(hs, startHost(t, Config{Name: name, Network: n, Logger: quietLogger()}, movableKind(newGates())))
	}
	return n, hs
}

func TestObjectsRunOnceAcrossHostsAndRequestsCrossLinks(t *testing.T) {
	_, hs := startNetwork(t, "a", "b")
	a, b := hs[0], hs[1]
	ref := Ref{"counter", "x"}
	if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := Tell(bg, b, ref, Inc{By: 1}); err != nil { // routed to a
			t.Fatal(err)
		}
	}
	n, err := Ask[Get, int](bg, b, ref, Get{})
	if err != nil || n != 11 {
		t.Fatalf("count via b = %d, %v; want 11 (one activation, on a)", n, err)
	}
	if a.Stats().OwnersActive != 1 || b.Stats().OwnersActive != 0 {
		t.Fatalf("owners: a %d, b %d; want the object only on a", a.Stats().OwnersActive, b.Stats().OwnersActive)
	}
	// Errors cross the link with their kind.
	if _, err := Ask[Fail, int](bg, b, ref, Fail{}); !errors.Is(err, payload.Rejected) {
		t.Fatalf("remote handler error = %v, want its kind (Rejected)", err)
	}
}

func TestRelocateMovesStateAndQueueAndKeepsCounting(t *testing.T) {
	_, hs := startNetwork(t, "a", "b")
	a, b := hs[0], hs[1]
	ref := Ref{"counter", "m"}
	for i := 0; i < 100; i++ {
		Tell(bg, a, ref, Inc{By: 1})
	}
	if err := a.Relocate(bg, ref, "b"); err != nil {
		t.Fatalf("relocate: %v", err)
	}
	waitFor(t, "the old owner to stop", func() bool { return a.Stats().OwnersActive == 0 })
	if b.Stats().OwnersActive != 1 {
		t.Fatalf("after the move: b has %d owners", b.Stats().OwnersActive)
	}
	for i := 0; i < 50; i++ {
		Tell(bg, a, ref, Inc{By: 1}) // followed from a to b
	}
	n, err := Ask[Get, int](bg, a, ref, Get{})
	if err != nil || n != 150 {
		t.Fatalf("count after the move = %d, %v; want 150", n, err)
	}
	n, err = Ask[Get, int](bg, b, ref, Get{})
	if err != nil || n != 150 {
		t.Fatalf("count asked at b = %d, %v", n, err)
	}
	// And back again.
	if err := b.Relocate(bg, ref, "a"); err != nil {
		t.Fatalf("relocate back: %v", err)
	}
	if n, err := Ask[Get, int](bg, b, ref, Get{}); err != nil || n != 150 {
		t.Fatalf("count after moving back = %d, %v", n, err)
	}
}
