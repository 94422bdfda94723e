package inproc_test

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/inproc"
	"github.com/berthrt/berth/transport/transporttest"
)

// harness runs the suite over one Network per Run.
func harness(n *inproc.Network) transporttest.Harness {
	return transporttest.Harness{
		Start: func(t *testing.T, name string, h transport.Handler) transport.Transport {
			tr, err := n.Attach(name, h)
			if err != nil {
				t.Fatalf("Attach(%s): %v", name, err)
			}
			return tr
		},
		Break: func(t *testing.T, a, b string) { n.Break(a, b) },
		Heal:  func(t *testing.T, a, b string) { n.Heal(a, b) },
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, harness(inproc.NewNetwork(inproc.Options{})))
}

// TestConformanceSmallHigh runs the suite with a low high-water mark, so
// that flow control turns on and off often.
func TestConformanceSmallHigh(t *testing.T) {
	transporttest.Run(t, harness(inproc.NewNetwork(inproc.Options{High: 16})))
}

// sink records deliveries and events; safe for concurrent use.
type sink struct {
	mu     sync.Mutex
	items  []transport.Item
	back   []transport.Item
	events []transport.Event
	gate   chan struct{} // if non-nil, every Deliver waits for it to be closed
	raw    bool          // keep the lent Data itself (TestNoCopy), not a copy
}

func (s *sink) Deliver(from string, it transport.Item) {
	if s.gate != nil {
		<-s.gate
	}
	if !s.raw {
		it.Data = bytes.Clone(it.Data) // lent for the call only
	}
	s.mu.Lock()
	s.items = append(s.items, it)
	s.mu.Unlock()
}

func (s *sink) Returned(to string, it transport.Item) {
	it.Data = bytes.Clone(it.Data)
	s.mu.Lock()
	s.back = append(s.back, it)
	s.mu.Unlock()
}

func (s *sink) Event(e transport.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

func (s *sink) has(e transport.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.events {
		if x == e {
			return true
		}
	}
	return false
}

// leakCheck checks, after the test's other cleanups closed its hosts, that
// no goroutine is left.
func leakCheck(t *testing.T) { t.Cleanup(func() { testutil.CheckNoGoroutines(t) }) }

func attach(t *testing.T, n *inproc.Network, name string, h transport.Handler) transport.Transport {
	t.Helper()
	tr, err := n.Attach(name, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(false) })
	return tr
}

func TestAttachDuplicate(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	a := attach(t, n, "a", &sink{})
	if _, err := n.Attach("a", &sink{}); !errors.Is(err, payload.AlreadyExists) {
		t.Fatalf("second Attach(a): %v, want AlreadyExists", err)
	}
	if _, err := n.Attach("", &sink{}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Attach(\"\"): %v, want InvalidOperation", err)
	}
	a.Close(true)
	attach(t, n, "a", &sink{}) // a gone name may be taken again
}

func TestHookDrops(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	var seen atomic.Int32
	n.SetHook(func(from, to string, it transport.Item) bool {
		seen.Add(1)
		return it.Kind != transport.Record
	})
	rb := &sink{}
	a, _ := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	for i, k := range []transport.Kind{transport.Record, transport.Frame, transport.Record, transport.Hint} {
		if err := a.Send("b", transport.Item{Kind: k, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "2 items", func() bool { return rb.count() == 2 })
	if seen.Load() != 4 {
		t.Fatalf("hook saw %d items, want 4", seen.Load())
	}
	rb.mu.Lock()
	if rb.items[0].Kind != transport.Frame || rb.items[1].Kind != transport.Hint {
		t.Fatalf("got %v", rb.items)
	}
	rb.mu.Unlock()
	n.SetHook(nil)
	if err := a.Send("b", transport.Item{Kind: transport.Record}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the record", func() bool { return rb.count() == 3 })
	// The hook does not see refused sends.
	n.SetHook(func(string, string, transport.Item) bool { t.Error("hook called"); return true })
	if err := a.Send("nosuch", transport.Item{Kind: transport.Frame}); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Fatal(err)
	}
}

func TestDelay(t *testing.T) {
	leakCheck(t)
	const d = 20 * time.Millisecond
	n := inproc.NewNetwork(inproc.Options{})
	rb := &sink{}
	a, _ := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	n.Delay("b", "a", d) // either order names the pair
	start := time.Now()
	for i := range 3 {
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "3 items", func() bool { return rb.count() == 3 })
	if el := time.Since(start); el < 3*d {
		t.Fatalf("3 delayed items took %v, want at least %v", el, 3*d)
	}
	for i, it := range rb.items {
		if it.Data[0] != byte(i) {
			t.Fatalf("out of order: %v", rb.items)
		}
	}
	// A crash cuts a delay short.
	n.Delay("a", "b", time.Hour)
	if err := a.Send("b", transport.Item{Kind: transport.Frame}); err != nil {
		t.Fatal(err)
	}
	n.Kill("b")
	n.Delay("a", "b", 0)
}

// timedSink records when each item arrived.
type timedSink struct {
	sink
	at []time.Time // guarded by sink.mu
}

func (s *timedSink) Deliver(from string, it transport.Item) {
	now := time.Now()
	s.sink.Deliver(from, it)
	s.mu.Lock()
	s.at = append(s.at, now)
	s.mu.Unlock()
}

// A link with Latency holds each item back d from its own Send, and
// carries any number at once: items sent together arrive together, not
// one per d as with Delay. An item queued before the Latency is not held
// back by it, and a crash cuts a wait short.
func TestLatency(t *testing.T) {
	leakCheck(t)
	const d, items = 50 * time.Millisecond, 20
	n := inproc.NewNetwork(inproc.Options{})
	rb := &timedSink{}
	a, _ := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	n.Latency("b", "a", d) // either order names the pair
	sent := make([]time.Time, items)
	for i := range items {
		sent[i] = time.Now()
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the items", func() bool { return rb.count() == items })
	together := false
	for i, it := range rb.items {
		if it.Data[0] != byte(i) {
			t.Fatalf("out of order: %v", rb.items)
		}
		if w := rb.at[i].Sub(sent[i]); w < d {
			t.Fatalf("item %d arrived %v after its send, want at least %v", i, w, d)
		}
		if i > 0 && rb.at[i].Sub(rb.at[i-1]) < d {
			together = true
		}
	}
	if !together {
		t.Fatalf("each of %d items sent together arrived at least %v after the one before (%v in all): the link carried one at a time", items, d, rb.at[items-1].Sub(rb.at[0]))
	}
	// An item queued before the latency is not held back by it.
	n.Latency("a", "b", 0)
	n.Break("a", "b")
	if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{items}}); err != nil {
		t.Fatal(err)
	}
	n.Latency("a", "b", time.Hour)
	n.Heal("a", "b")
	testutil.WaitFor(t, "the item queued before the latency", func() bool { return rb.count() == items+1 })
	// A crash cuts a wait short.
	if err := a.Send("b", transport.Item{Kind: transport.Frame}); err != nil {
		t.Fatal(err)
	}
	n.Kill("b")
	n.Latency("a", "b", 0)
}

func TestKill(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	ra, rb := &sink{}, &sink{gate: make(chan struct{})}
	a, b := attach(t, n, "a", ra), attach(t, n, "b", rb)
	for i := range 100 {
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if in, _ := b.Pending(); in != 100 {
		t.Fatalf("b.Pending in = %d, want 100", in)
	}
	if _, out := a.Pending(); out != 100 {
		t.Fatalf("a.Pending out = %d, want 100", out)
	}
	go func() {
		testutil.WaitFor(t, "Gone of b", func() bool { return ra.has(transport.Event{Peer: "b", Kind: transport.Gone}) })
		close(rb.gate)
	}()
	n.Kill("b") // waits for the held Deliver
	if got := rb.count(); got > 1 {
		t.Fatalf("a killed host took %d items, want at most the one in flight", got)
	}
	if len(ra.back) != 0 {
		t.Fatalf("a crash returned %d frames", len(ra.back))
	}
	if in, out := a.Pending(); in != 0 || out != 0 {
		t.Fatalf("a.Pending = %d, %d after b was killed", in, out)
	}
	if err := b.Send("a", transport.Item{Kind: transport.Frame}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send from a killed host: %v", err)
	}
	n.Kill("b") // no such host now: nothing happens
	if got := n.Hosts(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Hosts() = %v", got)
	}
}

// TestGracefulCloseWaitsOutBreak: a host that closes gracefully while its
// link is broken delivers what it sent once the link heals; its peer's Gone
// comes after.
func TestGracefulCloseWaitsOutBreak(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	rb := &sink{}
	a, b := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	if err := a.Send("b", transport.Item{Kind: transport.Record}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the link", func() bool { return rb.count() == 1 })
	n.Break("a", "b")
	for range 10 {
		if err := a.Send("b", transport.Item{Kind: transport.Frame}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close(true)
	if in, _ := b.Pending(); in != 10 {
		t.Fatalf("b.Pending in = %d, want the 10 items waiting", in)
	}
	if rb.has(transport.Event{Peer: "a", Kind: transport.Gone}) {
		t.Fatal("Gone before the items were delivered")
	}
	n.Heal("a", "b")
	testutil.WaitFor(t, "Gone of a", func() bool { return rb.has(transport.Event{Peer: "a", Kind: transport.Gone}) })
	if got := rb.count(); got != 11 {
		t.Fatalf("%d items delivered, want 11", got)
	}
}

// TestReturnedKeepsBounce: a bounce queued to a host that closes
// gracefully goes back to the host that bounced it, as a Bounce.
func TestReturnedKeepsBounce(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	ra, rb := &sink{}, &sink{gate: make(chan struct{})}
	a, b := attach(t, n, "a", ra), attach(t, n, "b", rb)
	send := func(k transport.Kind, d byte) {
		if err := a.Send("b", transport.Item{Kind: k, Data: []byte{d}}); err != nil {
			t.Fatal(err)
		}
	}
	send(transport.Hint, 0) // held
	send(transport.Bounce, 1)
	send(transport.Record, 2)
	send(transport.Frame, 3)
	go func() {
		testutil.WaitFor(t, "Gone of b", func() bool { return ra.has(transport.Event{Peer: "b", Kind: transport.Gone}) })
		close(rb.gate)
	}()
	b.Close(true)
	want := []transport.Item{{Kind: transport.Bounce, Data: []byte{1}}, {Kind: transport.Frame, Data: []byte{3}}}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if len(ra.back) != len(want) {
		t.Fatalf("returned %v, want %v", ra.back, want)
	}
	for i := range want {
		if ra.back[i].Kind != want[i].Kind || !bytes.Equal(ra.back[i].Data, want[i].Data) {
			t.Fatalf("returned %v, want %v", ra.back, want)
		}
	}
}

// TestNoCopy: with Options.NoCopy the receiver gets the sender's slice.
func TestNoCopy(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{NoCopy: true})
	rb := &sink{raw: true}
	a, _ := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	buf := []byte("x")
	if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: buf}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the item", func() bool { return rb.count() == 1 })
	if &rb.items[0].Data[0] != &buf[0] {
		t.Fatal("NoCopy copied")
	}
}

// TestAttachSeesLeaving: a host that joins learns which peers are leaving.
func TestAttachSeesLeaving(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	a := attach(t, n, "a", &sink{})
	a.Leave()
	rb := &sink{}
	b := attach(t, n, "b", rb)
	if !rb.has(transport.Event{Peer: "a", Kind: transport.Leaving}) {
		t.Fatalf("events %v lack Leaving of a", rb.events)
	}
	if err := b.Send("a", transport.Item{Kind: transport.Frame}); !errors.Is(err, transport.ErrPeerLeaving) {
		t.Fatal(err)
	}
}

func BenchmarkSend(b *testing.B) {
	for _, noCopy := range []bool{false, true} {
		name := "copy"
		if noCopy {
			name = "nocopy"
		}
		b.Run(name, func(b *testing.B) {
			n := inproc.NewNetwork(inproc.Options{NoCopy: noCopy})
			rb := &sink{}
			x, _ := n.Attach("x", &sink{})
			y, _ := n.Attach("y", discard{})
			defer x.Close(false)
			defer y.Close(false)
			_ = rb
			data := make([]byte, 128)
			ctx := b.Context()
			for b.Loop() {
				if err := x.WaitRoom(ctx, "y"); err != nil {
					b.Fatal(err)
				}
				if err := x.Send("y", transport.Item{Kind: transport.Frame, Data: data}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type discard struct{}

func (discard) Deliver(string, transport.Item)  {}
func (discard) Returned(string, transport.Item) {}
func (discard) Event(transport.Event)           {}

// TestCopiesAreNotSharedAndNeverChangeUnderTheReceiver: with copies (the
// default), a receiver's lent Data is never the sender's slice, a sender
// that reuses its buffer at once changes nothing delivered, and a recycled
// buffer is never handed out while its item is being delivered.
func TestCopiesAreNotSharedAndNeverChangeUnderTheReceiver(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	rb := &checker{t: t}
	a, _ := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	buf := make([]byte, 64)
	const items = 2000
	for i := range items {
		for j := range buf {
			buf[j] = byte(i)
		}
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: buf[:1+i%64]}); err != nil {
			t.Fatal(err)
		}
		clear(buf) // the sender reuses its buffer at once
	}
	testutil.WaitFor(t, "every item", func() bool { return rb.n.Load() == items })
}

// checker checks, in Deliver, that every byte of item i is byte(i), both on
// arrival and after a pause (while later items are being queued).
type checker struct {
	t *testing.T
	n atomic.Int64
}

func (c *checker) Deliver(_ string, it transport.Item) {
	i := c.n.Load()
	check := func() {
		if len(it.Data) != 1+int(i)%64 {
			c.t.Errorf("item %d: %d bytes", i, len(it.Data))
		}
		for _, b := range it.Data {
			if b != byte(i) {
				c.t.Errorf("item %d: byte %d, want %d", i, b, byte(i))
				return
			}
		}
	}
	check()
	runtime.Gosched()
	check()
	c.n.Add(1)
}
func (c *checker) Returned(string, transport.Item) {}
func (c *checker) Event(transport.Event)           {}

// TestOwnedItemsAreHandedOver: an Owned item reaches the receiver as the
// very slice the sender gave up, marked Owned; a large item that is not
// Owned arrives as a copy the receiver may keep (Owned); a small one as a
// copy lent for the call (not Owned).
func TestOwnedItemsAreHandedOver(t *testing.T) {
	leakCheck(t)
	n := inproc.NewNetwork(inproc.Options{})
	rb := &sink{raw: true}
	a, _ := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	owned := []byte("given up")
	large := bytes.Repeat([]byte("x"), 64<<10)
	small := []byte("lent")
	for _, it := range []transport.Item{
		{Kind: transport.Record, Data: owned, Owned: true},
		{Kind: transport.Record, Data: large},
		{Kind: transport.Record, Data: small},
	} {
		if err := a.Send("b", it); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the items", func() bool { return rb.count() == 3 })
	rb.mu.Lock()
	defer rb.mu.Unlock()
	got := rb.items
	if &got[0].Data[0] != &owned[0] || !got[0].Owned {
		t.Errorf("an Owned item: shared %v, Owned %v; want the sender's slice, Owned", &got[0].Data[0] == &owned[0], got[0].Owned)
	}
	if &got[1].Data[0] == &large[0] || !got[1].Owned || !bytes.Equal(got[1].Data, large) {
		t.Errorf("a large item: shared %v, Owned %v; want a copy handed over", &got[1].Data[0] == &large[0], got[1].Owned)
	}
	if got[2].Owned {
		t.Error("a small copy arrived Owned; want it lent (recycled after Deliver)")
	}
}

// breaker is a handler whose Deliver of item number at breaks the link it
// came on, and that records, for each item, whether the link was broken
// when it was delivered.
type breaker struct {
	n        *inproc.Network
	at       int
	gate     chan struct{} // the first Deliver waits for it to be closed
	mu       sync.Mutex
	got      []int
	broken   bool
	whileOff []int         // items delivered while the link was broken
	didBreak chan struct{} // closed after the Break
}

func (b *breaker) Deliver(from string, it transport.Item) {
	k := int(it.Data[0])
	if k == 0 {
		<-b.gate
	}
	b.mu.Lock()
	b.got = append(b.got, k)
	if b.broken {
		b.whileOff = append(b.whileOff, k)
	}
	b.mu.Unlock()
	if k == b.at {
		b.mu.Lock()
		b.broken = true
		b.mu.Unlock()
		b.n.Break(from, "b")
		close(b.didBreak)
	}
}
func (b *breaker) Returned(string, transport.Item) {}
func (b *breaker) Event(transport.Event)           {}

func (b *breaker) delivered() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.got...)
}

// TestBreakStopsABatchShort: the link delivers its queue in batches; a
// Break during the delivery of one item stops the rest of that batch
// (they go back to the queue, in order), and Heal delivers them once each.
func TestBreakStopsABatchShort(t *testing.T) {
	leakCheck(t)
	const total, at = 100, 10
	n := inproc.NewNetwork(inproc.Options{})
	rb := &breaker{n: n, at: at, gate: make(chan struct{}), didBreak: make(chan struct{})}
	a, b := attach(t, n, "a", &sink{}), attach(t, n, "b", rb)
	for i := range total { // item 0 holds the link while the rest queue up
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	close(rb.gate)
	<-rb.didBreak // the link's goroutine is in a batch: it sleeps next only once it has stopped
	testutil.WaitFor(t, "the link to stop after the break", func() bool { return inproc.LinkSleeping(n, "a", "b") })
	if got := rb.delivered(); len(got) != at+1 {
		t.Fatalf("delivered %d items by the time the broken link stopped, want %d (the one that broke it last): %v", len(got), at+1, got)
	}
	if _, p := a.Pending(); p != total-at-1 {
		t.Fatalf("Pending = %d after the break, want %d", p, total-at-1)
	}
	rb.mu.Lock()
	rb.broken = false
	rb.mu.Unlock()
	n.Heal("a", "b")
	testutil.WaitFor(t, "every item", func() bool { return len(rb.delivered()) >= total })
	got := rb.delivered()
	for i, k := range got {
		if k != i {
			t.Fatalf("item %d delivered as number %d: %v", k, i, got)
		}
	}
	if len(got) != total || len(rb.whileOff) != 0 {
		t.Fatalf("delivered %d items (want %d), %v of them while broken", len(got), total, rb.whileOff)
	}
	_ = a.Close(true)
	_ = b.Close(true)
}
