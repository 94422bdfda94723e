package actor

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A serial runs one item at a time, and each caller's items in the order
// it gave them, whichever way they came: queued (add), run here when idle
// (tryHere) or run here in their place (runHere).
func TestSerialRunsOneItemAtATimeInEachCallersOrder(t *testing.T) {
	var wg sync.WaitGroup
	s := &serial{wg: &wg}
	var running atomic.Int32
	var overlap atomic.Bool
	const callers, items = 8, 300
	last := make([]int, callers) // touched only by the serial's work
	var disorder atomic.Bool
	var callersWG sync.WaitGroup
	for c := range callers {
		callersWG.Add(1)
		go func() {
			defer callersWG.Done()
			for i := 1; i <= items; i++ {
				work := func() {
					if running.Add(1) != 1 {
						overlap.Store(true)
					}
					if last[c] != i-1 {
						disorder.Store(true)
					}
					last[c] = i
					running.Add(-1)
				}
				switch i % 3 {
				case 0:
					s.add(work)
				case 1:
					s.tryHere(work)
				default:
					s.runHere(work)
				}
			}
		}()
	}
	callersWG.Wait()
	s.runHere(func() {}) // after every item added before it
	wg.Wait()
	if overlap.Load() {
		t.Fatal("two items of one serial ran at once")
	}
	if disorder.Load() {
		t.Fatal("a caller's items ran out of the order it gave them")
	}
	for c, n := range last {
		if n != items {
			t.Fatalf("caller %d: %d of %d items ran", c, n, items)
		}
	}
	if s.pending() != 0 {
		t.Fatalf("pending %d after every item ran", s.pending())
	}
}

// Work handed on with next runs right after the work that gave it, before
// what was queued meanwhile, and never on the goroutine of the caller
// whose tryHere ran that work: tryHere returns while it still runs.
func TestSerialNextRunsRightAfterItsWorkOffTheCallersGoroutine(t *testing.T) {
	var wg sync.WaitGroup
	s := &serial{wg: &wg}
	var order []string // touched only by the serial's work
	entered, release := make(chan struct{}), make(chan struct{})
	s.tryHere(func() { // the serial is idle: it runs here
		order = append(order, "step")
		s.add(func() { order = append(order, "queued during the step") })
		s.next(func() {
			close(entered)
			<-release
			order = append(order, "its second half")
		})
	})
	<-entered // it blocks on another goroutine, tryHere has returned
	s.tryHere(func() { order = append(order, "later") })
	close(release)
	s.runHere(func() {})
	wg.Wait()
	want := []string{"step", "its second half", "queued during the step", "later"}
	if len(order) != len(want) {
		t.Fatalf("ran %q; want %q", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("ran %q; want %q", order, want)
		}
	}
}
