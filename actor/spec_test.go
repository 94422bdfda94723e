package actor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// countingJSON is JSON under its own content type, counting decode callbacks.
type countingJSON struct{ decodes atomic.Int64 }

func (c *countingJSON) ContentType() string                      { return "application/x-counted+json" }
func (c *countingJSON) Encode(dst []byte, v any) ([]byte, error) { return payload.JSON.Encode(dst, v) }
func (c *countingJSON) Decode(data []byte, v any) error {
	c.decodes.Add(1)
	return payload.JSON.Decode(data, v)
}

// Spec §9, Ownership and Release: "The payload's close/Dispose or release
// callback is observed after handler completion."
func TestSpec9_ReleaseObservedAfterHandlerCompletion(t *testing.T) {
	g := newGates()
	l := newLedger()
	var handlerDone atomic.Bool
	var releasedEarly atomic.Bool
	cfg := Config{OnPayloadRelease: func(ev payload.ReleaseEvent) {
		if !handlerDone.Load() {
			releasedEarly.Store(true)
		}
		l.Observe(ev)
	}}
	k := NewKind("obj", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m Block) error {
		g.block(ctx, m.Key)
		handlerDone.Store(true)
		return nil
	})
	h := startHost(t, cfg, k)
	if err := Tell(bg, h, Ref{"obj", "1"}, Block{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "k")
	if l.Total() != 0 {
		t.Fatal("payload released while its handler runs")
	}
	g.release("k")
	waitFor(t, "the release", func() bool { return l.Total() == 1 })
	if releasedEarly.Load() {
		t.Fatal("release observed before the handler completed")
	}
}

// Spec §9, Ownership and Release: "Every terminal path — success, rejection,
// exception, timeout, cancellation, and shutdown — executes payload release
// exactly once."
func TestSpec9_EveryTerminalPathReleasesExactlyOnce(t *testing.T) {
	g := newGates()
	l := newLedger()
	h, err := NewHost(Config{
		OnPayloadRelease:         l.Observe,
		ApplicationLimits:        mailboxLimits(2),
		SendTimeout:              20 * time.Millisecond,
		MaxQueuedApplicationJobs: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Register(counterKind(g))
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	ref := Ref{"counter", "x"}
	paths := map[string]int{}

	// success, one-way and request
	if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	paths["success"] = 3 // Inc, Get, and the reply
	// handler error
	if _, err := Ask[Fail, int](bg, h, ref, Fail{}); !errors.Is(err, errFail) {
		t.Fatalf("handler error = %v", err)
	}
	paths["error"] = 1
	// exception (panic)
	if _, err := Ask[Boom, int](bg, h, ref, Boom{}); !errors.Is(err, payload.InternalFailure) {
		t.Fatalf("panic = %v, want InternalFailure", err)
	}
	paths["panic"] = 1
	// rejection: lane full (2 items) while the owner is blocked
	if err := Tell(bg, h, ref, Block{Key: "hold"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "hold")
	Tell(bg, h, ref, Inc{By: 1})
	Tell(bg, h, ref, Inc{By: 1})
	if err := Tell(bg, h, ref, Inc{By: 1}); !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("send to a full lane = %v, want DeadlineExceeded", err)
	}
	paths["rejection"] = 1
	// timeout: a request whose deadline passes while it is queued
	ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
	Tell(bg, h, Ref{"counter", "y"}, Block{Key: "hold"})
	if _, err := Ask[Get, int](ctx, h, Ref{"counter", "y"}, Get{}); !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("queued request past its deadline = %v", err)
	}
	cancel()
	paths["timeout"] = 1
	// cancellation while waiting for room
	ctx, cancel = context.WithCancel(bg)
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	h2done := make(chan error, 1)
	go func() { h2done <- Tell(ctx, h, ref, Inc{By: 1}) }()
	if err := <-h2done; !errors.Is(err, context.Canceled) && !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("cancelled send = %v", err)
	}
	paths["cancellation"] = 1
	// shutdown: queued messages at Close
	Tell(bg, h, Ref{"counter", "z"}, Block{Key: "never"})
	g.waitStarted(t, "never")
	Tell(bg, h, Ref{"counter", "z"}, Inc{By: 1})
	paths["shutdown"] = 1
	go func() { time.Sleep(10 * time.Millisecond); g.release("never"); g.release("hold") }()
	h.Close()
	checkNoHostGoroutines(t)

	l.CheckExactlyOnce(t, h.Stats().Payload.Buffers)
	if h.Stats().Payload.Decodes > uint64(h.Stats().Payload.Buffers) {
		t.Fatal("more decodes than payloads")
	}
}

// Spec §9, Ownership and Release: "The handler does not receive native
// storage or release responsibility." Handlers get decoded values only (the
// handler signatures have no Buffer or Message); a value kept by a handler
// stays intact after the frame is released and its storage reused.
func TestSpec9_HandlerGetsNoNativeStorageOrReleaseResponsibility(t *testing.T) {
	l := newLedger()
	kept := make(chan []byte, 1)
	k := NewKind("keeper", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, b []byte) error {
		select {
		case kept <- b:
		default:
		}
		return nil
	})
	h := startHost(t, Config{OnPayloadRelease: l.Observe,
		Codecs: []CodecRegistration{{Codec: payload.Raw, Select: payload.ForType[[]byte]()}}}, k)
	orig := []byte("the first payload")
	if err := Tell(bg, h, Ref{"keeper", "1"}, orig); err != nil {
		t.Fatal(err)
	}
	got := <-kept
	waitFor(t, "release", func() bool { return l.Total() == 1 })
	for i := 0; i < 100; i++ { // reuse the storage many times over
		Tell(bg, h, Ref{"keeper", "1"}, []byte("XXXXXXXXXXXXXXXXXXXXXXXXXX"))
	}
	waitFor(t, "releases", func() bool { return l.Total() == 101 })
	if string(got) != "the first payload" {
		t.Fatalf("the handler's value changed with the storage: %q", got)
	}
	if l.Count(1) != 1 {
		t.Fatal("the framework did not release the first payload exactly once")
	}
}

// Spec §9, Deserialization Timing and Count: "The codec deserialization
// callback isn't called for a message rejected for queue-full or owner
// mismatch."
func TestSpec9_NoDecodeForMessageRejectedForQueueFullOrOwnerMismatch(t *testing.T) {
	g := newGates()
	codec := &countingJSON{}
	k := NewKind("obj", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m Block) error {
		g.block(ctx, m.Key)
		return nil
	})
	Handle(k, func(ctx *Context, c *Counter, m Inc) error { return nil })
	h := startHost(t, Config{
		ApplicationLimits: mailboxLimits(1),
		SendTimeout:       10 * time.Millisecond,
		Codecs:            []CodecRegistration{{Codec: codec, Select: payload.ForType[Inc]()}},
	}, k)
	ref := Ref{"obj", "1"}
	Tell(bg, h, ref, Block{Key: "b"})
	g.waitStarted(t, "b")
	if err := Tell(bg, h, ref, Inc{By: 1}); err != nil { // fills the lane
		t.Fatal(err)
	}
	if err := Tell(bg, h, ref, Inc{By: 2}); !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("queue-full send = %v", err)
	}
	if n := codec.decodes.Load(); n != 0 {
		t.Fatalf("%d decodes; a rejected (or queued) message must not be decoded", n)
	}
	// Owner mismatch: the owner is gone (closed) when the queued message
	// would run; it ends without decoding.
	h.Close()
	g.release("b")
	if n := codec.decodes.Load(); n != 0 {
		t.Fatalf("%d decodes after the owner closed", n)
	}
}

// Spec §9, Deserialization Timing and Count: "While an earlier handler
// retains the same execution authority, the next message's codec
// deserialization callback isn't called."
func TestSpec9_NoDecodeOfNextMessageWhileEarlierHandlerHoldsTheGate(t *testing.T) {
	g := newGates()
	codec := &countingJSON{}
	k := NewKind("obj", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m Block) error {
		g.block(ctx, m.Key)
		return nil
	})
	ran := make(chan struct{}, 1)
	Handle(k, func(ctx *Context, c *Counter, m Inc) error { ran <- struct{}{}; return nil })
	h := startHost(t, Config{Codecs: []CodecRegistration{{Codec: codec, Select: payload.ForType[Inc]()}}}, k)
	ref := Ref{"obj", "1"}
	Tell(bg, h, ref, Block{Key: "b"})
	g.waitStarted(t, "b")
	Tell(bg, h, ref, Inc{By: 1})
	time.Sleep(20 * time.Millisecond) // give a wrong implementation the chance to decode early
	if n := codec.decodes.Load(); n != 0 {
		t.Fatalf("next message decoded %d times while the gate was held", n)
	}
	g.release("b")
	<-ran
	if n := codec.decodes.Load(); n != 1 {
		t.Fatalf("decodes after the gate opened = %d, want 1", n)
	}
}

// Spec §9, Deserialization Timing and Count: "The codec deserialization
// callback isn't called for a message held during a move until commit
// replay or abort resumption."
//
// The move is stopped between the target's restore and the source's
// acceptance of relay-ready (the RelayReady record is lost): the source is
// sealed with its queue captured, the target holds its temporary queue.
// Messages then sent through either host are held, undecoded. They are
// decoded — once each — only when the move commits (replay at the target)
// or aborts (resumption at the source).
func TestSpec9_HeldDuringMoveNotDecodedUntilCommitReplayOrAbortResumption(t *testing.T) {
	for _, outcome := range []string{"commit", "abort"} {
		t.Run(outcome, func(t *testing.T) {
			codec := &countingJSON{}
			n := NewNetwork(nil)
			g := newGates()
			var hs []*Host
			for _, name := range []string{"a", "b"} {
				hs = append(hs, startHost(t, Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger(), CutoverWait: time.Minute,
					Codecs: []CodecRegistration{{Codec: codec, Select: payload.ForType[Inc]()}}}, movableKind(g)))
			}
			a, b := hs[0], hs[1]
			ref := Ref{"counter", "held"}
			if err := Tell(bg, a, ref, Block{Key: "gate1"}); err != nil {
				t.Fatal(err)
			}
			g.waitStarted(t, "gate1")
			Tell(bg, a, ref, Block{Key: "gate2"}) // busy again when the seal comes
			for i := 0; i < 3; i++ {              // queued: captured by the move
				Tell(bg, a, ref, Inc{By: 1})
			}
			relayReady, preflighted, gate2Running := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var once, oncePre atomic.Bool
			n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
				if _, ok := rec.(*relocation.PreflightReply); ok && oncePre.CompareAndSwap(false, true) {
					// The reply (and so the seal) waits until gate2 runs, so
					// that the seal comes at gate2's turn boundary and the
					// Incs behind it are captured. (Blocking b's link
					// goroutine briefly is harmless here.)
					select {
					case <-gate2Running:
					case <-time.After(10 * time.Second):
					}
					close(preflighted)
				}
				if _, ok := rec.(*relocation.RelayReady); ok && once.CompareAndSwap(false, true) {
					close(relayReady)
					return false
				}
				return true
			})
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			moved := make(chan error, 1)
			go func() { moved <- a.Relocate(ctx, ref, "b") }()
			waitFor(t, "the move to be posted", func() bool { return a.Stats().QueuedLifecycle >= 1 })
			g.release("gate1") // the move starts (preflight) at this turn boundary
			g.waitStarted(t, "gate2")
			close(gate2Running)
			select {
			case <-preflighted:
			case <-time.After(10 * time.Second):
				t.Fatal("no preflight")
			}
			waitFor(t, "the seal to be posted", func() bool { return a.Stats().QueuedLifecycle >= 1 })
			g.release("gate2") // the seal comes at this turn boundary
			select {
			case <-relayReady:
			case <-time.After(10 * time.Second):
				t.Fatal("the move did not reach relay-ready")
			}
			for i := 0; i < 2; i++ {
				Tell(bg, a, ref, Inc{By: 1}) // held at the sealed source
				Tell(bg, b, ref, Inc{By: 1}) // held in the target's temporary queue
			}
			waitFor(t, "the messages to be held", func() bool {
				return b.Stats().QueuedApplication >= 2 && a.Stats().QueuedApplication >= 2
			})
			if d := codec.decodes.Load(); d != 0 {
				t.Fatalf("%d messages decoded while held during the move", d)
			}
			n.SetRecordHook(nil)
			switch outcome {
			case "commit":
				// The link goes down and up: the source resends Prepare;
				// relay-ready is answered again.
				n.Break("a", "b")
				n.Heal("a", "b")
				if err := <-moved; err != nil {
					t.Fatalf("move: %v", err)
				}
			case "abort":
				cancel()
				if err := <-moved; err == nil {
					t.Fatal("the move committed; want an abort")
				}
			}
			// (On an abort, the messages held at the target come back to
			// the source by Message Follow, after the abort.)
			waitFor(t, "all seven messages to run", func() bool {
				got, err := Ask[Get, int](bg, a, ref, Get{})
				if err != nil || got > 7 {
					t.Fatalf("count = %d, %v; want 7", got, err)
				}
				return got == 7
			})
			if d := codec.decodes.Load(); d != 7 {
				t.Fatalf("%d decodes after the %s, want 7 (each message once, when it ran)", d, outcome)
			}
			host := map[string]*Host{"commit": b, "abort": a}[outcome]
			if host.Stats().OwnersActive != 1 {
				t.Fatalf("after the %s the object does not run on %s", outcome, host.Name())
			}
		})
	}
}
