package remote_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/remote"
)

// The kill test runs the sender in a child process (this test binary,
// re-executed with childEnv set), so that each process has one protoactor
// remote, as in production (and as the race detector needs, see
// needProcessPerHost).
const (
	childEnv    = "BERTH_REMOTE_CHILD"     // the child's role; its value is the parent's address
	childItems  = "BERTH_REMOTE_CHILD_N"   // how many items the child sends
	childPrefix = "BERTH_REMOTE_CHILD_OUT" // the child's lines to the parent start with this
)

func TestMain(m *testing.M) {
	if parent := os.Getenv(childEnv); parent != "" {
		os.Exit(runChild(parent))
	}
	os.Exit(m.Run())
}

// childHandler is the child's handler: it reports Up of the parent.
type childHandler struct{ up chan struct{} }

func (c *childHandler) Deliver(string, transport.Item)  {}
func (c *childHandler) Returned(string, transport.Item) {}
func (c *childHandler) Event(e transport.Event) {
	if e.Kind == transport.Up {
		select {
		case c.up <- struct{}{}:
		default:
		}
	}
}

// runChild is the sender process: it tells the parent its address on
// stdout, waits until the parent is up, sends its items (100 bytes each,
// numbered) with flow control, and closes gracefully.
func runChild(parentAddr string) int {
	var n int
	fmt.Sscan(os.Getenv(childItems), &n)
	h := &childHandler{up: make(chan struct{}, 1)}
	tr, err := remote.Listen("child", h, testOptions())
	if err != nil {
		fmt.Println(childPrefix, "error", err)
		return 1
	}
	fmt.Println(childPrefix, "addr", tr.Addr())
	if err := tr.AddPeer("parent", parentAddr); err != nil {
		fmt.Println(childPrefix, "error", err)
		return 1
	}
	<-h.up
	buf := make([]byte, 100)
	for i := range n {
		binary.BigEndian.PutUint64(buf, uint64(i))
		if err := tr.WaitRoom(context.Background(), "parent"); err != nil {
			fmt.Println(childPrefix, "error", err)
			return 1
		}
		if err := tr.Send("parent", transport.Item{Kind: transport.Frame, Data: buf}); err != nil {
			fmt.Println(childPrefix, "error", err)
			return 1
		}
	}
	err = tr.Close(true)
	fmt.Println(childPrefix, "closed", err, fmt.Sprintf("%+v", tr.Stats()))
	if err != nil {
		return 1
	}
	return 0
}

// proxy forwards TCP connections to target; cut closes every connection
// it carries (both ends), as a network failure would.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
	cuts   int
}

func newProxy(t *testing.T) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.cuts++
}

// orderSink checks what the parent receives from the child: every item
// once, in order.
type orderSink struct {
	mu    sync.Mutex
	next  uint64
	bad   []string
	gone  bool
	downs int
}

func (s *orderSink) Deliver(from string, it transport.Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(it.Data) != 100 {
		s.bad = append(s.bad, fmt.Sprintf("item of %d bytes", len(it.Data)))
		return
	}
	if got := binary.BigEndian.Uint64(it.Data); got != s.next && len(s.bad) < 10 {
		s.bad = append(s.bad, fmt.Sprintf("got item %d, want %d", got, s.next))
		s.next = got
	}
	s.next++
}

func (s *orderSink) Returned(string, transport.Item) {}

func (s *orderSink) Event(e transport.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Kind {
	case transport.Gone:
		s.gone = true
	case transport.Down:
		s.downs++
	}
}

func (s *orderSink) count() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// TestEveryItemOnceInOrderAcrossKilledConnections: a sender in another
// process streams items to this one through a TCP proxy that kills every
// connection (protoactor drops what it had queued) at random points while
// the items flow; every item is delivered once, in order, and the
// sender's graceful Close returns once all arrived.
func TestEveryItemOnceInOrderAcrossKilledConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const n = 30000
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) }) // registered first: runs after the proxy's cleanup

	px := newProxy(t)
	opts := testOptions()
	opts.Listen = freeAddr(t)
	opts.Advertise = px.ln.Addr().String() // the child reaches this host through the proxy
	px.mu.Lock()
	px.target = opts.Listen
	px.mu.Unlock()
	sink := &orderSink{}
	tr, err := remote.Listen("parent", sink, opts)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+tr.Addr(), fmt.Sprintf("%s=%d", childItems, n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), childPrefix+" "); ok {
				lines <- l
			}
		}
	}()
	first := <-lines
	addr, ok := strings.CutPrefix(first, "addr ")
	if !ok {
		t.Fatalf("child: %s", first)
	}
	if err := tr.AddPeer("child", addr); err != nil {
		t.Fatal(err)
	}
	// Kill the connections at random points of the stream.
	marks := []uint64{uint64(rng.IntN(n / 4)), n/4 + uint64(rng.IntN(n/4)), n/2 + uint64(rng.IntN(n/4))}
	for _, m := range marks {
		testutil.WaitForWithin(t, fmt.Sprintf("%d items", m), 60*time.Second, func() bool { return sink.count() >= m })
		px.cut()
	}
	var last string
	for l := range lines {
		last = l
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v (%s)", err, last)
	}
	t.Logf("child: %s", last)
	testutil.WaitFor(t, "Gone of the child", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.gone
	})
	if err := tr.Close(true); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.bad) > 0 {
		t.Fatalf("order broken: %v", sink.bad)
	}
	if sink.next != n {
		t.Fatalf("%d items delivered, want %d", sink.next, n)
	}
	t.Logf("cuts %d, Down events %d, parent stats %+v", px.cuts, sink.downs, tr.Stats())
}

// freeAddr returns a loopback address with a port that was free.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
