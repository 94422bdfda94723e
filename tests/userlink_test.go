package tests

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

// userGate blocks a kind's user code (its Restore, its factory) once
// armed: the code says it started, then waits until the test releases it.
type userGate struct {
	armed   atomic.Bool
	started chan string // what blocked: "restore" or "factory"
	release chan struct{}
	once    sync.Once
}

func (g *userGate) pass(what string) {
	if !g.armed.Load() {
		return
	}
	g.started <- what
	<-g.release
}

func (g *userGate) open() { g.once.Do(func() { close(g.release) }) }

type gatedState struct{ N int }

type gatedAdd struct{ By int }

type gatedGet struct{}

type echo struct{ S string }

type echoState struct{}

// gatedKind is a kind "gated" with the given relocation policy whose
// factory and Restore block on g once it is armed.
func gatedKind(policy string, g *userGate) *actor.Kind[gatedState] {
	k := actor.NewKind("gated", func(*actor.Context, string) (*gatedState, error) {
		g.pass("factory")
		return &gatedState{}, nil
	})
	actor.Handle(k, func(_ *actor.Context, s *gatedState, m gatedAdd) error { s.N += m.By; return nil })
	actor.HandleRequest(k, func(_ *actor.Context, s *gatedState, _ gatedGet) (int, error) { return s.N, nil })
	capture := func(s *gatedState) ([]byte, error) { return payload.JSON.Encode(nil, s) }
	restore := func(_ *actor.Context, _ string, data []byte) (*gatedState, error) {
		g.pass("restore")
		s := new(gatedState)
		return s, payload.JSON.Decode(data, s)
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

func echoKind() *actor.Kind[echoState] {
	k := actor.NewKind("echo", func(*actor.Context, string) (*echoState, error) { return &echoState{}, nil })
	actor.HandleRequest(k, func(_ *actor.Context, _ *echoState, m echo) (string, error) { return m.S, nil })
	return k
}

// A user's Restore never stalls its link, over transport/tcp (the
// in-process transport: actor's TestAUsersRestoreNeverStallsItsLink):
// while the user code a move runs at its target blocks — PreserveState's
// Restore, PersistState's, or the factory of a RecreateOnRelocation
// kind — an Ask from the source host to another object on the target,
// over the same connection as the move record, is answered; the move
// completes once the user code returns.
func TestAUsersRestoreNeverStallsItsLinkOverTCP(t *testing.T) {
	for _, c := range []struct{ policy, blocks string }{
		{"PreserveState", "restore"},
		{"PersistState", "restore"},
		{"RecreateOnRelocation", "factory"},
	} {
		t.Run(c.policy, func(t *testing.T) { userCodeNeverStallsItsLinkOverTCP(t, c.policy, c.blocks) })
	}
}

func userCodeNeverStallsItsLinkOverTCP(t *testing.T, policy, blocks string) {
	net := localnet.New(localnet.Options{})
	g := &userGate{started: make(chan string, 16), release: make(chan struct{})}
	cfg := actor.Config{Transport: tcp.New(tcp.Options{Insecure: true}), Store: net.Store, Membership: net.Membership}
	if policy == "PersistState" {
		cfg.StateStore = net.Store.(relocation.StateStore)
	}
	a, b := startPair(t, cfg, func(h *actor.Host) {
		if err := h.Register(gatedKind(policy, g), echoKind()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(g.open) // before the hosts close (cleanups run last first): a failed run leaves no user code blocked
	ctx := context.Background()
	x, u := actor.Ref{Kind: "gated", ID: "x"}, actor.Ref{Kind: "echo", ID: "u"}
	if err := actor.Tell(ctx, a, x, gatedAdd{By: 5}); err != nil { // activates x on a
		t.Fatal(err)
	}
	if n, err := actor.Ask[gatedGet, int](ctx, a, x, gatedGet{}); err != nil || n != 5 {
		t.Fatalf("x on a: %d, %v; want 5", n, err)
	}
	if _, err := actor.Ask[echo, string](ctx, b, u, echo{S: "here"}); err != nil { // activates u on b
		t.Fatal(err)
	}
	if s, err := actor.Ask[echo, string](ctx, a, u, echo{S: "a to b"}); err != nil || s != "a to b" {
		t.Fatalf("an Ask from a to u on b: %q, %v", s, err)
	}

	g.armed.Store(true)
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(ctx, x, "b") }()
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

	askCtx, cancel := context.WithTimeout(ctx, 10*time.Second) // a failure bound only
	defer cancel()
	if s, err := actor.Ask[echo, string](askCtx, a, u, echo{S: "past the move"}); err != nil || s != "past the move" {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("an Ask from a to u on b was not answered while b's %s of the moving object blocked: the connection from a to b waits for the user's code (%v)", blocks, err)
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
	if n, err := actor.Ask[gatedGet, int](ctx, a, x, gatedGet{}); err != nil || n != want {
		t.Fatalf("x after the move: %d, %v; want %d", n, err, want)
	}
	if loc, err := a.Locate(ctx, x); err != nil || loc.Host != "b" {
		t.Fatalf("x after the move: at %+v, %v; want b", loc, err)
	}
}
