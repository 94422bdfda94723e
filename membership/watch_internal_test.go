package membership

import "testing"

// A watcher whose pump stays one event behind its writer keeps a bounded
// backlog array: the consumed prefix is given back (fifo.Compact), not kept
// until the backlog happens to empty.
func TestWatcherBacklogGivesBackWhatThePumpTook(t *testing.T) {
	w := &watcher{limit: 16, notify: make(chan struct{}, 1)}
	w.push(Event{Rev: 1}, nil)
	for rev := uint64(2); rev <= 100_000; rev++ {
		w.push(Event{Rev: rev}, nil)
		if ev, ok := w.pop(); !ok || ev.Rev != rev-1 {
			t.Fatalf("pop = %v, %v; want revision %d", ev.Rev, ok, rev-1)
		}
	}
	if c := cap(w.queue); c > 4096 {
		t.Fatalf("backlog array holds %d slots for one pending event", c)
	}
}
