package actor

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// A relocate request from another host runs under the deadline it
// carries, bounded: none, or one past maxRemoteRelocate, becomes
// maxRemoteRelocate from its arrival.
func TestARelocateRequestsDeadlineFromAPeerIsBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		carried int64
		want    time.Time
	}{
		{0, now.Add(maxRemoteRelocate)},
		{now.Add(time.Second).UnixNano(), now.Add(time.Second)},
		{now.Add(-time.Second).UnixNano(), now.Add(-time.Second)}, // already past: the move is not started
		{now.Add(maxRemoteRelocate + time.Hour).UnixNano(), now.Add(maxRemoteRelocate)},
		{math.MaxInt64, now.Add(maxRemoteRelocate)},
	} {
		if got := remoteDeadline(now, c.carried); !got.Equal(c.want) {
			t.Errorf("deadline %d carried: %v; want %v", c.carried, got, c.want)
		}
	}
}

// A host runs at most maxServedPerPeer relocations asked by one peer at
// once: past that, the peer's request is answered at once with
// CapacityExceeded and the object stays where it is; the ones running
// complete. Requests of another peer are not counted against it.
func TestRelocateRequestsFromOnePeerAreCapped(t *testing.T) {
	n := NewNetwork(nil)
	g := newGates()
	kind := func() *Kind[Counter] { k := counterKind(g); k.RecreateOnRelocation(); return k }
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), kind())
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), kind())
	c := startHost(t, n.With(Config{Name: "c", Logger: quietLogger()}), kind())
	waitViews(t, a, b, c)
	ref := func(i int) Ref { return Ref{"counter", "o" + itoa(i)} }
	for i := 0; i <= maxServedPerPeer; i++ {
		// Activated on b, each turn blocked: a move of it waits for the
		// turn to end (its seal).
		if err := Tell(bg, b, ref(i), Block{Key: itoa(i)}); err != nil {
			t.Fatal(err)
		}
		g.waitStarted(t, itoa(i))
	}
	errs := make(chan error, maxServedPerPeer)
	for i := 0; i < maxServedPerPeer; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(bg, time.Minute)
			defer cancel()
			errs <- a.Relocate(ctx, ref(i), "a")
		}()
	}
	servedFor := func(peer string) int {
		b.moves.remote.mu.Lock()
		defer b.moves.remote.mu.Unlock()
		return b.moves.remote.servingBy[peer]
	}
	waitFor(t, "b to run a's relocations", func() bool {
		select {
		case err := <-errs:
			t.Fatalf("a relocation ended while its object's turn was blocked: %v (b runs %d)", err, servedFor("a"))
		default:
		}
		return servedFor("a") == maxServedPerPeer
	})
	last := ref(maxServedPerPeer)
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if err := a.Relocate(ctx, last, "a"); !errors.Is(err, ErrTooManyRelocations) || !errors.Is(err, CapacityExceeded) {
		t.Fatalf("relocation #%d asked by a while b runs %d of a's: %v; want CapacityExceeded", maxServedPerPeer+1, maxServedPerPeer, err)
	}
	// Another peer's request is not counted against a: it runs (and
	// waits for its object's turn, as a's do).
	done := make(chan error, 1)
	go func() { done <- c.Relocate(bg, last, "c") }()
	waitFor(t, "b to run c's relocation", func() bool { return servedFor("c") == 1 })
	for i := 0; i <= maxServedPerPeer; i++ {
		g.release(itoa(i))
	}
	for i := 0; i < maxServedPerPeer; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("a relocation within the cap: %v", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("c's relocation: %v", err)
	}
	if servedFor("a") != 0 || servedFor("c") != 0 {
		t.Fatalf("b still counts %d of a's and %d of c's relocations; want none", servedFor("a"), servedFor("c"))
	}
}
