package tcp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// sink is a Handler that keeps what it is given, per sending peer.
type sink struct {
	mu    sync.Mutex
	items map[string][][]byte // guarded by mu
}

func newSink() *sink { return &sink{items: map[string][][]byte{}} }

func (s *sink) Deliver(from string, it transport.Item) {
	s.mu.Lock()
	s.items[from] = append(s.items[from], bytes.Clone(it.Data))
	s.mu.Unlock()
}
func (s *sink) Returned(string, transport.Item) {}
func (s *sink) Event(transport.Event)           {}

func (s *sink) from(peer string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.items[peer]...)
}

// pairOf starts hosts a and b on TLS with the tests' CA, peers of each
// other.
func pairOf(t *testing.T, opts tcp.Options) (a, b *tcp.Transport, sa, sb *sink) {
	t.Helper()
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
	c := newCluster(opts, false)
	sa, sb = newSink(), newSink()
	a = c.start(t, "a", sa)
	b = c.start(t, "b", sb)
	t.Cleanup(func() { _ = b.Close(true) })
	t.Cleanup(func() { _ = a.Close(true) })
	return a, b, sa, sb
}

// checkExchange sends n numbered frames each way between a and b (tagged
// with tag) and waits for them all, in order, once each.
func checkExchange(t *testing.T, a, b *tcp.Transport, sa, sb *sink, tag string, n int) {
	t.Helper()
	before := [2]int{len(sb.from("a")), len(sa.from("b"))}
	for i := range n {
		for _, d := range []struct {
			from *tcp.Transport
			to   string
		}{{a, "b"}, {b, "a"}} {
			if err := d.from.Send(d.to, transport.Item{Kind: transport.Frame, Data: []byte(tag + "#" + strconv.Itoa(i))}); err != nil {
				t.Fatalf("Send(%s): %v", d.to, err)
			}
		}
	}
	for _, d := range []struct {
		s    *sink
		peer string
		skip int
	}{{sb, "a", before[0]}, {sa, "b", before[1]}} {
		testutil.WaitFor(t, tag+" items from "+d.peer, func() bool { return len(d.s.from(d.peer)) >= d.skip+n })
		got := d.s.from(d.peer)[d.skip:]
		if len(got) != n {
			t.Fatalf("%d %s items from %s, want %d", len(got), tag, d.peer, n)
		}
		for i, g := range got {
			if want := tag + "#" + strconv.Itoa(i); string(g) != want {
				t.Fatalf("item %d from %s is %q, want %q", i, d.peer, g, want)
			}
		}
	}
}

// dialRaw opens a TLS connection to t's host presenting cert (none if
// nil), trusting pool, and says it is from.
func dialRaw(t *testing.T, tr *tcp.Transport, pool *devca.CA, cert *tls.Certificate, from string) (net.Conn, error) {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool.Pool(), ServerName: tr.Local()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.Dial("tcp", tr.Addr(), cfg)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	pre := append([]byte("berth/tcp/2\n"), byte(len(from)))
	pre = append(pre, from...)
	pre = append(pre, byte(len(tr.Local())))
	pre = append(pre, tr.Local()...)
	if _, err := c.Write(pre); err != nil {
		_ = c.Close()
		return nil, err
	}
	var ok [5]byte // 'k' and the listener's item limit
	if _, err := io.ReadFull(c, ok[:]); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// A client without a certificate, with a certificate of another CA, or
// with a valid certificate of a name other than the member it claims to
// be is refused before anything it sends is read, and counted; a valid
// member that is not a peer is counted as unknown. The host keeps serving
// its peer.
func TestConnectionsWithoutAValidCertificateAreRefusedAndCounted(t *testing.T) {
	a, b, sa, sb := pairOf(t, testOptions())
	checkExchange(t, a, b, sa, sb, "before", 10)
	other, err := devca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherB, err := other.IssueTLS("b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := testCA().IssueTLS("c")
	if err != nil {
		t.Fatal(err)
	}
	refused := a.Stats().Refused
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
		from string
	}{
		{"no certificate", nil, "b"},
		{"another CA's certificate for b", &otherB, "b"},
		{"c's certificate claiming b", &c, "b"},
	} {
		conn, err := dialRaw(t, a, testCA(), tc.cert, tc.from)
		if err == nil {
			_ = conn.Close()
			t.Fatalf("%s: the connection was accepted", tc.name)
		}
		refused++
		testutil.WaitFor(t, tc.name+" counted as refused", func() bool { return a.Stats().Refused >= refused })
	}
	conn, err := dialRaw(t, a, testCA(), &c, "c")
	if err == nil {
		_ = conn.Close()
		t.Fatal("c, not a peer, was accepted")
	}
	testutil.WaitFor(t, "c counted as unknown", func() bool { return a.Stats().Unknown >= 1 })
	if got := sa.from("c"); len(got) != 0 {
		t.Fatalf("items from c delivered: %q", got)
	}
	checkExchange(t, a, b, sa, sb, "after", 10)
}

// Garbage after a valid handshake, and every truncation of a valid frame,
// close that connection only: nothing of them is delivered, the malformed
// one is counted, and the traffic between a and b goes on, each item once,
// in order. The bad bytes come from a holder of the certificate of c, a
// peer of a that is not running (so no real c replaces the connections).
// The seed is printed.
func TestGarbageAndTruncatedFramesCloseOnlyThatConnection(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	a, b, sa, sb := pairOf(t, testOptions())
	checkExchange(t, a, b, sa, sb, "before", 20)
	forged := peerC(t, a)
	// A valid item frame of b's, numbered far ahead (as garbage would
	// be): op item, kind frame, seq 1<<40.
	frame := make([]byte, 48, 48+5)
	binary.BigEndian.PutUint32(frame, 44+5)
	frame[4], frame[6] = 1, byte(transport.Frame)
	binary.BigEndian.PutUint64(frame[24:], 1<<40)
	frame = append(frame, "xxxxx"...)
	for k := range len(frame) {
		conn, err := dialRaw(t, a, testCA(), forged, "c")
		if err != nil {
			t.Fatalf("truncated at %d: %v", k, err)
		}
		if _, err := conn.Write(frame[:k]); err != nil {
			t.Fatalf("truncated at %d: %v", k, err)
		}
		_ = conn.Close()
	}
	malformed := a.Stats().Malformed
	for i := range 20 {
		conn, err := dialRaw(t, a, testCA(), forged, "c")
		if err != nil {
			t.Fatalf("garbage %d: %v", i, err)
		}
		g := make([]byte, 48+rng.IntN(512))
		for j := range g {
			g[j] = byte(rng.Uint32())
		}
		binary.BigEndian.PutUint32(g, 44)
		g[4] = 99 // no such op: the header is refused
		if _, err := conn.Write(g); err != nil {
			t.Fatalf("garbage %d: %v", i, err)
		}
		if _, err := io.ReadAll(conn); err != nil && !errors.Is(err, net.ErrClosed) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("garbage %d: the connection stayed open", i)
			}
		}
		_ = conn.Close()
	}
	testutil.WaitFor(t, "the garbage counted as malformed", func() bool { return a.Stats().Malformed >= malformed+20 })
	checkExchange(t, a, b, sa, sb, "after", 20)
	if got := sa.from("c"); len(got) != 0 {
		t.Fatalf("%d items of the bad connections delivered", len(got))
	}
}

// peerC makes c, which runs nowhere, a peer of a (at an address nobody
// listens on) and returns a certificate naming c.
func peerC(t *testing.T, a *tcp.Transport) *tls.Certificate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	if err := a.AddPeer("c", addr); err != nil {
		t.Fatal(err)
	}
	c, err := testCA().IssueTLS("c")
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// An item past the receiver's limit is refused at both ends: a Send to a
// peer whose limit is known (it comes in the peer's answer to the
// connection) fails at once with CapacityExceeded; one that arrives
// anyway has its data read and dropped, never kept, is counted, and
// takes its turn without reaching the handler — the connection stays and
// the next item arrives (no resend loop).
func TestItemsPastTheLimitAreRefusedAtBothEnds(t *testing.T) {
	opts := testOptions()
	c := newCluster(opts, false)
	small := opts
	small.MaxItem = 1 << 20
	sa, sb := newSink(), newSink()
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
	smallC := &cluster{opts: small, hosts: c.hosts}
	a := smallC.start(t, "a", sa)
	b := c.start(t, "b", sb)
	t.Cleanup(func() { _ = b.Close(true) })
	t.Cleanup(func() { _ = a.Close(true) })
	checkExchange(t, a, b, sa, sb, "before", 10)
	for _, tc := range []struct {
		from *tcp.Transport
		to   string
	}{{a, "b"}, {b, "a"}} {
		err := tc.from.Send(tc.to, transport.Item{Kind: transport.Frame, Data: make([]byte, 1<<20+1)})
		// a's own limit refuses it; b's is 65 MiB, so only a's limit,
		// learned from the connection, can.
		if !errors.Is(err, payload.CapacityExceeded) {
			t.Fatalf("Send of 1 MiB + 1 to %s: %v, want CapacityExceeded (a takes at most 1 MiB)", tc.to, err)
		}
	}
	conn, err := dialRaw(t, a, testCA(), peerC(t, a), "c")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	item := func(seq uint64, data []byte) []byte {
		h := make([]byte, 48, 48+len(data))
		binary.BigEndian.PutUint32(h, uint32(44+len(data)))
		h[4], h[6] = 1, byte(transport.Frame)
		binary.BigEndian.PutUint64(h[24:], seq)
		return append(h, data...)
	}
	if _, err := conn.Write(item(1, make([]byte, 1<<20+1))); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(item(2, []byte("next"))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the item after the refused one", func() bool { return len(sa.from("c")) == 1 })
	if got := sa.from("c"); string(got[0]) != "next" {
		t.Fatalf("delivered %q, want only \"next\"", got)
	}
	if s := a.Stats(); s.Oversized != 1 || s.Malformed != 0 {
		t.Fatalf("Oversized %d, Malformed %d; want 1, 0", s.Oversized, s.Malformed)
	}
	checkExchange(t, a, b, sa, sb, "after", 10)
}

// Items of 1 KiB, 5 MiB, 32 MiB and 64 MiB, and a burst of 40 × 256 KiB,
// each arrive once, whole, in order.
func TestLargeItemsAndBurstsArriveOnceInOrder(t *testing.T) {
	a, _, _, sb := pairOf(t, testOptions())
	sizes := []int{1 << 10, 5 << 20, 32 << 20, 64 << 20}
	for range 40 {
		sizes = append(sizes, 256<<10)
	}
	fill := func(i, n int) []byte {
		d := make([]byte, n)
		binary.BigEndian.PutUint32(d, uint32(i))
		for j := 4; j < n; j += 4096 {
			d[j] = byte(i + j)
		}
		d[n-1] = byte(i)
		return d
	}
	for i, n := range sizes {
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: fill(i, n), Owned: true}); err != nil {
			t.Fatalf("Send %d (%d bytes): %v", i, n, err)
		}
	}
	testutil.WaitForWithin(t, "every item", time.Minute, func() bool { return len(sb.from("a")) >= len(sizes) })
	got := sb.from("a")
	if len(got) != len(sizes) {
		t.Fatalf("%d items, want %d", len(got), len(sizes))
	}
	for i, n := range sizes {
		if !bytes.Equal(got[i], fill(i, n)) {
			t.Fatalf("item %d: %d bytes, not what was sent (%d bytes)", i, len(got[i]), n)
		}
	}
	if s := a.Stats(); s.Resent != 0 {
		t.Fatalf("%d items sent again on a healthy link", s.Resent)
	}
}

// ExampleListen: two hosts on loopback, mutually authenticated with
// certificates of a development CA, one item across.
func ExampleListen() {
	ca, _ := devca.New("example CA")
	got := make(chan string, 1)
	start := func(name string, h transport.Handler) *tcp.Transport {
		cert, _ := ca.IssueTLS(name)
		t, err := tcp.Listen(name, h, tcp.Options{TLS: &tcp.TLS{Certificate: cert, CA: ca.Pool()}})
		if err != nil {
			panic(err)
		}
		return t
	}
	a := start("a", newSink())
	b := start("b", handlerFunc(func(from string, it transport.Item) { got <- from + ": " + string(it.Data) }))
	_ = a.AddPeer("b", b.Addr()) // as the membership tells a host
	_ = b.AddPeer("a", a.Addr())
	_ = a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte("hello")})
	fmt.Println(<-got)
	_ = a.Close(true)
	_ = b.Close(true)
	// Output: a: hello
}

// handlerFunc is a Handler that hands each item to a function.
type handlerFunc func(from string, it transport.Item)

func (f handlerFunc) Deliver(from string, it transport.Item) { f(from, it) }
func (handlerFunc) Returned(string, transport.Item)          {}
func (handlerFunc) Event(transport.Event)                    {}

// gate is a Handler whose Deliver waits until it is opened, and counts.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	got  []string // guarded by mu
}

func (g *gate) Deliver(_ string, it transport.Item) {
	<-g.open
	g.mu.Lock()
	g.got = append(g.got, string(it.Data))
	g.mu.Unlock()
}
func (*gate) Returned(string, transport.Item) {}

// Event waits too: the peer's Up is delivered on the transport's delivery
// goroutine, so the items behind it queue in the inbox (an item that
// finds the handler idle is delivered on the reader, which then stops
// reading by itself).
func (g *gate) Event(transport.Event) { <-g.open }

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.got)
}

// gatedPair starts hosts a and b with opts, b's handler a gate that
// release opens (at the latest when the test ends, before the hosts
// close), and waits for the link.
func gatedPair(t *testing.T, opts tcp.Options) (a, b *tcp.Transport, g *gate, release func()) {
	t.Helper()
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
	c := newCluster(opts, false)
	g = &gate{open: make(chan struct{})}
	a = c.start(t, "a", newSink())
	b = c.start(t, "b", g)
	t.Cleanup(func() { _ = a.Close(true) })
	t.Cleanup(func() { _ = b.Close(true) })
	var opened sync.Once
	release = func() { opened.Do(func() { close(g.open) }) }
	t.Cleanup(release) // first: a failed test's hosts close with the handler going on
	testutil.WaitFor(t, "the link up", func() bool { return len(a.Peers()) == 1 && len(b.Peers()) == 1 })
	return a, b, g, release
}

// A receiver whose handler does not keep up holds at most InboundItems of
// a peer's items (it stops reading the connection); the rest wait at the
// sender, whose WaitRoom blocks past its high mark — back-pressure
// through the link. Once the handler goes on, every item arrives once, in
// order.
func TestASlowHandlerPushesBackThroughTheLink(t *testing.T) {
	opts := testOptions()
	opts.InboundItems, opts.HighItems = 64, 256
	a, b, g, release := gatedPair(t, opts)
	const n = 2000
	for i := range n {
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The receiver fills up to its bound, and stays there while the
	// sender has written everything (it is in the sockets' buffers, for
	// the reader to take if it did not stop); the sender's senders wait.
	testutil.WaitFor(t, "the receiver to fill up to its bound", func() bool {
		in, _ := b.Pending()
		return in >= opts.InboundItems
	})
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if in, _ := b.Pending(); in > opts.InboundItems+2 {
			t.Fatalf("the receiver holds %d items for its handler, past InboundItems %d", in, opts.InboundItems)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.WaitRoom(ctx, "b"); err == nil {
		t.Fatal("the sender has room with its peer's handler stopped")
	}
	release()
	testutil.WaitForWithin(t, "every item", time.Minute, func() bool { return g.count() == n })
	for i, s := range g.got {
		if s != strconv.Itoa(i) {
			t.Fatalf("item %d is %q", i, s)
		}
	}
}

// A host told its peer's run by the membership (AddPeerRun) takes only
// that incarnation: a new run of the peer's name is not heard — its items
// are stale — until the membership reports it; then the old run's session
// ends (a restart, counted) and the new run's items, sent again, arrive
// once, in order.
func TestANewRunOfAPeerIsTakenOnlyWhenTheMembershipReportsIt(t *testing.T) {
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
	opts := testOptions()
	listen := func(name string, run uint64, h transport.Handler) *tcp.Transport {
		o := opts
		o.TLS, o.Run = tlsFor(t, testCA(), name), run
		tr, err := tcp.Listen(name, h, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(true) })
		return tr
	}
	sa, sb := newSink(), newSink()
	a, b := listen("a", 100, sa), listen("b", 200, sb)
	if err := a.AddPeerRun("b", b.Addr(), 200); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeerRun("a", a.Addr(), 100); err != nil {
		t.Fatal(err)
	}
	checkExchange(t, a, b, sa, sb, "first run", 10)

	_ = b.Close(false) // b's process dies; its name comes back as a new run
	sb2 := newSink()
	b2 := listen("b", 300, sb2)
	if err := b2.AddPeerRun("a", a.Addr(), 100); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := b2.Send("a", transport.Item{Kind: transport.Frame, Data: []byte("new run#" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "a to drop the new run's items as stale", func() bool { return a.Stats().Stale >= 5 })
	if got := len(sa.from("b")); got != 10 {
		t.Fatalf("a took %d items from b; want the first run's 10 only (the membership has not reported the new run)", got)
	}
	restarts := a.Stats().Restarts
	if err := a.AddPeerRun("b", b2.Addr(), 300); err != nil { // the membership reports the new run
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the new run's items", func() bool { return len(sa.from("b")) >= 15 })
	got := sa.from("b")[10:]
	for i, g := range got {
		if want := "new run#" + strconv.Itoa(i); string(g) != want {
			t.Fatalf("item %d of the new run is %q, want %q (all %q)", i, g, want, got)
		}
	}
	if s := a.Stats(); s.Restarts != restarts+1 {
		t.Fatalf("a counted %d restarts of b after the membership reported its new run; want %d", s.Restarts, restarts+1)
	}
	checkExchange(t, a, b2, sa, sb2, "second run", 10)
}

// A peer that takes nothing (its handler stopped here; a peer that does not
// read is the same to the sender) makes its sender keep at most
// MaxPendingItems of what it sends it: past that, Send refuses controls
// with ErrBacklog at once and frames past twice the bound, nothing refused
// is queued, the refusals are counted, and Backlogged says so. Once the
// peer takes again, every item accepted arrives once, in order, and sends
// go again. The byte bound does the same for large items.
func TestAPeerThatTakesNothingIsRefusedPastTheHardBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  func(*tcp.Options)
		size  int
		maxIt int // the bound in items this size makes
	}{
		{"items", func(o *tcp.Options) { o.MaxPendingItems = 300 }, 8, 300},
		{"bytes", func(o *tcp.Options) { o.MaxItem, o.MaxPendingBytes = 64<<10, 1<<20 }, 64 << 10, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions()
			opts.InboundItems, opts.HighItems = 64, 128
			opts.HighBytes = 256 << 10
			tc.opts(&opts)
			a, _, g, release := gatedPair(t, opts)
			item := func(k transport.Kind, i int) transport.Item {
				d := make([]byte, tc.size)
				copy(d, strconv.Itoa(i)+"/")
				return transport.Item{Kind: k, Data: d}
			}
			var sent []int // the items accepted, in order
			refused := func(k transport.Kind, i int) bool {
				err := a.Send("b", item(k, i))
				switch {
				case err == nil:
					sent = append(sent, i)
					return false
				case errors.Is(err, transport.ErrBacklog) && !transport.IsRetryable(err):
					return true
				}
				t.Fatalf("Send(%v %d): %v", k, i, err)
				return false
			}
			i := 0
			for ; i < 100*tc.maxIt && !refused(transport.Control, i); i++ {
			}
			if len(sent) != tc.maxIt || !a.Backlogged("b") {
				t.Fatalf("a control refused after %d accepted (bound %d), Backlogged %v", len(sent), tc.maxIt, a.Backlogged("b"))
			}
			for i++; i < 200*tc.maxIt && !refused(transport.Frame, i); i++ {
			}
			if len(sent) != 2*tc.maxIt {
				t.Fatalf("a frame refused after %d accepted, want twice the bound, %d", len(sent), 2*tc.maxIt)
			}
			if !refused(transport.Record, i+1) || !refused(transport.Reply, i+2) {
				t.Fatal("a record or a reply was taken past twice the bound")
			}
			if st := a.Stats(); st.Backlog != 4 {
				t.Fatalf("Stats.Backlog = %d, want 4", st.Backlog)
			}
			// It keeps twice the bound (the refusals above say so); Pending
			// counts the frames among them, not the control items (advice).
			if _, out := a.Pending(); out != tc.maxIt {
				t.Fatalf("Pending counts %d items the sender keeps, want the %d frames", out, tc.maxIt)
			}
			release()
			testutil.WaitForWithin(t, "every item accepted", time.Minute, func() bool { return g.count() == len(sent) })
			testutil.WaitFor(t, "room again", func() bool { return !a.Backlogged("b") })
			if refused(transport.Control, i+3) {
				t.Fatal("a control refused after the peer took everything")
			}
			testutil.WaitFor(t, "the last item", func() bool { return g.count() == len(sent) })
			g.mu.Lock()
			defer g.mu.Unlock()
			for j, s := range g.got {
				if want := strconv.Itoa(sent[j]) + "/"; !strings.HasPrefix(s, want) {
					t.Fatalf("item %d is %.12q, want %q", j, s, want)
				}
			}
		})
	}
}

// Each link counts what went each way: the items Send accepted for the
// peer and their bytes, and the items from it handed to the handler; and
// its round-trip time, on Linux.
func TestEachLinkCountsItsItemsAndBytesEachWay(t *testing.T) {
	a, b, sa, sb := pairOf(t, tcp.Options{})
	checkExchange(t, a, b, sa, sb, "x", 50) // 50 items each way, "x#0".."x#49"
	var bytes uint64
	for i := range 50 {
		bytes += uint64(len("x#" + strconv.Itoa(i)))
	}
	for _, c := range []struct {
		tr   *tcp.Transport
		peer string
	}{{a, "b"}, {b, "a"}} {
		links := c.tr.Links()
		if len(links) != 1 || links[0].Peer != c.peer {
			t.Fatalf("%s's links: %+v, want one, to %s", c.tr.Local(), links, c.peer)
		}
		l := links[0]
		if l.SentItems != 50 || l.SentBytes != bytes || l.ReceivedItems != 50 || l.ReceivedBytes != bytes || !l.Up {
			t.Fatalf("%s's link to %s: %+v, want 50 items and %d bytes each way, up", c.tr.Local(), c.peer, l, bytes)
		}
		if linux := runtime.GOOS == "linux"; linux && l.RTT <= 0 || !linux && l.RTT != 0 {
			t.Fatalf("%s's link to %s has round-trip time %v: want the kernel's (above 0) on Linux, 0 elsewhere", c.tr.Local(), c.peer, l.RTT)
		}
	}
}
