package actor

import (
	"errors"
	"testing"
)

// A host is ready only while it serves: not before Start, not while it
// drains or stops, not once closed, and not while its lease is not live.
func TestAHostIsReadyOnlyWhileItServesWithALiveLease(t *testing.T) {
	n := NewNetwork(nil)
	g := newGates()
	var hs []*Host
	for _, name := range []string{"a", "b"} {
		hs = append(hs, startHost(t, n.With(Config{Name: name, Logger: quietLogger()}), movableKind(g)))
	}
	a := hs[0]
	waitViews(t, hs...)
	if err := a.Ready(); err != nil {
		t.Fatalf("a serving: Ready = %v, want nil", err)
	}
	// The lease: past its deadline no turn starts, and the host is not ready.
	saved := a.gate.deadline.Load()
	a.gate.deadline.Store(1)
	if err := a.Ready(); !errors.Is(err, Unavailable) {
		t.Fatalf("a with its lease past its deadline: Ready = %v, want Unavailable", err)
	}
	a.gate.deadline.CompareAndSwap(1, saved)
	// Draining: not ready from the moment the drain begins (its move
	// waits for the object's turn, which a handler holds).
	ref := Ref{"counter", "x"}
	if err := Tell(bg, a, ref, Block{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "k")
	drained := make(chan error, 1)
	go func() { drained <- a.Drain(bg) }()
	waitFor(t, "the drain to begin", func() bool { return a.DrainState() != Serving })
	if err := a.Ready(); !errors.Is(err, ShuttingDown) {
		t.Fatalf("a draining: Ready = %v, want ShuttingDown", err)
	}
	g.release("k")
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(); !errors.Is(err, ShuttingDown) {
		t.Fatalf("a stopped: Ready = %v, want ShuttingDown", err)
	}
	h, err := NewHost(Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Ready(); !errors.Is(err, Unavailable) {
		t.Fatalf("a host not started: Ready = %v, want Unavailable", err)
	}
}

// Stats.MovesUnderWay counts the moves a host takes part in now: one
// while a move waits for its object's turn, none once it is done, at
// either end.
func TestStatsCountTheMovesUnderWay(t *testing.T) {
	n := NewNetwork(nil)
	g := newGates()
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), movableKind(g))
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), movableKind(g))
	waitViews(t, a, b)
	ref := Ref{"counter", "x"}
	if err := Tell(bg, a, ref, Block{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "k")
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(bg, ref, "b") }()
	waitFor(t, "the move to be under way", func() bool { return a.Stats().MovesUnderWay == 1 })
	g.release("k")
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no move under way", func() bool { return a.Stats().MovesUnderWay == 0 && b.Stats().MovesUnderWay == 0 })
}
