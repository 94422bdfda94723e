package actor

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

func TestConfigZeroValueWorksAndBadFieldsAreNamed(t *testing.T) {
	h, err := NewHost(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if h.cfg.MaxQueuedApplicationJobs != DefaultMaxQueuedApplicationJobs() || h.cfg.MaxRequestsInFlight != 4096 ||
		h.cfg.SendTimeout != time.Second || h.cfg.GapTimeout != DefaultGapTimeout || h.cfg.StoreTimeout != DefaultStoreTimeout ||
		h.cfg.TakeoverGapTimeout != DefaultTakeoverGapTimeout ||
		!strings.HasPrefix(h.Name(), "host-") {
		t.Fatalf("defaults not applied: %+v", h.cfg)
	}
	h.Close()
	_, err = NewHost(Config{SendTimeout: -1, MaxRequestsInFlight: -2, GapTimeout: -3, StoreTimeout: -4})
	if !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("bad config = %v; want InvalidOperation", err)
	}
	for _, field := range []string{"SendTimeout", "MaxRequestsInFlight", "GapTimeout", "StoreTimeout"} {
		if !strings.Contains(err.Error(), "Config."+field) {
			t.Fatalf("bad config = %v; want it to name Config.%s", err, field)
		}
	}
	_, err = NewHost(Config{GapTimeout: time.Second, TakeoverGapTimeout: 2 * time.Second})
	if !errors.Is(err, payload.InvalidOperation) || !strings.Contains(err.Error(), "Config.TakeoverGapTimeout") {
		t.Fatalf("a takeover gap wait longer than the gap wait = %v; want InvalidOperation naming Config.TakeoverGapTimeout", err)
	}
	h, err = NewHost(Config{GapTimeout: 100 * time.Millisecond})
	if err != nil || h.cfg.TakeoverGapTimeout != 100*time.Millisecond {
		t.Fatalf("a gap wait below the default takeover wait: %v, takeover wait %v; want it capped to the gap wait", err, h.cfg.TakeoverGapTimeout)
	}
	h.Close()
}

func TestRegistrationMistakesFailStartNamingKindAndType(t *testing.T) {
	k := NewKind("dup", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(*Context, *Counter, Inc) error { return nil })
	Handle(k, func(*Context, *Counter, Inc) error { return nil })
	h, _ := NewHost(Config{})
	defer h.Close()
	h.Register(k, NewKind[Counter]("", nil))
	err := h.Start()
	if !errors.Is(err, payload.AlreadyExists) || !strings.Contains(err.Error(), "kind dup") || !strings.Contains(err.Error(), "actor.Inc") {
		t.Fatalf("Start = %v; want it to name kind dup and type actor.Inc", err)
	}
	if !strings.Contains(err.Error(), "empty kind name") || !strings.Contains(err.Error(), "nil factory") {
		t.Fatalf("Start = %v; want the empty name and nil factory reported too", err)
	}

	h2, _ := NewHost(Config{})
	defer h2.Close()
	h2.Register(counterKind(newGates()), counterKind(newGates()))
	if err := h2.Start(); !errors.Is(err, payload.AlreadyExists) {
		t.Fatalf("kind registered twice: %v", err)
	}
	h3 := startHost(t, Config{}, counterKind(newGates()))
	if err := h3.Register(NewChannel("late")); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Register after Start = %v", err)
	}
	if err := h3.Start(); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("second Start = %v", err)
	}
}

func TestSendErrorsAreTypedAndNothingIsSent(t *testing.T) {
	l := newLedger()
	g := newGates()
	h := startHost(t, Config{OnPayloadRelease: l.Observe}, counterKind(g))
	if err := Tell(bg, h, Ref{"nope", "1"}, Inc{}); !errors.Is(err, payload.NotFound) {
		t.Fatalf("unknown kind = %v", err)
	}
	if err := Tell(bg, h, Ref{"counter", "1"}, Headline{}); !errors.Is(err, payload.NotFound) {
		t.Fatalf("unknown message type = %v", err)
	}
	if _, err := Ask[Inc, int](bg, h, Ref{"counter", "1"}, Inc{}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Ask of a one-way type = %v, want InvalidOperation", err)
	}
	if _, err := Ask[Get, string](bg, h, Ref{"counter", "1"}, Get{}); !errors.Is(err, payload.TypeMismatch) {
		t.Fatalf("Ask with the wrong reply type = %v, want TypeMismatch", err)
	}
	if h.Stats().Payload.Buffers != 0 {
		t.Fatal("a rejected send encoded a payload")
	}
}

type AskSelf struct{}

func TestReentrantAskIsInvalidOperationBeforeSubmission(t *testing.T) {
	k := counterKind(newGates())
	HandleRequest(k, func(ctx *Context, c *Counter, _ AskSelf) (int, error) {
		before := ctx.Host().Stats().Payload.Buffers
		_, err := Ask[Get, int](ctx, ctx.Host(), ctx.Self(), Get{})
		if ctx.Host().Stats().Payload.Buffers != before {
			return 0, errors.New("the reentrant request was encoded")
		}
		return 0, err
	})
	h := startHost(t, Config{OnPayloadRelease: func(payload.ReleaseEvent) {}}, k)
	if _, err := Ask[AskSelf, int](bg, h, Ref{"counter", "me"}, AskSelf{}); !errors.Is(err, ErrReentrant) || !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("reentrant ask = %v, want InvalidOperation", err)
	}
}

func TestRequestsInFlightAreBounded(t *testing.T) {
	g := newGates()
	k := counterKind(g)
	HandleRequest(k, func(ctx *Context, c *Counter, m Wait) (string, error) {
		g.block(ctx, m.Key)
		return "ok", nil
	})
	h := startHost(t, Config{MaxRequestsInFlight: 2}, k)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Ask[Wait, string](bg, h, Ref{"counter", itoa(i)}, Wait{Key: "w"}); err != nil {
				t.Error(err)
			}
		}()
	}
	g.waitStarted(t, "w")
	g.waitStarted(t, "w")
	if _, err := Ask[Get, int](bg, h, Ref{"counter", "x"}, Get{}); !errors.Is(err, ErrTooManyRequests) || !errors.Is(err, payload.CapacityExceeded) {
		t.Fatalf("third request = %v, want CapacityExceeded", err)
	}
	g.release("w")
	wg.Wait()
	if _, err := Ask[Get, int](bg, h, Ref{"counter", "x"}, Get{}); err != nil {
		t.Fatalf("after the others completed: %v", err)
	}
}

// A handler's panic is the sender's InternalFailure, and the host's log
// has it with the stack of the goroutine that panicked, down to the
// handler.
func TestPanicBecomesInternalFailureAndOwnerKeepsRunningWithItsState(t *testing.T) {
	l := newLedger()
	var log syncBuffer
	h := startHost(t, Config{OnPayloadRelease: l.Observe, Logger: slog.New(slog.NewTextHandler(&log, nil))}, counterKind(newGates()))
	ref := Ref{"counter", "p"}
	Tell(bg, h, ref, Inc{By: 5})
	_, err := Ask[Boom, int](bg, h, ref, Boom{})
	var e *HandlerError
	if !errors.As(err, &e) || e.Kind != payload.InternalFailure || !errors.Is(err, payload.InternalFailure) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic = %v, want InternalFailure mentioning the panic", err)
	}
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 5 {
		t.Fatalf("after the panic: %d, %v; want the state kept (5)", n, err)
	}
	if s := log.String(); !strings.Contains(s, `msg="handler panicked"`) || !strings.Contains(s, "stack=") || !strings.Contains(s, "actor.counterKind") {
		t.Fatalf("the log does not have the panic with the handler's stack:\n%s", s)
	}
	h.Close()
	l.CheckExactlyOnce(t, h.Stats().Payload.Buffers)
}

func TestAskDeadlineAndCancellationCompleteOnce(t *testing.T) {
	g := newGates()
	k := counterKind(g)
	HandleRequest(k, func(ctx *Context, c *Counter, m Wait) (string, error) {
		g.block(ctx, m.Key)
		return "late", nil
	})
	h := startHost(t, Config{RequestTimeout: 30 * time.Millisecond}, k)
	// RequestTimeout applies when ctx has no deadline.
	if _, err := Ask[Wait, string](bg, h, Ref{"counter", "slow"}, Wait{Key: "a"}); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("slow handler = %v, want ErrRequestTimeout", err)
	}
	ctx, cancel := context.WithCancel(bg)
	go func() { g.waitStarted(t, "b"); cancel() }()
	if _, err := Ask[Wait, string](ctx, h, Ref{"counter", "slow2"}, Wait{Key: "b"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ask = %v", err)
	}
	g.release("a")
	g.release("b")
	// The late replies are dropped; the host keeps working.
	if s, err := Ask[Echo, string](bg, h, Ref{"counter", "slow"}, Echo{S: "hi"}); err != nil || s != "hi" {
		t.Fatal(s, err)
	}
	waitFor(t, "no requests in flight", func() bool { return h.Stats().RequestsInFlight == 0 })
}

func TestOneActivationPerObjectUnderConcurrentFirstMessages(t *testing.T) {
	var made atomic.Int32
	k := NewKind("once", func(*Context, string) (*Counter, error) { made.Add(1); return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m Inc) error { c.N += m.By; return nil })
	HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
	h := startHost(t, Config{}, k)
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Tell(bg, h, Ref{"once", "same"}, Inc{By: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n, _ := Ask[Get, int](bg, h, Ref{"once", "same"}, Get{}); n != 32 {
		t.Fatalf("count %d, want 32", n)
	}
	if made.Load() != 1 || h.Stats().OwnersActive != 1 {
		t.Fatalf("factory ran %d times, %d owners; want one activation", made.Load(), h.Stats().OwnersActive)
	}
}

func TestFactoryErrorFailsTheMessageAndTheNextMessageRetries(t *testing.T) {
	var attempts atomic.Int32
	k := NewKind("flaky", func(*Context, string) (*Counter, error) {
		if attempts.Add(1) == 1 {
			return nil, errors.New("database down")
		}
		return &Counter{N: 7}, nil
	})
	HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
	h := startHost(t, Config{}, k)
	if _, err := Ask[Get, int](bg, h, Ref{"flaky", "1"}, Get{}); !errors.Is(err, payload.Unavailable) || !strings.Contains(err.Error(), "database down") {
		t.Fatalf("first ask = %v, want Unavailable with the cause", err)
	}
	if n, err := Ask[Get, int](bg, h, Ref{"flaky", "1"}, Get{}); err != nil || n != 7 {
		t.Fatalf("second ask = %d, %v", n, err)
	}
}

func TestIdleObjectsPassivateAndReactivateWithDeactivateHook(t *testing.T) {
	var saved sync.Map
	var made atomic.Int32
	k := NewKind("session", func(_ *Context, id string) (*Counter, error) {
		made.Add(1)
		n, _ := saved.Load(id)
		c := &Counter{}
		if n != nil {
			c.N = n.(int)
		}
		return c, nil
	})
	k.OnDeactivate(func(_ context.Context, id string, c *Counter) { saved.Store(id, c.N) })
	Handle(k, func(ctx *Context, c *Counter, m Inc) error { c.N += m.By; return nil })
	HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
	h := startHost(t, Config{IdleTimeout: 20 * time.Millisecond}, k)
	ref := Ref{"session", "s1"}
	Tell(bg, h, ref, Inc{By: 3})
	if n, _ := Ask[Get, int](bg, h, ref, Get{}); n != 3 {
		t.Fatal(n)
	}
	waitFor(t, "passivation", func() bool { _, ok := saved.Load("s1"); return ok && h.Stats().OwnersActive == 0 })
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 3 {
		t.Fatalf("after reactivation: %d, %v; want the saved state", n, err)
	}
	if made.Load() != 2 {
		t.Fatalf("factory ran %d times, want 2", made.Load())
	}
}

func TestGracefulStopRunsQueuedWorkAndDeactivateHooks(t *testing.T) {
	var hooks atomic.Int32
	var handled atomic.Int32
	k := NewKind("job", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	k.OnDeactivate(func(context.Context, string, *Counter) { hooks.Add(1) })
	Handle(k, func(ctx *Context, c *Counter, m Inc) error {
		time.Sleep(100 * time.Microsecond)
		handled.Add(1)
		return nil
	})
	h, _ := NewHost(Config{})
	h.Register(k)
	h.Start()
	for i := 0; i < 200; i++ {
		if err := Tell(bg, h, Ref{"job", itoa(i % 10)}, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Stop(bg); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 200 || hooks.Load() != 10 {
		t.Fatalf("after Stop: %d handled, %d hooks; want 200 and 10", handled.Load(), hooks.Load())
	}
	if err := Tell(bg, h, Ref{"job", "1"}, Inc{}); !errors.Is(err, payload.ShuttingDown) {
		t.Fatalf("send after Stop = %v", err)
	}
	checkNoHostGoroutines(t)
}

// A Stop whose context ends returns its error and leaves the host
// serving what it holds; only the Close that follows ends the queued
// request, with ShuttingDown, and counts it dropped.
func TestCloseAfterAStopCutShortEndsQueuedRequests(t *testing.T) {
	g := newGates()
	l := newLedger()
	h, _ := NewHost(Config{OnPayloadRelease: l.Observe})
	h.Register(counterKind(g))
	h.Start()
	Tell(bg, h, Ref{"counter", "a"}, Block{Key: "forever"})
	g.waitStarted(t, "forever")
	got := make(chan error, 1)
	go func() { _, err := Ask[Get, int](bg, h, Ref{"counter", "a"}, Get{}); got <- err }()
	waitFor(t, "queued", func() bool { return h.Stats().QueuedApplication == 1 })
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := h.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the context's error", err)
	}
	if st := h.Stats(); st.QueuedApplication != 1 {
		t.Fatalf("after a Stop cut short: %d queued; want the request still queued", st.QueuedApplication)
	}
	h.Close()
	if err := <-got; !errors.Is(err, payload.ShuttingDown) {
		t.Fatalf("queued request = %v, want ShuttingDown", err)
	}
	if st := h.Stats(); st.DroppedOnClose != 1 {
		t.Fatalf("Close dropped %d; want the queued request counted", st.DroppedOnClose)
	}
	checkNoHostGoroutines(t)
	l.CheckExactlyOnce(t, h.Stats().Payload.Buffers)
}

func TestTwoHostsInOneProcessAreIndependent(t *testing.T) {
	a := startHost(t, Config{Name: "a"}, counterKind(newGates()))
	b := startHost(t, Config{Name: "b"}, counterKind(newGates()))
	Tell(bg, a, Ref{"counter", "x"}, Inc{By: 1})
	Tell(bg, b, Ref{"counter", "x"}, Inc{By: 2})
	na, _ := Ask[Get, int](bg, a, Ref{"counter", "x"}, Get{})
	nb, _ := Ask[Get, int](bg, b, Ref{"counter", "x"}, Get{})
	if na != 1 || nb != 2 {
		t.Fatalf("a=%d b=%d", na, nb)
	}
	// Names identify hosts on a network, not in a process: a standalone
	// host of the same name is independent too, while a second host of the
	// same name on one network is refused.
	twin := startHost(t, Config{Name: "a"}, counterKind(newGates()))
	if n, err := Ask[Get, int](bg, twin, Ref{"counter", "x"}, Get{}); err != nil || n != 0 {
		t.Fatalf("a second standalone host named a sees %d, %v; want its own object (0)", n, err)
	}
	net := NewNetwork(nil)
	first := startHost(t, Config{Name: "a", Transport: net.Transport, Store: net.Net.Store, Membership: net.Membership}, counterKind(newGates()))
	lease, _, _ := net.Store().Lease(bg, "a")
	dup, _ := NewHost(Config{Name: "a", Transport: net.Transport, Store: net.Net.Store, Membership: net.Membership})
	defer dup.Close()
	if err := dup.Start(); !errors.Is(err, payload.AlreadyExists) {
		t.Fatalf("second host named a on one network = %v, want AlreadyExists", err)
	}
	if now, _, _ := net.Store().Lease(bg, "a"); now.Gen != lease.Gen || now.Gen != first.lease.run() {
		t.Fatalf("the refused host took over the lease of the running one (generation %d, was %d)", now.Gen, lease.Gen)
	}
}

func TestInlineAskRunsIdleObjectsTurnAndKeepsOrderAndDeadlines(t *testing.T) {
	g := newGates()
	k := counterKind(g)
	var handlerG atomic.Uint64
	HandleRequest(k, func(ctx *Context, c *Counter, m Wait) (string, error) {
		handlerG.Store(goid())
		time.Sleep(time.Duration(len(m.Key)) * 10 * time.Millisecond)
		return "slow", nil
	})
	l := newLedger()
	h := startHost(t, Config{InlineAsk: true, OnPayloadRelease: l.Observe}, k)
	// An idle object's turn runs on the asking goroutine.
	if _, err := Ask[Echo, string](bg, h, Ref{"counter", "slow"}, Echo{S: "activate"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "idle", func() bool { return h.Stats().QueuedApplication == 0 && h.owners.running.Load() == 0 })
	if _, err := Ask[Wait, string](bg, h, Ref{"counter", "slow"}, Wait{}); err != nil {
		t.Fatal(err)
	}
	if handlerG.Load() != goid() {
		t.Fatal("InlineAsk: the idle object's handler did not run on the asking goroutine")
	}
	ref := Ref{"counter", "i"}
	for i := 0; i < 100; i++ {
		if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			// Queued tells run before the ask (the owner is busy, so the
			// ask queues); an idle owner runs the ask inline.
			if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != i+1 {
				t.Fatalf("ask %d = %d, %v; want %d", i, n, err, i+1)
			}
		}
	}
	// A deadline that passes while the inline handler runs wins.
	ctx, cancel := context.WithTimeout(bg, 5*time.Millisecond)
	defer cancel()
	if _, err := Ask[Wait, string](ctx, h, Ref{"counter", "slow"}, Wait{Key: "xx"}); !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("inline ask past its deadline = %v, want DeadlineExceeded", err)
	}
	h.Close()
	l.CheckExactlyOnce(t, h.Stats().Payload.Buffers)
}

// goid returns the current goroutine's id, from its stack header.
func goid() uint64 {
	var buf [64]byte
	s := string(buf[:runtime.Stack(buf[:], false)])
	s = strings.TrimPrefix(s, "goroutine ")
	id, _ := strconv.ParseUint(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}

// A second run of a live host's name — another process, another transport
// — fails to start on the membership's refusal, before it takes the
// Location Store lease: the first run's lease keeps its generation (a
// newer one would have replaced it, and the first run would have lost
// its lease and its objects), and the first run goes on serving.
func TestASecondRunOfALiveHostsNameLeavesTheFirstRunsLease(t *testing.T) {
	n := NewNetwork(nil)
	first := startHost(t, n.With(Config{Name: "dup", Logger: quietLogger()}), counterKind(newGates()))
	if err := Tell(bg, first, Ref{"counter", "x"}, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	before, ok, err := n.Net.Store.Lease(bg, "dup")
	if err != nil || !ok {
		t.Fatalf("the first run's lease: %v, %v", ok, err)
	}
	other := NewNetwork(n.Net.Store) // another process's transport, the same store
	second, err := NewHost(Config{Name: "dup", Transport: other.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Register(counterKind(newGates())); err != nil {
		t.Fatal(err)
	}
	if err := second.Start(); err == nil {
		second.Close()
		t.Fatal("a second run of a live host's name started")
	} else {
		t.Logf("the second run: %v", err)
	}
	after, ok, err := n.Net.Store.Lease(bg, "dup")
	if err != nil || !ok || after.Gen != before.Gen {
		t.Fatalf("the first run's lease after the second run's start: gen %d (ok %v, %v); want it unchanged, %d", after.Gen, ok, err, before.Gen)
	}
	if got, err := Ask[Get, int](bg, first, Ref{"counter", "x"}, Get{}); err != nil || got != 1 {
		t.Fatalf("the first run after the second's attempt: %d, %v; want it serving (1)", got, err)
	}
}
