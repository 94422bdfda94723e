package actor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Contract tests of issue 11: the same errors and deadlines wherever an
// object lives. Each runs with the object on the sender's host and on
// another host of the same network.

// RelayAsk: the relay kind asks another object from its handler.
type RelayAsk struct{ To, Key string }

// contractEnv is a sending host and the host the target objects live on:
// the same host, or another one of a network. Its counter kind has a Wait
// handler that blocks on g (counted in seen), its relay kind asks a counter
// from a handler (the inner Ask's error goes to relayErr), and its channel
// "news" counts what is published to it (published).
type contractEnv struct {
	from, owner *Host
	g           *gates
	seen        atomic.Int64
	published   atomic.Int64
	relayErr    chan error
}

func newContractEnv(t *testing.T, remote bool) *contractEnv {
	e := &contractEnv{g: newGates(), relayErr: make(chan error, 1)}
	kinds := func() []Registrable {
		k := counterKind(e.g)
		HandleRequest(k, func(ctx *Context, c *Counter, m Wait) (string, error) {
			e.seen.Add(1)
			e.g.block(ctx, m.Key)
			return "late", nil
		})
		r := NewKind("relay", func(ctx *Context, id string) (*Counter, error) { return &Counter{}, nil })
		HandleRequest(r, func(ctx *Context, c *Counter, m RelayAsk) (string, error) {
			_, err := Ask[Wait, string](ctx, ctx.Host(), Ref{"counter", m.To}, Wait{Key: m.Key})
			e.relayErr <- err
			return "", err
		})
		news := NewChannel("news")
		Subscribe(news, func(ctx *Context, m Inc) error { e.published.Add(1); return nil })
		Serve(news, func(ctx *Context, _ Get) (int, error) { return int(e.published.Load()), nil })
		return []Registrable{k, r, news}
	}
	cfg := Config{Logger: quietLogger(), RequestTimeout: time.Hour}
	if !remote {
		e.from = startHost(t, cfg, kinds()...)
		e.owner = e.from
		return e
	}
	n := NewNetwork(nil)
	c1, c2 := cfg, cfg
	c1, c2 = n.With(c1), n.With(c2)
	c1.Name, c2.Name = "from", "owner"
	e.from, e.owner = startHost(t, c1, kinds()...), startHost(t, c2, kinds()...)
	return e
}

// forEachPlacement runs a contract test with its objects on the sender's
// host and on another host.
func forEachPlacement(t *testing.T, run func(t *testing.T, e *contractEnv)) {
	for _, remote := range []bool{false, true} {
		name := "same host"
		if remote {
			name = "other host"
		}
		t.Run(name, func(t *testing.T) { run(t, newContractEnv(t, remote)) })
	}
}

// activateOn makes object ref live on host h (an object activates on the
// host that sends its first message).
func activateOn(t *testing.T, h *Host, ref Ref) {
	t.Helper()
	if _, err := Ask[Get, int](bg, h, ref, Get{}); err != nil {
		t.Fatal(err)
	}
}

func TestSendWithContextDoneBeforeSendSendsNothing(t *testing.T) {
	forEachPlacement(t, func(t *testing.T, e *contractEnv) {
		from, owner := e.from, e.owner
		to := Ref{"counter", "a"}
		activateOn(t, owner, to)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		for i := 0; i < 6; i++ {
			if err := Tell(ctx, from, to, Inc{By: 1}); !errors.Is(err, context.Canceled) {
				t.Fatalf("Tell with a cancelled context: %v", err)
			}
			if _, err := Ask[Get, int](ctx, from, to, Get{}); !errors.Is(err, context.Canceled) {
				t.Fatalf("Ask with a cancelled context: %v", err)
			}
			if _, err := Ask[Wait, string](ctx, from, to, Wait{Key: "never"}); !errors.Is(err, context.Canceled) {
				t.Fatalf("Ask with a cancelled context: %v", err)
			}
			if _, err := from.Deliver(ctx, to, Encoded{Type: TypeName[Inc](), ContentType: "application/json", Body: []byte(`{"By":1}`)}); !errors.Is(err, context.Canceled) {
				t.Fatalf("Deliver with a cancelled context: %v", err)
			}
			if err := Publish(ctx, from, "news", Inc{By: 1}); !errors.Is(err, context.Canceled) {
				t.Fatalf("Publish with a cancelled context: %v", err)
			}
			if _, err := AskChannel[Get, int](ctx, from, "news", Get{}); !errors.Is(err, context.Canceled) {
				t.Fatalf("AskChannel with a cancelled context: %v", err)
			}
		}
		expired, cancel2 := context.WithDeadline(bg, time.Now().Add(-time.Second))
		defer cancel2()
		if err := Tell(expired, from, to, Inc{By: 1}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Tell with an expired context: %v", err)
		}
		n, err := Ask[Get, int](bg, from, to, Get{})
		if err != nil || n != 0 {
			t.Fatalf("counter %d, %v: a send whose context was done ran", n, err)
		}
		if s := e.seen.Load(); s != 0 {
			t.Fatalf("the Wait handler ran %d times", s)
		}
		if p, err := AskChannel[Get, int](bg, from, "news", Get{}); err != nil || p != 0 || e.published.Load() != 0 {
			t.Fatalf("published %d (channel says %d, %v): a publish whose context was done ran", e.published.Load(), p, err)
		}
	})
}

func TestTimeoutMatchesContextDeadlineExceededAndKind(t *testing.T) {
	forEachPlacement(t, func(t *testing.T, e *contractEnv) {
		from, owner, g := e.from, e.owner, e.g
		to := Ref{"counter", "slow"}
		activateOn(t, owner, to)
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		_, err := Ask[Wait, string](ctx, from, to, Wait{Key: "t"})
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, payload.DeadlineExceeded) {
			t.Fatalf("Ask past its deadline: %v; want context.DeadlineExceeded and berth's DeadlineExceeded", err)
		}
		g.release("t")
		if !errors.Is(ErrRequestTimeout, context.DeadlineExceeded) || !errors.Is(ErrSendTimeout, context.DeadlineExceeded) {
			t.Fatal("ErrRequestTimeout and ErrSendTimeout must match context.DeadlineExceeded")
		}
	})
}

func TestCancellationMatchesContextCanceledAndKind(t *testing.T) {
	forEachPlacement(t, func(t *testing.T, e *contractEnv) {
		from, owner, g := e.from, e.owner, e.g
		to := Ref{"counter", "slow"}
		activateOn(t, owner, to)
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() {
			_, err := Ask[Wait, string](ctx, from, to, Wait{Key: "c"})
			done <- err
		}()
		g.waitStarted(t, "c")
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) || !errors.Is(err, payload.DeadlineExceeded) {
			t.Fatalf("Ask cancelled while waiting: %v; want context.Canceled and berth's DeadlineExceeded", err)
		}
		g.release("c")
	})
}

func TestHandlerAskInheritsTheHandledMessagesDeadline(t *testing.T) {
	forEachPlacement(t, func(t *testing.T, e *contractEnv) {
		from, owner, g, relayErr := e.from, e.owner, e.g, e.relayErr
		activateOn(t, owner, Ref{"counter", "b"}) // the relay (on from) asks b on owner
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		if _, err := Ask[RelayAsk, string](ctx, from, Ref{"relay", "r"}, RelayAsk{To: "b", Key: "inner"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("outer Ask: %v", err)
		}
		// RequestTimeout is an hour: only the inherited deadline ends the
		// relay's inner Ask.
		select {
		case err := <-relayErr:
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrRequestTimeout) {
				t.Fatalf("the relay's inner Ask: %v, want ErrRequestTimeout", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the relay's inner Ask did not inherit the deadline of the message it handled")
		}
		g.release("inner")
	})
}

func TestLocateFindsTheOwnerFromAnyHost(t *testing.T) {
	n := NewNetwork(nil)
	hs := map[string]*Host{}
	for _, name := range []string{"a", "b", "c"} {
		hs[name] = startHost(t, Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	}
	ref := Ref{"seq", "x"}
	if _, err := hs["a"].Locate(bg, ref); !errors.Is(err, ErrNotActive) || !errors.Is(err, payload.NotFound) {
		t.Fatalf("Locate before activation: %v, want ErrNotActive", err)
	}
	if err := Tell(bg, hs["b"], ref, SeqMsg{Seq: 1}); err != nil { // activates on b
		t.Fatal(err)
	}
	var first Location
	for name, h := range hs {
		loc, err := h.Locate(bg, ref)
		if err != nil || loc.Host != "b" {
			t.Fatalf("Locate from %s: %+v, %v; want host b", name, loc, err)
		}
		first = loc
	}
	if err := hs["b"].Relocate(bg, ref, "c"); err != nil {
		t.Fatal(err)
	}
	for name, h := range hs {
		loc, err := h.Locate(bg, ref)
		if err != nil || loc.Host != "c" {
			t.Fatalf("Locate from %s after the move: %+v, %v; want host c", name, loc, err)
		}
		if loc.ObjectGeneration != first.ObjectGeneration || loc.OwnerGeneration != first.OwnerGeneration+1 {
			t.Fatalf("generations after the move %+v, before %+v: object generation kept, owner generation +1", loc, first)
		}
	}
	if _, err := hs["a"].Locate(bg, Ref{"nokind", "x"}); !errors.Is(err, payload.NotFound) || errors.Is(err, ErrNotActive) {
		t.Fatalf("Locate of an unknown kind: %v", err)
	}
	alone := startHost(t, Config{Name: "alone", Logger: quietLogger()}, seqKind())
	if err := Tell(bg, alone, ref, SeqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if loc, err := alone.Locate(bg, ref); err != nil || loc.Host != "alone" {
		t.Fatalf("Locate on a standalone host: %+v, %v", loc, err)
	}
}

func TestRelocateToTheHostThatOwnsItSaysSo(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	ref := Ref{"seq", "x"}
	if err := Tell(bg, a, ref, SeqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	err := a.Relocate(bg, ref, "a")
	if payload.KindOf(err) != payload.InvalidOperation || !strings.Contains(err.Error(), "already lives on a") {
		t.Fatalf("Relocate to its own host: %v", err)
	}
	if err := a.Relocate(bg, ref, "zz"); payload.KindOf(err) != payload.NotFound || !strings.Contains(err.Error(), "no host named zz") {
		t.Fatalf("Relocate to an unknown host: %v", err)
	}
}

var (
	errOutOfStock   = errors.New("out of stock")
	errUnregistered = errors.New("not registered")
)

func init() { RegisterError("test.out_of_stock", errOutOfStock) }

// Buy makes the shop kind fail in the way named by How.
type Buy struct{ How string }

func shopKind() *Kind[Counter] {
	k := NewKind("shop", func(ctx *Context, id string) (*Counter, error) { return &Counter{}, nil })
	HandleRequest(k, func(ctx *Context, c *Counter, m Buy) (int, error) {
		switch m.How {
		case "sentinel":
			return 0, fmt.Errorf("buying 3 apples: %w", errOutOfStock)
		case "unregistered":
			return 0, fmt.Errorf("wrapped: %w", errUnregistered)
		case "kind":
			return 0, payload.NewError(payload.Rejected, "shop", "closed on sundays")
		case "panic":
			panic("the till broke")
		}
		return 1, nil
	})
	return k
}

func TestHandlerErrorIsTheSameWhereverItRan(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, shopKind())
	b := startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, shopKind())
	ref := Ref{"shop", "s"}
	if _, err := Ask[Buy, int](bg, a, ref, Buy{}); err != nil { // activates on a
		t.Fatal(err)
	}
	for _, c := range []struct {
		how     string
		kind    payload.Kind
		matches []error
		not     []error
	}{
		{"sentinel", payload.InternalFailure, []error{errOutOfStock}, []error{errUnregistered}},
		{"unregistered", payload.InternalFailure, nil, []error{errUnregistered, errOutOfStock}},
		{"kind", payload.Rejected, []error{payload.Rejected}, []error{errOutOfStock}},
		{"panic", payload.InternalFailure, []error{payload.InternalFailure}, nil},
	} {
		_, local := Ask[Buy, int](bg, a, ref, Buy{How: c.how})
		_, remote := Ask[Buy, int](bg, b, ref, Buy{How: c.how})
		for side, err := range map[string]error{"same host": local, "other host": remote} {
			if err == nil {
				t.Fatalf("%s, %s: no error", c.how, side)
			}
			if payload.KindOf(err) != c.kind || !errors.Is(err, c.kind) {
				t.Errorf("%s, %s: %v has kind %v, want %v", c.how, side, err, payload.KindOf(err), c.kind)
			}
			for _, s := range c.matches {
				if !errors.Is(err, s) {
					t.Errorf("%s, %s: errors.Is(%v, %v) = false", c.how, side, err, s)
				}
			}
			for _, s := range c.not {
				if errors.Is(err, s) {
					t.Errorf("%s, %s: errors.Is(%v, %v) = true: an unregistered error must not match on one host only", c.how, side, err, s)
				}
			}
		}
		if local.Error() != remote.Error() {
			t.Errorf("%s: message %q on the same host, %q on another", c.how, local.Error(), remote.Error())
		}
	}
	_, err := Ask[Buy, int](bg, b, ref, Buy{How: "sentinel"})
	if err.Error() != "buying 3 apples: out of stock" {
		t.Errorf("the handler's message changed: %q", err.Error())
	}
}

// Blob is a message of any size.
type Blob struct{ Data string }

func blobKind(ran *atomic.Int64) *Kind[Counter] {
	k := NewKind("blob", func(ctx *Context, id string) (*Counter, error) { return &Counter{}, nil })
	HandleRequest(k, func(ctx *Context, c *Counter, m Blob) (int, error) { ran.Add(1); return len(m.Data), nil })
	return k
}

func TestOversizedMessageIsRefusedWhereverTheObjectLives(t *testing.T) {
	small := mailboxLimits(1024)
	small.Bytes = 4096
	big := strings.Repeat("x", 8000)
	for _, c := range []struct {
		name       string
		senderLane mailboxLimitsT // the receiver always has the small lane
		remote     bool
	}{
		{"same host", small, false},
		{"other host, same limits", small, true},
		{"other host, sender with larger lanes", mailboxLimitsT{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ran atomic.Int64
			n := NewNetwork(nil)
			owner := startHost(t, Config{Name: "owner", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger(), ApplicationLimits: small}, blobKind(&ran))
			from := owner
			if c.remote {
				from = startHost(t, Config{Name: "from", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger(), ApplicationLimits: c.senderLane}, blobKind(&ran))
			}
			ref := Ref{"blob", "b"}
			if _, err := Ask[Blob, int](bg, owner, ref, Blob{Data: "small"}); err != nil { // activates on owner
				t.Fatal(err)
			}
			if _, err := Ask[Blob, int](bg, from, ref, Blob{Data: big}); !errors.Is(err, payload.CapacityExceeded) {
				t.Fatalf("Ask of a message larger than the lane: %v, want CapacityExceeded", err)
			}
			// A Tell too: the sender hears of it wherever the object lives,
			// also when its own lanes would take the message.
			if err := Tell(bg, from, ref, Blob{Data: big}); !errors.Is(err, payload.CapacityExceeded) {
				t.Fatalf("Tell of a message larger than the lane: %v, want CapacityExceeded", err)
			}
			if got, err := Ask[Blob, int](bg, from, ref, Blob{Data: "ok"}); err != nil || got != 2 {
				t.Fatalf("after the refusals: %d, %v", got, err)
			}
			if n := ran.Load(); n != 2 {
				t.Fatalf("the handler ran %d times, want 2 (only the small messages)", n)
			}
		})
	}
}

func TestDrainWithNowhereToGoRefusesAndKeepsServing(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	ref := Ref{"seq", "x"}
	if err := Tell(bg, a, ref, SeqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Drain(bg); !errors.Is(err, payload.Unavailable) || !strings.Contains(err.Error(), "nowhere to go") {
		t.Fatalf("Drain of the only host: %v, want Unavailable (nowhere to go)", err)
	}
	if s := a.DrainState(); s != Serving {
		t.Fatalf("after the refused drain the host is %v, want serving", s)
	}
	if got, err := Ask[GetSeqs, []int](bg, a, ref, GetSeqs{}); err != nil || len(got) != 1 {
		t.Fatalf("the object after the refused drain: %v, %v; want its state kept", got, err)
	}
	b := startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	if err := a.Drain(bg); err != nil {
		t.Fatalf("Drain with another host: %v", err)
	}
	if got, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{}); err != nil || len(got) != 1 {
		t.Fatalf("the object after the drain: %v, %v; want its state moved", got, err)
	}
}

func TestStopOnAHostWithPeersMovesItsObjectsUnlessConfiguredToDeactivate(t *testing.T) {
	for _, deactivate := range []bool{false, true} {
		t.Run(fmt.Sprintf("StopDeactivates=%v", deactivate), func(t *testing.T) {
			n := NewNetwork(nil)
			a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger(), StopDeactivates: deactivate}, seqKind())
			b := startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
			ref := Ref{"seq", "x"}
			for i := 1; i <= 3; i++ {
				if err := Tell(bg, a, ref, SeqMsg{Seq: i}); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Stop(bg); err != nil {
				t.Fatal(err)
			}
			got, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{})
			if err != nil {
				t.Fatal(err)
			}
			if want := 3; deactivate {
				if len(got) != 0 {
					t.Fatalf("StopDeactivates: the object kept %v, want a fresh activation", got)
				}
			} else if len(got) != want {
				t.Fatalf("Stop with a peer: the object has %v, want its state moved (3 messages)", got)
			}
		})
	}
	// Alone on the network: nowhere to go, Stop deactivates (no error).
	n := NewNetwork(nil)
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	if err := Tell(bg, a, Ref{"seq", "x"}, SeqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(bg); err != nil {
		t.Fatalf("Stop of the only host: %v", err)
	}
}

// frailKind is seqKind whose restore fails while failRestore is set.
func frailKind(failRestore *atomic.Bool) *Kind[SeqState] {
	k := NewKind("seq", func(*Context, string) (*SeqState, error) { return &SeqState{}, nil })
	Handle(k, func(ctx *Context, s *SeqState, m SeqMsg) error { s.Seqs = append(s.Seqs, m.Seq); return nil })
	HandleRequest(k, func(ctx *Context, s *SeqState, _ GetSeqs) ([]int, error) { return s.Seqs, nil })
	k.PreserveState(func(s *SeqState) ([]byte, error) { return payload.JSON.Encode(nil, s) },
		func(_ *Context, _ string, data []byte) (*SeqState, error) {
			if failRestore.Load() {
				return nil, errors.New("restore refused")
			}
			s := new(SeqState)
			return s, payload.JSON.Decode(data, s)
		})
	return k
}

// A move whose restore fails aborts; messages the would-be target sent to
// the object meanwhile (they waited in its temporary queue) run at the
// source promptly, before the messages that target sends afterwards.
func TestAbortedMoveRunsTheTargetsMessagesPromptlyAndInOrder(t *testing.T) {
	var failRestore atomic.Bool
	failRestore.Store(true)
	n := NewNetwork(nil)
	cfg := Config{Logger: quietLogger(), RequestTimeout: time.Hour}
	ca, cb := cfg, cfg
	ca, cb = n.With(ca), n.With(cb)
	ca.Name, cb.Name = "a", "b"
	a, b := startHost(t, ca, frailKind(&failRestore)), startHost(t, cb, frailKind(&failRestore))
	ref := Ref{"seq", "x"}
	if err := Tell(bg, a, ref, SeqMsg{Seq: 1}); err != nil { // lives on a
		t.Fatal(err)
	}
	// Its state exists before the move: an object whose first turn has not
	// run yet has no state to restore, and its target runs the factory.
	if got, err := Ask[GetSeqs, []int](bg, a, ref, GetSeqs{}); err != nil || fmt.Sprint(got) != "[1]" {
		t.Fatalf("before the move the object ran %v, %v; want [1]", got, err)
	}
	chunk, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		if _, ok := rec.(*relocation.Chunk); ok && to == "b" && once.CompareAndSwap(false, true) {
			close(chunk) // b holds the temporary queue now
			<-release
		}
		return true
	})
	var releaseOnce atomic.Bool
	free := func() {
		if releaseOnce.CompareAndSwap(false, true) {
			close(release)
		}
	}
	t.Cleanup(free)
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(bg, ref, "b") }()
	<-chunk
	waitFor(t, "b to hold the temporary queue", func() bool { return b.owners.kinds["seq"].local("x") != nil })
	// Sent from the would-be target while the move is under way: they wait
	// in its temporary queue.
	for i := 2; i <= 4; i++ {
		if err := Tell(bg, b, ref, SeqMsg{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	asked := make(chan error, 1)
	go func() {
		_, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{})
		asked <- err
	}()
	waitFor(t, "b's messages to wait in the temporary queue", func() bool { return b.Stats().QueuedApplication >= 4 })
	free()
	if err := <-moved; !errors.Is(err, payload.Unavailable) {
		t.Fatalf("Relocate with a failing restore = %v, want Unavailable (aborted)", err)
	}
	for i := 5; i <= 7; i++ { // after the abort
		if err := Tell(bg, b, ref, SeqMsg{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	// Promptly: well before RequestTimeout (an hour here) or any 30 s
	// default; a stuck message would hold this Ask behind it.
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	select {
	case err := <-asked:
		if err != nil {
			t.Fatalf("the Ask sent during the move: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the Ask sent to the would-be target during the aborted move is stuck")
	}
	got, err := Ask[GetSeqs, []int](ctx, b, ref, GetSeqs{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("the object ran %v, want [1 2 3 4 5 6 7] (nothing lost, stuck or out of order)", got)
	}
	// The gauge drops when the discarded owner's actor has stopped, which
	// happens asynchronously.
	waitFor(t, "the discarded owner on b to stop", func() bool { return b.Stats().OwnersActive == 0 })
	if loc, err := b.Locate(bg, ref); err != nil || loc.Host != "a" || a.Stats().OwnersActive != 1 {
		t.Fatalf("after the abort the object is at %+v (%v), a has %d owners; want it still on a", loc, err, a.Stats().OwnersActive)
	}
}

// Relocate works from any host: the owner's host is asked to move the
// object, with the same result and the same errors as on the owner's host.
func TestRelocateFromAnyHostMovesTheObjectWithTheSameResultAndErrors(t *testing.T) {
	n := NewNetwork(nil)
	start := func(name, version string) *Host {
		return startHost(t, Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger(), AppVersion: version}, seqKind())
	}
	a, b, c := start("a", "v2"), start("b", "v2"), start("c", "v2")
	start("other-version", "v1")
	ref := Ref{"seq", "x"}
	for i := 1; i <= 3; i++ {
		if err := Tell(bg, a, ref, SeqMsg{Seq: i}); err != nil { // lives on a
			t.Fatal(err)
		}
	}
	// Asked from c, a host that has nothing to do with the object.
	if err := c.Relocate(bg, ref, "b"); err != nil {
		t.Fatalf("Relocate from a third host: %v", err)
	}
	if loc, err := c.Locate(bg, ref); err != nil || loc.Host != "b" {
		t.Fatalf("after the move Locate = %+v, %v; want b", loc, err)
	}
	if got, err := Ask[GetSeqs, []int](bg, c, ref, GetSeqs{}); err != nil || fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("the object after the move = %v, %v; want its state [1 2 3]", got, err)
	}
	// Asked from the target itself: the object comes to the caller.
	if err := a.Relocate(bg, ref, "a"); err != nil {
		t.Fatalf("Relocate to the calling host: %v", err)
	}
	if loc, err := b.Locate(bg, ref); err != nil || loc.Host != "a" {
		t.Fatalf("after moving it to the caller Locate = %+v, %v; want a", loc, err)
	}
	// The same errors wherever Relocate is called.
	for _, from := range []*Host{a, c} {
		for _, tc := range []struct {
			to   string
			ref  Ref
			want error
		}{
			{"a", ref, payload.InvalidOperation},          // it already lives there
			{"other-version", ref, payload.Rejected},      // the preflight refused
			{"nowhere", ref, payload.NotFound},            // no such host
			{"b", Ref{"seq", "never-sent"}, ErrNotActive}, // not active on any host
		} {
			err := from.Relocate(bg, tc.ref, tc.to)
			if !errors.Is(err, tc.want) {
				t.Errorf("Relocate(%v → %s) from %s = %v, want %v", tc.ref, tc.to, from.Name(), err, tc.want)
			}
			if tc.want == payload.InvalidOperation && (!errors.Is(err, ErrAlreadyThere) || !strings.Contains(fmt.Sprint(err), "already lives on a")) {
				t.Errorf("Relocate to the owner from %s says %q; want it to say the object already lives there", from.Name(), err)
			}
		}
	}
	if got, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{}); err != nil || fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("the object after the refusals = %v, %v; want it unchanged on a", got, err)
	}
}

// A remote Relocate whose context ends before the target acknowledged the
// move aborts it at the owner's host, as a local one does: the object stays.
func TestRelocateFromAnotherHostIsAbortedWhenItsContextEnds(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	c := startHost(t, Config{Name: "c", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, seqKind())
	ref := Ref{"seq", "x"}
	if err := Tell(bg, a, ref, SeqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	preflight, release := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	var once atomic.Bool
	n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		if _, ok := rec.(*relocation.PreflightReply); ok && once.CompareAndSwap(false, true) {
			close(preflight)
			<-release
		}
		return true
	})
	ctx, cancel := context.WithCancel(bg)
	res := make(chan error, 1)
	go func() { res <- c.Relocate(ctx, ref, "b") }()
	<-preflight
	cancel()
	err := <-res
	waitFor(t, "a to end the move it ran for c", func() bool {
		a.moves.remote.mu.Lock()
		defer a.moves.remote.mu.Unlock()
		return len(a.moves.remote.serving) == 0
	})
	free()
	if !errors.Is(err, context.Canceled) || !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("cancelled remote Relocate = %v, want context.Canceled", err)
	}
	waitFor(t, "the aborted move to end at a", func() bool { return len(a.moves.allMoves()) == 0 })
	if loc, err := c.Locate(bg, ref); err != nil || loc.Host != "a" {
		t.Fatalf("after the cancelled move Locate = %+v, %v; want it still on a", loc, err)
	}
	if got, err := Ask[GetSeqs, []int](bg, c, ref, GetSeqs{}); err != nil || fmt.Sprint(got) != "[1]" {
		t.Fatalf("the object after the aborted move = %v, %v", got, err)
	}
}
