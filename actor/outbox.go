package actor

import (
	"sync"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

// Permit sources (outbox): the sends of one source — an owner's
// handlers, the rest of an outside Publish, the messages off one link —
// waiting for job permits, in order.
//
// Owns: the source's queued sends. Lock: outbox.mu, a leaf; the sends run
// after it.
// May call: the permits and the admission callbacks it is given.
// Invariants: at most one waiter per source in the permit queue; a
// source's sends are admitted in the order they came.

// outbox holds the sends of one source — an owner's handlers, the rest of
// an external Publish, or the messages off one link — that wait for job
// permits. It has at most one waiter in the permit queue at a time, so its
// sends are admitted in order and sources are served oldest first. Sends
// queue here only when no permit is free (or earlier sends still wait);
// nothing here waits while holding a gate.
//
// It is not x/sync/semaphore: a semaphore's waiter is a goroutine blocked
// in Acquire, while a source here must not block (a handler, a link's
// receive loop): its waiter is a callback (mailbox.Grantee) that the
// permits call when one is free, in FIFO order across sources.
type outbox struct {
	adm    admitter
	budget *peerBudget // a link's: what its sends leave when their admission begins
	mu     sync.Mutex
	head   *pendingSend // guarded by mu
	tail   *pendingSend
	queued bool // a waiter is in the permit queue; guarded by mu
}

// admitter is what an outbox calls once its sends hold permits: the
// admission (admission.go), which ranks above the owners and links whose
// outboxes these are, so it is handed to them as an interface.
type admitter interface {
	// permits returns the host's job permits.
	permits() *mailbox.Permits
	// admitGranted admits e, which holds a permit, to t.
	admitGranted(t target, e *mailbox.Envelope, relayed bool)
	// admitGrantedUntil admits e to t unless that would wait for the
	// store and mayWait is false (it reports false then; e is kept).
	admitGrantedUntil(t target, e *mailbox.Envelope, relayed bool, until int64, mayWait bool) bool
	// onLookupLane runs fn on t's look-up lane.
	onLookupLane(t target, fn func())
	// rejected counts a send to a target of kind the host refused, and why.
	rejected(kind, why string)
}

// pendingSend is one send waiting in an outbox: a message and its targets
// (one, or every subscriber of a fan-out, which share the message).
type pendingSend struct {
	link    *pendingSend
	m       *payload.Message
	one     [1]target
	targets []target
	next    int // index of the next target to admit; written under the outbox's mu
	fanout  bool
	relayed bool   // received off a link (not this host's own send)
	skip    bool   // counted in its link's budget as a skip notice
	bytes   uint32 // what it counts in its link's budget (outbox.budget): a frame's length (budgetBytes)
}

// sendOne sends m to t from a handler: at once if a permit is free and
// nothing is queued before it, else queued.
func (ob *outbox) sendOne(t target, m *payload.Message) {
	ob.mu.Lock()
	idle := ob.head == nil && !ob.queued
	ob.mu.Unlock()
	if idle && ob.adm.permits().TryAcquire() {
		e := newEnvelope(m)
		e.HoldPermit(ob.adm.permits())
		ob.adm.admitGranted(t, e, false)
		return
	}
	ps := &pendingSend{m: m}
	ps.one[0] = t
	ps.targets = ps.one[:]
	ob.enqueue(ps)
}

// idle reports whether nothing of the source waits for a permit.
func (ob *outbox) idle() bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.head == nil && !ob.queued
}

// enqueue adds ps behind the source's earlier sends and makes sure the
// source waits for a permit.
func (ob *outbox) enqueue(ps *pendingSend) {
	ob.mu.Lock()
	if ob.tail != nil {
		ob.tail.link = ps
	} else {
		ob.head = ps
	}
	ob.tail = ps
	wait := !ob.queued
	ob.queued = true
	ob.mu.Unlock()
	if wait {
		ob.adm.permits().Enqueue(ob)
	}
}

// Granted implements mailbox.Grantee: admit the next child with the permit,
// and keep going while permits are free without overtaking other waiters.
//
// The permits call it on whatever goroutine freed the permit — a worker
// ending a turn, a transport's delivery goroutine — which must not wait
// for the Location Store. A child whose object has no owner here (its
// admission may look it up, or forward it) is therefore admitted on a
// look-up lane instead, with its permit, as soon as it turns out to need a
// look-up or a forward; the source waits meanwhile (it is out of the
// permit queue), so its sends keep their order.
func (ob *outbox) Granted() { ob.grant() }

func (ob *outbox) grant() {
	for {
		ob.mu.Lock()
		ps := ob.head
		ob.mu.Unlock()
		t := ps.targets[ps.next]
		m := ps.m
		if ps.fanout {
			m = ps.m.Share()
		}
		e := newEnvelope(m)
		e.HoldPermit(ob.adm.permits())
		if !ob.adm.admitGrantedUntil(t, e, ps.relayed, 0, false) {
			// It would wait for the store: it goes on on a look-up lane,
			// and so does the source after it.
			ob.adm.onLookupLane(t, func() {
				ob.adm.admitGrantedUntil(t, e, ps.relayed, 0, true)
				if ob.advance(ps) {
					ob.grant()
				}
			})
			return
		}
		if !ob.advance(ps) {
			return
		}
	}
}

// advance counts one more of ps's targets done (its admission began) and
// retires ps if all its targets are done, and reports whether the
// source should go on now (another permit was free without overtaking a
// waiter); otherwise it has queued the source for its next permit, or the
// source is empty.
func (ob *outbox) advance(ps *pendingSend) bool {
	ob.mu.Lock()
	ps.next++ // under mu: Close counts what waits (waitingForPermits)
	var done *pendingSend
	if ps.next >= len(ps.targets) {
		done = ps
		ob.head = ps.link
		if ob.head == nil {
			ob.tail = nil
		}
	}
	empty := ob.head == nil
	if empty {
		ob.queued = false
	}
	ob.mu.Unlock()
	if done != nil && done.fanout {
		done.m.Release()
	}
	if done != nil && ob.budget != nil {
		ob.budget.release(int64(done.bytes), done.skip)
	}
	if empty {
		return false
	}
	if !ob.adm.permits().TryAcquire() {
		ob.adm.permits().Enqueue(ob)
		return false
	}
	return true
}

// Abandoned implements mailbox.Grantee: the host closed; every queued send
// ends (requests get ShuttingDown from the host, payloads are released).
func (ob *outbox) Abandoned() {
	ob.mu.Lock()
	ps := ob.head
	ob.head, ob.tail, ob.queued = nil, nil, false
	ob.mu.Unlock()
	for ; ps != nil; ps = ps.link {
		if ob.budget != nil {
			ob.budget.release(int64(ps.bytes), ps.skip)
		}
		for _, t := range ps.targets[ps.next:] {
			ob.adm.rejected(t.name(), RejectShuttingDown)
		}
		if ps.fanout || ps.next == 0 {
			ps.m.Release()
		}
	}
}
