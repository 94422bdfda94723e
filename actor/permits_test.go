package actor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Nothing is admitted without a permit: with the permits all held by queued
// messages, the next send waits; it is never rejected.
func TestPermitsNothingAdmittedWithoutOneAndSaturationWaits(t *testing.T) {
	g := newGates()
	h := startHost(t, Config{MaxQueuedApplicationJobs: 3}, counterKind(g))
	ref := Ref{"counter", "a"}
	if err := Tell(bg, h, ref, Block{Key: "b"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "b") // its permit was returned when the handler started
	for i := 0; i < 3; i++ {
		if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if s := h.Stats(); s.PermitsInUse != 3 || s.QueuedApplication != 3 {
		t.Fatalf("stats %+v; want 3 permits in use by 3 queued messages", s)
	}
	sent := make(chan error, 1)
	go func() { sent <- Tell(bg, h, ref, Inc{By: 10}) }()
	waitFor(t, "the fourth send to wait for a permit", func() bool { return h.Stats().PermitWaiters == 1 })
	select {
	case err := <-sent:
		t.Fatalf("send returned %v while no permit was free; it must wait", err)
	default:
	}
	if s := h.Stats(); s.QueuedApplication != 3 {
		t.Fatalf("%d queued: a message was admitted without a permit", s.QueuedApplication)
	}
	g.release("b")
	if err := <-sent; err != nil {
		t.Fatalf("waiting send = %v, want success once permits free", err)
	}
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 13 {
		t.Fatalf("count %d, %v; want 13", n, err)
	}
	waitFor(t, "permits back", func() bool { return h.Stats().PermitsInUse == 0 })
}

// Waiting for a permit is cancellable and leaves the count unchanged.
func TestPermitsWaitIsCancellableAndLeavesCountUnchanged(t *testing.T) {
	g := newGates()
	l := newLedger()
	h := startHost(t, Config{MaxQueuedApplicationJobs: 1, OnPayloadRelease: l.Observe}, counterKind(g))
	ref := Ref{"counter", "a"}
	Tell(bg, h, ref, Block{Key: "b"})
	g.waitStarted(t, "b")
	Tell(bg, h, ref, Inc{By: 1}) // holds the only permit
	ctx, cancel := context.WithCancel(bg)
	sent := make(chan error, 1)
	go func() { sent <- Tell(ctx, h, ref, Inc{By: 100}) }()
	waitFor(t, "waiter", func() bool { return h.Stats().PermitWaiters == 1 })
	before := h.Stats()
	cancel()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled send = %v", err)
	}
	after := h.Stats()
	if after.PermitsInUse != before.PermitsInUse || after.PermitWaiters != 0 || after.QueuedApplication != before.QueuedApplication {
		t.Fatalf("cancel changed the count: before %+v after %+v", before, after)
	}
	g.release("b")
	if n, _ := Ask[Get, int](bg, h, ref, Get{}); n != 1 {
		t.Fatalf("count %d: the cancelled message ran", n)
	}
	waitFor(t, "all payloads released", func() bool { return l.Total() == int64(h.Stats().Payload.Buffers) })
}

// Replies take no permit: a request admitted before the host saturated gets
// its reply while every permit is in use.
func TestPermitsRepliesProgressWhilePermitsAreExhausted(t *testing.T) {
	g := newGates()
	k := counterKind(g)
	HandleRequest(k, func(ctx *Context, c *Counter, m Wait) (string, error) {
		g.block(ctx, m.Key)
		return "answered", nil
	})
	h := startHost(t, Config{MaxQueuedApplicationJobs: 2}, k)
	got := make(chan error, 1)
	go func() {
		s, err := Ask[Wait, string](bg, h, Ref{"counter", "server"}, Wait{Key: "w"})
		if err == nil && s != "answered" {
			err = errors.New("wrong reply " + s)
		}
		got <- err
	}()
	g.waitStarted(t, "w")
	// Exhaust the permits with messages queued behind a blocked owner.
	Tell(bg, h, Ref{"counter", "full"}, Block{Key: "b"})
	g.waitStarted(t, "b")
	Tell(bg, h, Ref{"counter", "full"}, Inc{By: 1})
	Tell(bg, h, Ref{"counter", "full"}, Inc{By: 1})
	if s := h.Stats(); s.PermitsInUse != 2 {
		t.Fatalf("permits in use %d, want all 2", s.PermitsInUse)
	}
	g.release("w")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reply did not arrive while permits were exhausted")
	}
	g.release("b")
}

type Wait struct{ Key string }
type Relay struct{ To string }

// The permit is returned immediately before the handler's first
// instruction: a handler that sends while the host is saturated gets its
// own message's permit, so its send is admitted (and runs) while the
// handler is still running.
func TestPermitsReturnedBeforeHandlerRunsSoAHandlerCanSendWhenSaturated(t *testing.T) {
	g := newGates()
	k := counterKind(g)
	HandleRequest(k, func(ctx *Context, c *Counter, m Relay) (string, error) {
		if s := ctx.Host().Stats(); s.PermitsInUse != 0 {
			return "", errors.New("the handler's own permit was not returned before it started")
		}
		if err := Tell(ctx, ctx.Host(), Ref{"counter", m.To}, Block{Key: "relayed"}); err != nil {
			return "", err
		}
		// The relayed message must run while we still hold our gate.
		_, started := g.chans("relayed")
		select {
		case <-started:
			return "relayed", nil
		case <-time.After(10 * time.Second):
			return "", errors.New("relayed message did not run while the sender's handler held its gate")
		}
	})
	// One permit: the Relay request holds it until its handler starts.
	h := startHost(t, Config{MaxQueuedApplicationJobs: 1}, k)
	g.release("relayed")
	if s, err := Ask[Relay, string](bg, h, Ref{"counter", "a"}, Relay{To: "b"}); err != nil || s != "relayed" {
		t.Fatalf("relay = %q, %v", s, err)
	}
}

// A handler's sends while no permit is free queue in order behind its
// earlier sends and are admitted as permits free up; the handler is not
// blocked.
func TestInTurnSendsQueueInOrderWithoutBlockingTheHandler(t *testing.T) {
	g := newGates()
	k := counterKind(g)
	type Burst struct {
		To string
		N  int
	}
	var mu sync.Mutex
	var order []int
	type Note struct{ I int }
	Handle(k, func(ctx *Context, c *Counter, m Note) error {
		mu.Lock()
		order = append(order, m.I)
		mu.Unlock()
		return nil
	})
	snapshot := func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), order...) }
	Handle(k, func(ctx *Context, c *Counter, m Burst) error {
		for i := 0; i < m.N; i++ {
			if err := Tell(ctx, ctx.Host(), Ref{"counter", m.To}, Note{I: i}); err != nil {
				return err
			}
		}
		return nil
	})
	h := startHost(t, Config{MaxQueuedApplicationJobs: 2}, k)
	if err := Tell(bg, h, Ref{"counter", "src"}, Burst{To: "sink", N: 200}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "200 notes", func() bool { return len(snapshot()) == 200 })
	for i, v := range snapshot() {
		if v != i {
			t.Fatalf("note %d arrived as %d: in-turn sends reordered", i, v)
		}
	}
}
