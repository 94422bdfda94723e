package actor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// userGate blocks the user code of a kind (its Restore, its factory) once
// armed: the code says it started, then waits until the test releases
// it.
type userGate struct {
	armed   atomic.Bool
	started chan string // what blocked: "restore" or "factory"
	release chan struct{}
	once    sync.Once
}

func newUserGate() *userGate {
	return &userGate{started: make(chan string, 16), release: make(chan struct{})}
}

func (g *userGate) pass(what string) {
	if !g.armed.Load() {
		return
	}
	g.started <- what
	<-g.release
}

func (g *userGate) open() { g.once.Do(func() { close(g.release) }) }

// blockingKind is a counter kind "slow" with the given relocation policy
// whose factory and Restore block on g once it is armed.
func blockingKind(policy string, g *userGate) *Kind[Counter] {
	k := NewKind("slow", func(*Context, string) (*Counter, error) {
		g.pass("factory")
		return &Counter{}, nil
	})
	Handle(k, func(_ *Context, c *Counter, m Inc) error { c.N += m.By; return nil })
	HandleRequest(k, func(_ *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
	capture := func(c *Counter) ([]byte, error) { return payload.JSON.Encode(nil, c) }
	restore := func(_ *Context, _ string, data []byte) (*Counter, error) {
		g.pass("restore")
		c := new(Counter)
		return c, payload.JSON.Decode(data, c)
	}
	switch policy {
	case "PreserveState":
		k.PreserveState(capture, restore)
	case "PersistState":
		k.PersistState(capture, restore)
	case "RecreateOnRelocation":
		k.RecreateOnRelocation()
	}
	return k
}

// userCodeNeverStallsItsLink moves object slow/x from host a to host b
// over the in-process transport, with the kind's relocation policy, and
// blocks the user code the move runs at b (blocks: "restore" or
// "factory"). While it blocks, an Ask from a to another object on b —
// over the same link as the move record — is answered; only then is the
// user code released, and the move completes.
func userCodeNeverStallsItsLink(t *testing.T, policy, blocks string) {
	n := NewNetwork(nil)
	g := newUserGate()
	cfg := func(name string) Config {
		c := n.With(Config{Name: name, Logger: quietLogger()})
		if policy == "PersistState" {
			c.StateStore = n.Store().(relocation.StateStore)
		}
		return c
	}
	a := startHost(t, cfg("a"), blockingKind(policy, g), counterKind(newGates()))
	b := startHost(t, cfg("b"), blockingKind(policy, g), counterKind(newGates()))
	t.Cleanup(g.open) // before the hosts close (cleanups run last first): a failed run leaves no user code blocked
	waitViews(t, a, b)
	x, u := Ref{"slow", "x"}, Ref{"counter", "u"}
	if err := Tell(bg, a, x, Inc{By: 5}); err != nil { // activates x on a
		t.Fatal(err)
	}
	if n, err := Ask[Get, int](bg, a, x, Get{}); err != nil || n != 5 {
		t.Fatalf("x on a: %d, %v; want 5", n, err)
	}
	if _, err := Ask[Echo, string](bg, b, u, Echo{S: "here"}); err != nil { // activates u on b
		t.Fatal(err)
	}
	if s, err := Ask[Echo, string](bg, a, u, Echo{S: "a to b"}); err != nil || s != "a to b" { // a knows u is on b
		t.Fatalf("an Ask from a to u on b: %q, %v", s, err)
	}

	g.armed.Store(true)
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(bg, x, "b") }()
	bound := time.NewTimer(30 * time.Second) // a failure bound only
	defer bound.Stop()
	select {
	case what := <-g.started:
		if what != blocks {
			t.Fatalf("the move ran the user's %s at b; want its %s", what, blocks)
		}
	case err := <-moved:
		t.Fatalf("the move ended (%v) before the user's %s ran at b", err, blocks)
	case <-bound.C:
		t.Fatalf("the user's %s did not start at b", blocks)
	}

	// The user's code blocks at b, for as long as the test wants. The
	// link from a to b delivers on: an Ask to another object on b is
	// answered.
	ctx, cancel := context.WithTimeout(bg, 10*time.Second) // a failure bound only
	defer cancel()
	if s, err := Ask[Echo, string](ctx, a, u, Echo{S: "past the move"}); err != nil || s != "past the move" {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("an Ask from a to u on b was not answered while b's %s of the moving object blocked: the link from a to b waits for the user's code (%v)", blocks, err)
		}
		t.Fatalf("an Ask from a to u on b while b's %s blocked: %q, %v", blocks, s, err)
	}
	select {
	case err := <-moved:
		t.Fatalf("the move ended (%v) while the user's %s still blocked at b", err, blocks)
	default:
	}

	g.open()
	select {
	case err := <-moved:
		if err != nil {
			t.Fatalf("the move, once the user's %s returned: %v", blocks, err)
		}
	case <-bound.C:
		t.Fatalf("the move did not end after the user's %s returned", blocks)
	}
	want := 5
	if policy == "RecreateOnRelocation" {
		want = 0 // the factory made the state anew
	}
	if n, err := Ask[Get, int](bg, a, x, Get{}); err != nil || n != want {
		t.Fatalf("x after the move: %d, %v; want %d", n, err, want)
	}
	if b.owners.kinds["slow"].local("x") == nil {
		t.Fatal("after the move, x has no owner on b")
	}
}

// A user's Restore never stalls its link (docs/architecture.md, "Locks":
// user code never runs on a goroutine that a link's delivery needs; a
// slow one stalls its object, never a link): while the Restore of a moving object blocks at
// its target, the link from its source delivers on — an Ask from the
// source host to another object on the target is answered — and the move
// completes once the Restore returns. For PreserveState's Restore and
// PersistState's.
func TestAUsersRestoreNeverStallsItsLink(t *testing.T) {
	for _, policy := range []string{"PreserveState", "PersistState"} {
		t.Run(policy, func(t *testing.T) { userCodeNeverStallsItsLink(t, policy, "restore") })
	}
}

// A user's factory never stalls its link: the same, with the factory that
// rebuilds a RecreateOnRelocation object's state at its target.
func TestAUsersFactoryNeverStallsItsLink(t *testing.T) {
	userCodeNeverStallsItsLink(t, "RecreateOnRelocation", "factory")
}
