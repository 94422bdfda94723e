// Package testutil holds helpers shared by berth's tests: a payload release
// ledger, a goroutine leak check and polling with a deadline. It is not
// part of berth's API.
package testutil

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

// Ledger counts final payload releases per buffer id. Use Observe as a
// pool's (or host's) release observer.
type Ledger struct {
	mu     sync.Mutex
	counts map[uint64]int
	total  atomic.Int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{counts: map[uint64]int{}} }

// Observe records one release.
func (l *Ledger) Observe(ev payload.ReleaseEvent) {
	l.mu.Lock()
	l.counts[ev.ID]++
	l.mu.Unlock()
	l.total.Add(1)
}

// Total returns the number of releases seen.
func (l *Ledger) Total() int64 { return l.total.Load() }

// Count returns how often buffer id was released.
func (l *Ledger) Count(id uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[id]
}

// CheckExactlyOnce fails t unless buffers 1..issued were each released
// exactly once and no other buffer was.
func (l *Ledger) CheckExactlyOnce(t testing.TB, issued uint64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if issued == 0 {
		t.Fatal("no buffers issued; the ledger is not wired")
	}
	for id := uint64(1); id <= issued; id++ {
		if n := l.counts[id]; n != 1 {
			t.Fatalf("payload buffer %d released %d times, want exactly 1 (of %d issued)", id, n, issued)
		}
	}
	if len(l.counts) != int(issued) {
		t.Fatalf("%d buffers released, %d issued", len(l.counts), issued)
	}
}

// WaitFor polls cond until it holds, failing t after 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, what, 10*time.Second, cond)
}

// WaitForWithin polls cond until it holds, failing t after d.
func WaitForWithin(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// CheckNoGoroutines fails t if a goroutine running berth or protoactor code
// (other than test runners) is alive, after polling for up to 5 s for
// goroutines that are finishing.
func CheckNoGoroutines(t testing.TB) {
	t.Helper()
	var leaked []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		leaked = leaked[:0]
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "runtime.Stack(") || strings.Contains(g, "testing.(*T).Run") ||
				strings.Contains(g, "testing.(*B).run") || strings.Contains(g, "testing.runTests") {
				continue
			}
			if strings.Contains(g, "berthrt/berth/") || strings.Contains(g, "protoactor-go") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after the host stopped:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}
