package inproc

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/internal/fifo"
	"github.com/berthrt/berth/transport"
)

// The link part (link): the ordered queue from one host to another and
// the goroutine that delivers it.
//
// Owns: the link type; push, which copies an item into a recycled buffer
// (or a new one, handed over); run, the link's goroutine (one of its
// destination's calls), which delivers in batches of up to maxBatch and
// stops a batch short when the link breaks, dies or gets a delay (halt),
// and whose delay timer is the package's only clock; end, which hands
// back, drops or reclaims what was not delivered and takes the link off
// its hosts.
// Lock: link.mu, not held while a Handler runs; end takes Network.mu
// after releasing link.mu.
// May call: the destination's Handler (Deliver, Event), the sender's
// (Returned), host.go (enter, exit, event, publishOutLocked).
// Invariants: items are delivered in the order pushed, each at most once;
// after a halt at most one more item is delivered; a copy lent to Deliver
// is recycled only after Deliver returned.

// link is the ordered link from one host to another. Its goroutine is one
// of the destination's calls.
type link struct {
	from, to *host
	notify   chan struct{} // one slot: look at the queue again
	stop     chan struct{} // closed by killLocked: cuts a delay short
	ended    chan struct{} // closed when the link's goroutine ends
	// reclaimed is what the link had not delivered when it ended, if it
	// was to keep it (reclaim); written before ended is closed.
	reclaimed []transport.Item

	mu         sync.Mutex
	items      []transport.Item // queued from items[head]; guarded by mu
	due        []int64          // when each of items may be delivered (Latency: since epoch), 0 at once; guarded by mu
	free       [][]byte         // delivered copies, for reuse; guarded by mu
	queued     atomic.Int64     // len(items) - head, for WaitRoom's fast path (written under mu)
	inFlight   atomic.Int64     // taken off the queue, not yet delivered (raised under mu)
	halt       atomic.Bool      // broken, dead or delayed: deliver no more of a batch (written under mu)
	freeBytes  int              // their capacity in all; guarded by mu
	head       int              // guarded by mu
	sleeping   bool             // the goroutine waits for a wake; guarded by mu
	broken     bool             // Network.Break; guarded by mu
	delay      time.Duration    // Network.Delay; guarded by mu
	latency    time.Duration    // Network.Latency; guarded by mu
	flush      bool             // the sender closed gracefully: end once empty; guarded by mu
	senderGone bool             // the sender closed: its peer gets Gone when the link ends; guarded by mu
	dead       bool             // end now, undelivered items go as giveBack says; guarded by mu
	giveBack   bool             // frames not delivered go back to the sender; guarded by mu
	reclaim    bool             // the sender closes to send again what was not delivered: keep it (reclaimed); guarded by mu
	room       chan struct{}    // closed when the queue falls below low; guarded by mu
}

// push queues it, copying its Data if copy is set and the item is not
// Owned (under the network's read lock: both hosts are live). A small item
// is copied into a buffer the link recycles once the item has been
// delivered (lent to Deliver), so that a copy costs no allocation in the
// steady state; a large one into a new buffer, handed over (Owned).
func (l *link) push(it transport.Item, copy bool) {
	if it.Owned {
		copy = false
	}
	if copy && len(it.Data) > maxRecycled {
		it.Data, it.Owned = bytes.Clone(it.Data), true
		copy = false
	}
	l.mu.Lock()
	if copy {
		var buf []byte
		// The newest recycled buffers that fit (the last few looked at:
		// frames of a link come in a few sizes).
		for i, k := len(l.free)-1, 0; i >= 0 && k < 4; i, k = i-1, k+1 {
			if cap(l.free[i]) >= len(it.Data) {
				buf = l.free[i]
				last := len(l.free) - 1
				l.free[i], l.free[last] = l.free[last], nil
				l.free = l.free[:last]
				l.freeBytes -= cap(buf)
				break
			}
		}
		it.Data = append(buf[:0], it.Data...)
	}
	var due int64
	if l.latency > 0 {
		due = sinceEpoch() + int64(l.latency)
	}
	l.items = append(l.items, it)
	l.due = append(l.due, due)
	l.queued.Add(1)
	sleeping := l.sleeping
	l.mu.Unlock()
	if sleeping {
		l.wake() // a link that is delivering looks at its queue again unwoken
	}
}

// Recycling of copies: buffers of up to maxRecycled bytes, at most
// maxFreeBytes of them per link (enough for a queue of small frames as
// deep as the flow-control mark).
const (
	maxRecycled  = 16 << 10
	maxFreeBytes = 1 << 20
)

// recycleLocked keeps a delivered item's buffer for a later copy.
func (l *link) recycleLocked(b []byte) {
	if c := cap(b); c > 0 && c <= maxRecycled && l.freeBytes+c <= maxFreeBytes {
		l.free = append(l.free, b[:0])
		l.freeBytes += c
	}
}

// setHaltLocked updates halt, which a batch being delivered reads.
func (l *link) setHaltLocked() { l.halt.Store(l.broken || l.dead || l.delay > 0) }

func (l *link) wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

func (l *link) queuedLocked() int { return len(l.items) - l.head }

func (l *link) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queuedLocked() + int(l.inFlight.Load())
}

// killLocked makes the link end at once; with giveBack, the frames not
// delivered go back to the sender.
func (l *link) killLocked(giveBack bool) {
	if l.dead {
		return
	}
	l.dead, l.giveBack = true, giveBack
	l.setHaltLocked()
	close(l.stop)
	l.openRoomLocked()
}

func (l *link) openRoomLocked() {
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
}

// maxBatch is the most items the link takes off its queue under one lock.
const maxBatch = 64

// run delivers the link's items in order. It takes up to maxBatch of them
// off the queue at a time (one lock for the batch, and one to recycle
// their copies), and stops a batch short if the link breaks, dies or gets
// a delay meanwhile: the rest go back to the head of the queue, so a link
// delivers at most one item after Break returns, as an unbatched one would.
func (l *link) run() {
	defer l.to.calls.Done()
	delayed := false // the item at the head has waited out the delay
	var batch []transport.Item
	for {
		l.mu.Lock()
		for !l.dead && (l.queuedLocked() == 0 || l.broken) && !(l.flush && l.queuedLocked() == 0) {
			l.sleeping = true
			l.mu.Unlock()
			<-l.notify
			l.mu.Lock()
			l.sleeping = false
		}
		if l.dead || l.queuedLocked() == 0 {
			l.end() // unlocks
			return
		}
		n := min(l.queuedLocked(), maxBatch)
		if wait := l.dueLocked(&n); wait > 0 {
			l.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.stop:
			}
			t.Stop()
			continue // look again: the link may have broken or died meanwhile
		}
		if d := l.delay; d > 0 {
			if !delayed {
				l.mu.Unlock()
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-l.stop:
				}
				t.Stop()
				delayed = true
				continue // look again: the link may have broken or died meanwhile
			}
			n = 1 // each item waits out the delay
		}
		delayed = false
		batch = append(batch[:0], l.items[l.head:l.head+n]...)
		clear(l.items[l.head : l.head+n])
		l.queued.Add(-int64(n))
		l.inFlight.Store(int64(n))
		l.due, _ = fifo.Compact(l.due, l.head+n) // as items: the same length and head
		l.items, l.head = fifo.Compact(l.items, l.head+n)
		if l.room != nil && l.queuedLocked() < l.from.net.low {
			l.openRoomLocked()
		}
		l.mu.Unlock()
		done := len(batch)
		for i, it := range batch {
			if i > 0 && l.halt.Load() {
				done = i
				break
			}
			l.to.h.Deliver(l.from.name, it)
			l.inFlight.Add(-1)
		}
		l.mu.Lock()
		if done < len(batch) {
			l.requeueLocked(batch[done:])
		}
		if !l.from.net.noCopy {
			for _, it := range batch[:done] {
				if !it.Owned {
					l.recycleLocked(it.Data) // lent to Deliver only
				}
			}
		}
		l.mu.Unlock()
		clear(batch)
	}
}

// dueLocked cuts *n, the items to take off the head of the queue, to
// those whose Latency is up, and returns how long the head item's has
// still to run (then *n is not changed).
func (l *link) dueLocked(n *int) time.Duration {
	var now int64
	for i, due := range l.due[l.head : l.head+*n] {
		if due == 0 {
			continue
		}
		if now == 0 {
			now = sinceEpoch()
		}
		if due > now {
			if i == 0 {
				return time.Duration(due - now)
			}
			*n = i
			break
		}
	}
	return 0
}

// epoch is the origin of the links' due times.
var epoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(epoch)) }

// requeueLocked puts items a halted batch did not deliver back at the head
// of the queue, in order (due at once: their Latency was up).
func (l *link) requeueLocked(rest []transport.Item) {
	q := l.queuedLocked()
	l.items = append(append(make([]transport.Item, 0, len(rest)+q), rest...), l.items[l.head:]...)
	l.due = append(make([]int64, len(rest), len(rest)+q), l.due[l.head:]...)
	l.head = 0
	l.queued.Add(int64(len(rest)))
	l.inFlight.Add(-int64(len(rest)))
}

// end finishes the link's goroutine: it hands back or drops what was not
// delivered, takes the link off its hosts and tells the destination that
// the sender is gone if it is. Called with l.mu held; unlocks it.
func (l *link) end() {
	rest, giveBack, senderGone := l.items[l.head:], l.giveBack, l.senderGone
	if l.reclaim {
		for i := range rest {
			rest[i].Owned = true // the link is done with its buffers
		}
		l.reclaimed, rest = rest, nil
	}
	l.items, l.due, l.head = nil, nil, 0
	l.queued.Store(0)
	l.openRoomLocked()
	l.mu.Unlock()
	defer close(l.ended)
	n := l.from.net
	n.mu.Lock()
	if l.from.out[l.to] == l {
		delete(l.from.out, l.to)
		l.from.publishOutLocked()
	}
	if l.to.in[l.from] == l {
		delete(l.to.in, l.from)
	}
	n.mu.Unlock()
	if giveBack && l.from.enter() {
		for _, it := range rest {
			if it.Kind == transport.Frame || it.Kind == transport.Bounce {
				l.from.h.Returned(l.to.name, it)
			}
		}
		l.from.exit()
	}
	if senderGone {
		l.to.event(transport.Event{Peer: l.from.name, Kind: transport.Gone})
	}
}
