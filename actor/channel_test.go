package actor

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berthrt/berth/payload"
)

type Headline struct{ Text string }
type Query struct{ Q string }

// Publish fans out to N subscribers sharing one payload, released once after
// all N; each child takes its own permit.
func TestChannelFanOutSharesOnePayloadReleasedOnceAfterAll(t *testing.T) {
	const n = 8
	l := newLedger()
	var got sync.Map
	var handled atomic.Int32
	g := newGates()
	ch := NewChannel("news")
	for i := 0; i < n; i++ {
		Subscribe(ch, func(ctx *Context, m Headline) error {
			if i == 0 {
				g.block(ctx, "sub0")
			}
			got.Store(i, m.Text)
			handled.Add(1)
			return nil
		})
	}
	h := startHost(t, Config{OnPayloadRelease: l.Observe, MaxQueuedApplicationJobs: 4}, ch)
	if err := Publish(bg, h, "news", Headline{Text: "extra"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "sub0")
	waitFor(t, "the other subscribers", func() bool { return handled.Load() == n-1 })
	if l.Total() != 0 {
		t.Fatal("the shared payload was released while a subscriber still runs")
	}
	if b := h.Stats().Payload.Buffers; b != 1 {
		t.Fatalf("%d buffers for one publish; children must share one payload", b)
	}
	g.release("sub0")
	waitFor(t, "all subscribers", func() bool { return handled.Load() == n })
	waitFor(t, "the release", func() bool { return l.Total() == 1 })
	for i := 0; i < n; i++ {
		if v, ok := got.Load(i); !ok || v != "extra" {
			t.Fatalf("subscriber %d got %v", i, v)
		}
	}
	if d := h.Stats().Payload.Decodes; d != n {
		t.Fatalf("%d decodes, want %d (each child decodes its own value)", d, n)
	}
	l.CheckExactlyOnce(t, h.Stats().Payload.Buffers)
}

// Each child of a fan-out holds its own permit until its handler starts.
func TestChannelFanOutTakesOnePermitPerChild(t *testing.T) {
	const n = 5
	g := newGates()
	ch := NewChannel("news")
	for i := 0; i < n; i++ {
		Subscribe(ch, func(ctx *Context, m Block) error {
			open, started := g.chans(m.Key + itoa(i))
			started <- struct{}{}
			select {
			case <-open:
			case <-ctx.Done():
			}
			return nil
		})
	}
	h := startHost(t, Config{MaxQueuedApplicationJobs: 100}, ch)
	// First publish blocks every subscriber; the second's children queue.
	Publish(bg, h, "news", Block{Key: "first"})
	for i := 0; i < n; i++ {
		g.waitStarted(t, "first"+itoa(i))
	}
	Publish(bg, h, "news", Block{Key: "second"})
	waitFor(t, "children queued", func() bool { return h.Stats().QueuedApplication == n })
	if s := h.Stats(); s.PermitsInUse != n {
		t.Fatalf("%d permits in use for %d queued children, want one each", s.PermitsInUse, n)
	}
	for i := 0; i < n; i++ {
		g.release("first" + itoa(i))
		g.release("second" + itoa(i))
	}
	waitFor(t, "drained", func() bool { return h.Stats().PermitsInUse == 0 })
}

func TestChannelRequestGoesToOneServerRoundRobin(t *testing.T) {
	ch := NewChannel("lookup")
	var calls [3]atomic.Int32
	for i := 0; i < 3; i++ {
		Serve(ch, func(ctx *Context, q Query) (string, error) {
			calls[i].Add(1)
			return q.Q + "!", nil
		})
	}
	h := startHost(t, Config{}, ch)
	for i := 0; i < 30; i++ {
		s, err := AskChannel[Query, string](bg, h, "lookup", Query{Q: "x"})
		if err != nil || s != "x!" {
			t.Fatal(s, err)
		}
	}
	for i := range calls {
		if calls[i].Load() != 10 {
			t.Fatalf("server %d answered %d of 30, want 10", i, calls[i].Load())
		}
	}
	if err := Publish(bg, h, "lookup", Headline{}); !errors.Is(err, payload.NotFound) {
		t.Fatalf("publish of a type nobody subscribes to = %v, want NotFound", err)
	}
	if err := Publish(bg, h, "nope", Headline{}); !errors.Is(err, payload.NotFound) {
		t.Fatalf("publish to an unknown channel = %v, want NotFound", err)
	}
	if _, err := AskChannel[Headline, string](bg, h, "lookup", Headline{}); !errors.Is(err, payload.NotFound) {
		t.Fatalf("request nobody serves = %v, want NotFound", err)
	}
}

func TestChannelSubscriberAskingItsOwnChannelIsReentrant(t *testing.T) {
	ch := NewChannel("solo")
	Serve(ch, func(ctx *Context, q Query) (string, error) {
		if q.Q == "again" {
			return "", nil
		}
		_, err := AskChannel[Query, string](ctx, ctx.Host(), "solo", Query{Q: "again"})
		return "", err
	})
	h := startHost(t, Config{}, ch)
	if _, err := AskChannel[Query, string](bg, h, "solo", Query{Q: "first"}); !errors.Is(err, ErrReentrant) {
		t.Fatalf("subscriber asking itself = %v, want ErrReentrant", err)
	}
}
