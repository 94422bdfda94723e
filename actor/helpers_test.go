package actor

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

type ledger = testutil.Ledger

func newLedger() *ledger { return testutil.NewLedger() }

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

func checkNoHostGoroutines(t testing.TB) { t.Helper(); testutil.CheckNoGoroutines(t) }

// Test kind: a counter with a gate handlers can block on.

type Counter struct {
	N    int
	Seen map[int]int // sender → last sequence number
}

type Inc struct {
	By     int
	Sender int
	Seq    int
}

type Get struct{}

type Block struct{ Key string }

type Boom struct{}

type Fail struct{}

type Echo struct{ S string }

// gates lets a test block handlers by key and see them start.
type gates struct {
	mu      sync.Mutex
	open    map[string]chan struct{}
	started map[string]chan struct{}
}

func newGates() *gates {
	return &gates{open: map[string]chan struct{}{}, started: map[string]chan struct{}{}}
}

func (g *gates) chans(key string) (open, started chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[key] == nil {
		g.open[key] = make(chan struct{})
		g.started[key] = make(chan struct{}, 1000)
	}
	return g.open[key], g.started[key]
}

func (g *gates) release(key string) { o, _ := g.chans(key); close(o) }

// block is a handler body: it reports that it started, then waits until
// the test releases key or the host closes.
func (g *gates) block(ctx context.Context, key string) {
	open, started := g.chans(key)
	started <- struct{}{}
	select {
	case <-open:
	case <-ctx.Done():
	}
}

func (g *gates) waitStarted(t testing.TB, key string) {
	t.Helper()
	_, s := g.chans(key)
	select {
	case <-s:
	case <-time.After(10 * time.Second):
		t.Fatalf("handler %q did not start", key)
	}
}

var errFail = payload.NewError(payload.Rejected, "test", "handler says no")

func init() { RegisterError("test.fail", errFail) } // matchable wherever the handler ran

func counterKind(g *gates) *Kind[Counter] {
	k := NewKind("counter", func(ctx *Context, id string) (*Counter, error) {
		return &Counter{Seen: map[int]int{}}, nil
	})
	Handle(k, func(ctx *Context, c *Counter, m Inc) error {
		c.N += m.By
		return nil
	})
	HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
	HandleRequest(k, func(ctx *Context, c *Counter, m Echo) (string, error) { return m.S, nil })
	Handle(k, func(ctx *Context, c *Counter, m Block) error {
		g.block(ctx, m.Key)
		return nil
	})
	HandleRequest(k, func(ctx *Context, c *Counter, _ Boom) (int, error) { panic("boom") })
	HandleRequest(k, func(ctx *Context, c *Counter, _ Fail) (int, error) { return 0, errFail })
	return k
}

// startHost starts a host with the given kinds and config; it is closed and
// checked for leftover goroutines at the end of the test.
func startHost(t testing.TB, cfg Config, items ...Registrable) *Host {
	t.Helper()
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register(items...); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the leak check, registered before
	// the first host's Close, runs after every host of the test closed.
	if _, done := leakChecked.LoadOrStore(t, true); !done {
		t.Cleanup(func() { checkNoHostGoroutines(t) })
	}
	t.Cleanup(func() { h.Close() })
	return h
}

var leakChecked sync.Map // testing.TB → true

var bg = context.Background()

type mailboxLimitsT = mailbox.Limits

func mailboxLimits(items int) mailboxLimitsT { return mailboxLimitsT{Items: items, Bytes: 64 << 20} }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
