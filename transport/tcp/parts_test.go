package tcp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// valve is a TCP proxy to one address whose dialer-to-listener direction
// passes only the bytes the test allows (the other direction is free).
type valve struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	cond   *sync.Cond
	allow  int64 // bytes that may pass; -1: any
	passed int64
	closed bool
	rate   float64 // bytes a second passed (0: as fast as they come)
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newValve(t testing.TB, to string) *valve {
	t.Helper()
	v := newPacedValve(t, to, 0)
	t.Cleanup(v.close)
	return v
}

// listenPair starts hosts a and b on loopback with opts and handlers ha
// and hb, not yet each other's peers; the caller closes them.
func listenPair(tb testing.TB, opts tcp.Options, ha, hb transport.Handler) (a, b *tcp.Transport) {
	tb.Helper()
	a, err := tcp.Listen("a", ha, opts)
	if err != nil {
		tb.Fatal(err)
	}
	b, err = tcp.Listen("b", hb, opts)
	if err != nil {
		_ = a.Close(false)
		tb.Fatal(err)
	}
	return a, b
}

func (v *valve) addr() string { return v.ln.Addr().String() }

func (v *valve) accept() {
	defer v.wg.Done()
	for {
		c, err := v.ln.Accept()
		if err != nil {
			return
		}
		if v.rate == 0 {
			// A small receive buffer: what the dialer wrote ahead of the
			// valve waits in its own socket, not in this one.
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
		}
		up, err := net.Dial("tcp", v.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		v.mu.Lock()
		v.conns = append(v.conns, c, up)
		v.mu.Unlock()
		v.wg.Add(2)
		go func() { defer v.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		go func() { defer v.wg.Done(); v.pass(c, up); _ = up.Close() }()
	}
}

// pass copies from c to up, as far as the valve allows.
func (v *valve) pass(c, up net.Conn) {
	buf := make([]byte, 64<<10)
	var start time.Time
	var paced int64
	for {
		v.mu.Lock()
		for !v.closed && v.allow >= 0 && v.passed >= v.allow {
			v.cond.Wait()
		}
		n := len(buf)
		if v.allow >= 0 {
			n = int(min(int64(n), v.allow-v.passed))
		}
		closed := v.closed
		v.mu.Unlock()
		if closed {
			return
		}
		k, err := c.Read(buf[:n])
		if k > 0 && v.rate > 0 {
			// Paced from the first byte: by now, paced bytes / rate.
			if paced == 0 {
				start = time.Now()
			}
			paced += int64(k)
			time.Sleep(time.Until(start.Add(time.Duration(float64(paced) / v.rate * float64(time.Second)))))
		}
		if k > 0 {
			if _, werr := up.Write(buf[:k]); werr != nil {
				return
			}
			v.mu.Lock()
			v.passed += int64(k)
			v.cond.Broadcast()
			v.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// shut lets nothing more pass until let.
func (v *valve) shut() {
	v.mu.Lock()
	v.allow = v.passed
	v.mu.Unlock()
}

// let lets n more bytes pass (n < 0: any), and returns the count they
// take the valve to.
func (v *valve) let(n int64) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if n < 0 {
		v.allow = -1
	} else {
		v.allow = v.passed + n
	}
	v.cond.Broadcast()
	return v.allow
}

// through reports the bytes that have passed.
func (v *valve) through() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.passed
}

func (v *valve) close() {
	v.mu.Lock()
	v.closed = true
	v.cond.Broadcast()
	for _, c := range v.conns {
		_ = c.Close()
	}
	v.mu.Unlock()
	_ = v.ln.Close()
	v.wg.Wait()
}

// counter is a Handler that counts and keeps what it is given.
type counter struct {
	mu    sync.Mutex
	items [][]byte
	n     atomic.Int64
}

func (c *counter) Deliver(_ string, it transport.Item) {
	c.mu.Lock()
	c.items = append(c.items, it.Data)
	c.mu.Unlock()
	c.n.Add(1)
}
func (*counter) Returned(string, transport.Item) {}
func (*counter) Event(transport.Event)           {}

// TestAPeersSendsGoOnWhileALargeItemIsWrittenToIt: a writes a 40 MiB item
// to b over a link that passes a's bytes only as the test lets them
// through; b meanwhile sends a many small items, each after WaitRoom,
// with high marks of 8 items. b's room opens only when a tells b what it
// took, and a's acknowledgements travel on a's connection behind the
// large item: they go between its parts (session.between), so b sends
// all its items while the large one is still on its way. Without them, b
// waits for the whole item. The test lets bytes through only once a has
// taken everything b sent so far, so the outcome does not depend on how
// fast either host runs.
func TestAPeersSendsGoOnWhileALargeItemIsWrittenToIt(t *testing.T) {
	opts := tcp.Options{Insecure: true, HighItems: 8, MaxPendingItems: 64}
	ha, hb := &counter{}, &counter{}
	a, b := listenPair(t, opts, ha, hb)
	v := newValve(t, b.Addr())
	defer func() {
		_ = a.Close(true)
		_ = b.Close(true)
		v.close()
		testutil.CheckNoGoroutines(t)
	}()
	if err := a.AddPeer("b", v.addr()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer("a", a.Addr()); err != nil {
		t.Fatal(err)
	}
	// Both ways once, so that both connections are up.
	if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send("a", transport.Item{Kind: transport.Frame, Data: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the first items", func() bool { return ha.n.Load() == 1 && hb.n.Load() == 1 })

	v.shut()
	big := make([]byte, 40<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: big}); err != nil {
		t.Fatal(err)
	}
	const small = 16 // twice b's high mark
	var sent atomic.Int64
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := range small {
			if err := b.WaitRoom(ctx, "a"); err != nil {
				done <- err
				return
			}
			if err := b.Send("a", transport.Item{Kind: transport.Frame, Data: []byte{byte(i)}}); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()
	// Let a's bytes through 160 KiB at a time (past at least one part's
	// end), each time once a has taken everything b sent.
	finished, atArrival := false, int64(0)
	for !finished {
		testutil.WaitFor(t, "a to take what b sent", func() bool { return ha.n.Load() == 1+sent.Load() || len(done) > 0 })
		if hb.n.Load() > 1 {
			atArrival = sent.Load()
			break // checked below
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
			continue
		default:
		}
		at := v.let(160 << 10)
		testutil.WaitFor(t, "the valve's bytes to pass", func() bool {
			return v.through() >= at || hb.n.Load() > 1 || len(done) > 0
		})
	}
	if hb.n.Load() > 1 {
		t.Fatalf("a's 40 MiB item arrived before b could send its %d items (%d sent by then): a's acknowledgements waited behind it", small, atArrival)
	}
	t.Logf("b sent its %d items with %d bytes of a's through the valve", small, v.through())
	v.let(-1)
	testutil.WaitFor(t, "the large item", func() bool { return hb.n.Load() == 2 })
	testutil.WaitFor(t, "b's items", func() bool { return ha.n.Load() == 1+small })
	hb.mu.Lock()
	got := hb.items[1]
	hb.mu.Unlock()
	if !bytes.Equal(got, big) {
		t.Fatalf("the large item arrived with %d bytes, not as sent", len(got))
	}
	ha.mu.Lock()
	defer ha.mu.Unlock()
	for i, it := range ha.items[1:] {
		if len(it) != 1 || int(it[0]) != i {
			t.Fatalf("b's item %d arrived as %v", i, it)
		}
	}
}

// BenchmarkPeerSendsBesideALargeItem: a writes a 64 MiB item to b over a
// link paced at 100 MB/s (about a gigabit network) or 20 MB/s, while b
// sends a small items as fast as WaitRoom lets it (high marks of 64
// items). It reports b's longest wait for room while the item was on its
// way, how many items b sent meanwhile, and the times b's link to a went
// Down (b hears a only on a's connection, where the item is).
func BenchmarkPeerSendsBesideALargeItem(bm *testing.B) {
	for _, rate := range []float64{1000e6, 100e6, 20e6} {
		bm.Run(fmt.Sprintf("%dMBps", int(rate/1e6)), func(bm *testing.B) { benchBesideALargeItem(bm, rate) })
	}
}

func benchBesideALargeItem(bm *testing.B, rate float64) {
	opts := tcp.Options{Insecure: true, HighItems: 64}
	ha, hb := &counter{}, &eventCounter{}
	a, b := listenPair(bm, opts, ha, hb)
	v := newPacedValve(bm, b.Addr(), rate)
	defer func() {
		bm.StopTimer()
		_ = a.Close(true)
		_ = b.Close(true)
		v.close()
	}()
	_ = a.AddPeer("b", v.addr())
	_ = b.AddPeer("a", a.Addr())
	big := make([]byte, 64<<20)
	ctx := context.Background()
	var maxWait time.Duration
	var during, downs int64
	bm.ResetTimer()
	for range bm.N {
		want := hb.n.Load() + 1
		downs0 := hb.downs.Load()
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: big}); err != nil {
			bm.Fatal(err)
		}
		last := time.Now()
		for hb.n.Load() < want {
			if err := b.WaitRoom(ctx, "a"); err != nil {
				bm.Fatal(err)
			}
			if err := b.Send("a", transport.Item{Kind: transport.Frame, Data: []byte("x")}); err != nil {
				bm.Fatal(err)
			}
			now := time.Now()
			maxWait = max(maxWait, now.Sub(last))
			last = now
			during++
		}
		downs += hb.downs.Load() - downs0
	}
	bm.ReportMetric(float64(maxWait.Microseconds())/1000, "max-wait-ms")
	bm.ReportMetric(float64(during)/float64(bm.N), "sent-during/op")
	bm.ReportMetric(float64(downs)/float64(bm.N), "downs/op")
}

// eventCounter counts items and Down events.
type eventCounter struct {
	n, downs atomic.Int64
}

func (c *eventCounter) Deliver(string, transport.Item) { c.n.Add(1) }
func (*eventCounter) Returned(string, transport.Item)  {}
func (c *eventCounter) Event(e transport.Event) {
	if e.Kind == transport.Down {
		c.downs.Add(1)
	}
}

// newPacedValve is a valve that passes the dialer's bytes at rate bytes
// a second (0: as fast as they come); the caller closes it.
func newPacedValve(tb testing.TB, to string, rate float64) *valve {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	v := &valve{ln: ln, to: to, allow: -1, rate: rate}
	v.cond = sync.NewCond(&v.mu)
	v.wg.Add(1)
	go v.accept()
	return v
}

// BenchmarkLargeItem: one 64 MiB item from a to b on loopback (plaintext),
// nothing else on the link; the floor beside it, BenchmarkLargeItemRawTCP,
// writes the same bytes on a bare TCP connection.
func BenchmarkLargeItem(bm *testing.B) {
	opts := tcp.Options{Insecure: true}
	ha, hb := &counter{}, &eventCounter{}
	a, b := listenPair(bm, opts, ha, hb)
	defer func() {
		bm.StopTimer()
		_ = a.Close(true)
		_ = b.Close(true)
	}()
	_ = a.AddPeer("b", b.Addr())
	_ = b.AddPeer("a", a.Addr())
	big := make([]byte, 64<<20)
	bm.SetBytes(int64(len(big)))
	bm.ResetTimer()
	for range bm.N {
		want := hb.n.Load() + 1
		if err := a.Send("b", transport.Item{Kind: transport.Frame, Data: big}); err != nil {
			bm.Fatal(err)
		}
		for hb.n.Load() < want {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// BenchmarkLargeItemRawTCP is BenchmarkLargeItem's floor: 64 MiB written on
// a bare loopback TCP connection and read whole into a buffer of its own
// by a goroutine, which answers with one byte.
func BenchmarkLargeItemRawTCP(bm *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		bm.Fatal(err)
	}
	defer ln.Close()
	const size = 64 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			b := make([]byte, size)
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		bm.Fatal(err)
	}
	defer c.Close()
	big := make([]byte, size)
	var ack [1]byte
	bm.SetBytes(size)
	bm.ResetTimer()
	for range bm.N {
		if _, err := c.Write(big); err != nil {
			bm.Fatal(err)
		}
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			bm.Fatal(err)
		}
	}
}
