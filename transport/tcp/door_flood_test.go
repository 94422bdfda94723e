package tcp_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
)

// Sockets that connect and send nothing, 192 of them held open by a
// stranger who opens another within a millisecond of one being closed, do not shut the
// door: a peer's handshakes go on succeeding (at least 45 of 50 in a row),
// and the link between the two hosts, broken by each of them, comes back
// through the flood. Before, the door refused every connection while 64
// were in their handshake, each for up to HandshakeTimeout: 0 of 50
// handshakes succeeded.
func TestIdleSocketsDoNotShutTheDoorToPeers(t *testing.T) {
	a, b, sa, sb := pairOf(t, testOptions())
	checkExchange(t, a, b, sa, sb, "before", 10)
	cert, err := testCA().IssueTLS("b")
	if err != nil {
		t.Fatal(err)
	}
	const idle = 192
	refused := a.Stats().Refused
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn // the stranger's, closed at the end; guarded by mu
	done := false       // the end came: a new socket is closed at once; guarded by mu
	for range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", a.Addr())
				if err != nil {
					continue
				}
				mu.Lock()
				if done {
					mu.Unlock()
					_ = c.Close()
					return
				}
				open = append(open, c)
				mu.Unlock()
				var one [1]byte
				_, _ = c.Read(one[:]) // idle until the host closes it
				_ = c.Close()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	defer func() {
		close(stop)
		mu.Lock()
		done = true
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	// The door is full and turning over: the idle sockets pushed each
	// other out (counted as refused) many times.
	testutil.WaitFor(t, "the door full of idle sockets", func() bool { return a.Stats().Refused >= refused+2*idle })
	began := time.Now()
	ok := 0
	var last error
	for range 50 {
		c, err := dialRaw(t, a, testCA(), &cert, "b")
		if err != nil {
			last = err
			continue
		}
		ok++
		_ = c.Close()
	}
	t.Logf("%d of 50 handshakes succeeded under %d idle sockets in %v (last error: %v); refused so far %d",
		ok, idle, time.Since(began).Round(time.Millisecond), last, a.Stats().Refused-refused)
	if ok < 45 {
		t.Fatalf("%d of 50 handshakes succeeded under %d idle sockets, want at least 45 (last error: %v)", ok, idle, last)
	}
	began = time.Now()
	checkExchange(t, a, b, sa, sb, "during", 10)
	t.Logf("the link between the hosts came back and carried items in %v", time.Since(began).Round(time.Millisecond))
}
