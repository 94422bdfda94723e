package tcp

import (
	"sync"

	"github.com/berthrt/berth/internal/fifo"
)

// inbox is the queue of handler calls for one peer, bounded: the reader of
// the peer's connection waits (waitRoom) while it holds more than the
// inbound marks, so a peer's items wait in its own send queue and in TCP's
// window, not here (back-pressure through the link); taken by the peer's
// delivery goroutine one at a time, in order (a mutex, a slice and a
// one-slot notify channel). It remembers the last item taken, so that a
// closing host knows exactly what its handler took.
//
// An item that arrives while the queue is empty and nothing is being
// delivered is taken by the goroutine that received it (take), which
// hands it to the handler itself (the connection's reader): one goroutine
// switch less on each message. Until
// that inline delivery ends (inlineDone) the delivery goroutine takes
// nothing, so calls stay one at a time and in order.
type inbox struct {
	notify chan struct{} // one slot: look at the queue again
	idle   *sync.Cond    // on mu: an inline delivery ended
	space  *sync.Cond    // on mu: calls were taken (or the inbox stopped)

	mu        sync.Mutex
	items     []delivery // queued from items[head]; guarded by mu
	bytes     int        // of the items' data queued; guarded by mu
	head      int        // guarded by mu
	sleeping  bool       // the goroutine waits for notify; guarded by mu
	inFlight  bool       // the goroutine is in a handler call; guarded by mu
	inline    bool       // a receiving goroutine is in a handler call (take); guarded by mu
	stopped   bool       // take nothing more (this host closes); guarded by mu
	endEmpty  bool       // end the goroutine once the queue is empty (the peer was removed); guarded by mu
	lastEpoch uint32     // of the last item taken; guarded by mu
	lastSeq   uint64     // of the last item taken; guarded by mu
}

func newInbox() *inbox {
	q := &inbox{notify: make(chan struct{}, 1)}
	q.idle = sync.NewCond(&q.mu)
	q.space = sync.NewCond(&q.mu)
	return q
}

func (q *inbox) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// push queues ds, in order (dropped once stopped).
func (q *inbox) push(ds []delivery) {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, ds...)
	for i := range ds {
		q.bytes += len(ds[i].item.Data)
	}
	sleeping := q.sleeping
	q.mu.Unlock()
	if sleeping {
		q.wake()
	}
}

// take is push, except that when the queue is empty and no call is in
// progress and ds starts with an item, it takes that item for the caller
// to deliver (took), queueing the rest behind it; the caller then calls
// the handler and inlineDone.
func (q *inbox) take(ds []delivery) (d delivery, took bool) {
	q.mu.Lock()
	if q.stopped || q.head != len(q.items) || q.inFlight || q.inline || len(ds) == 0 || ds[0].what != dItem {
		q.mu.Unlock()
		q.push(ds)
		return delivery{}, false
	}
	d = ds[0]
	q.inline = true
	q.lastEpoch, q.lastSeq = d.epoch, d.seq
	q.items = append(q.items, ds[1:]...)
	for i := range ds[1:] {
		q.bytes += len(ds[1+i].item.Data)
	}
	q.mu.Unlock()
	return d, true
}

// inlineDone ends the delivery take handed out: the delivery goroutine
// may take calls again. It reports whether the inbox was stopped
// meanwhile.
func (q *inbox) inlineDone() (stopped bool) {
	q.mu.Lock()
	q.inline = false
	stopped = q.stopped
	if stopped {
		q.idle.Broadcast() // waitInline is called only once stopped
	}
	wake := q.sleeping && q.head < len(q.items)
	q.mu.Unlock()
	if wake {
		q.wake()
	}
	return stopped
}

// waitInline waits until no inline delivery runs.
func (q *inbox) waitInline() {
	q.mu.Lock()
	for q.inline {
		q.idle.Wait()
	}
	q.mu.Unlock()
}

// next waits for the next call and takes it; ok is false when the
// goroutine must end. more says whether more calls are queued behind it.
func (q *inbox) next() (d delivery, more, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inFlight = false
	for !q.stopped && (q.head == len(q.items) || q.inline) {
		if q.endEmpty && !q.inline && q.head == len(q.items) {
			return delivery{}, false, false
		}
		q.sleeping = true
		q.mu.Unlock()
		<-q.notify
		q.mu.Lock()
		q.sleeping = false
	}
	if q.stopped {
		return delivery{}, false, false
	}
	d = q.items[q.head]
	q.bytes -= len(d.item.Data)
	q.space.Broadcast()
	q.items[q.head] = delivery{}
	q.items, q.head = fifo.Compact(q.items, q.head+1)
	q.inFlight = true
	if d.what == dItem {
		q.lastEpoch, q.lastSeq = d.epoch, d.seq
	}
	return d, q.head < len(q.items), true
}

// stop makes the goroutine take nothing more and drops what is queued; it
// returns the last item taken (the one being delivered, if any, counts).
func (q *inbox) stop() (epoch uint32, seq uint64) {
	q.mu.Lock()
	q.stopped = true
	clear(q.items)
	q.items, q.head, q.bytes = nil, 0, 0
	q.space.Broadcast()
	epoch, seq = q.lastEpoch, q.lastSeq
	q.mu.Unlock()
	q.wake()
	return epoch, seq
}

// endWhenEmpty makes the goroutine end once it has taken what is queued.
func (q *inbox) endWhenEmpty() {
	q.mu.Lock()
	q.endEmpty = true
	q.space.Broadcast()
	q.mu.Unlock()
	q.wake()
}

// pending returns how many calls are queued or in progress.
func (q *inbox) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.items) - q.head
	if q.inFlight {
		n++
	}
	if q.inline {
		n++
	}
	return n
}

// waitRoom waits while more than maxItems calls, or more than maxBytes
// bytes of items' data, are queued; it returns false once the inbox is to
// end (the peer was removed: nothing more is to be read for it). A
// stopped inbox (this host closes) has room: what arrives is only
// acknowledgements, or dropped.
func (q *inbox) waitRoom(maxItems, maxBytes int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.stopped && !q.endEmpty && (len(q.items)-q.head > maxItems || q.bytes > maxBytes) {
		q.space.Wait()
	}
	return !q.endEmpty
}
