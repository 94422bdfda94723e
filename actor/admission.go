package actor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
)

// The admission part (admission): from a send to a queue.
//
// Owns: the path of a Tell, Ask or Publish from its call to an owner's
// mailbox or to the transport: the host-wide job permit, the wait policy
// (a send from outside waits for room; a handler's send is granted and
// never blocks its turn), the stamp of a message's place in this host's
// stream, and the deferred sends of handlers to a host that is leaving.
// Lock: deferredSends.mu, a leaf; streamShard.mu (routes) only for the
// stamp itself.
// May call: the router, owners, requests, peers, gaps and the leaves.
// Invariants: a send is stamped once (a retry keeps its stamp); a send
// that is refused leaves no gap in its sender's stream; every refusal is
// a typed error at the sender and counted.

// sendRemote hands m, a message this host sends to t's object, to the
// transport for host, stamping it first (once). Tell completes here: the
// transport accepted it. With a non-nil ctx (a send from outside the
// handlers) it first waits for room on the link. If the host is gone or
// leaving, errHostGone is returned (the caller looks the object up
// again); on any failure m stays the caller's.
func (ad *admission) sendRemote(ctx context.Context, host string, t target, m *payload.Message) error {
	if mx := ad.view.maxMessage(host); mx > 0 && int64(m.Len()) > mx {
		return mailbox.ErrTooLarge // the destination's lanes are smaller than this host's
	}
	if ctx != nil {
		if err := ad.peers.waitRoom(ctx, host, len(m.Frame())); err != nil {
			return err
		}
	}
	if ad.peers.backlogged(host) {
		return ErrPeerBacklog // not stamped: no gap is left
	}
	// The run the message is handed to, read before the send: the stream
	// notes it (route.Streams.NextTo), and a request of this host too
	// (requests.go) — a fact about that run that comes meanwhile is seen
	// by handedTo.
	to := ad.view.runOf(host)
	ad.stamp(t, m, to)
	op, mine := ad.requests.own(m)
	if err := ad.peers.sendMessage(host, m, transport.Frame); err != nil {
		return err
	}
	if mine {
		ad.requests.handedTo(op, to)
	}
	return nil
}

// stamp gives m, a message this host sends to t's object and hands to
// run to (this host's own run for a local owner), its place in this
// host's stream for the object — a new epoch when every message of the
// stream's epoch went to runs that failed since (route.Streams.NextTo) —
// unless it has one: a retry, whose new hop the stream notes.
func (ad *admission) stamp(t target, m *payload.Message, to peerRun) {
	if ad.peers.tr == nil || t.kr == nil {
		return
	}
	hv := m.Header()
	if string(hv.Origin()) != ad.name {
		return // another host's message
	}
	obj := t.obj()
	if hv.Seq() != 0 {
		ad.routes.handed(obj, route.Stamp{Epoch: hv.Epoch(), Seq: hv.Seq()}, to)
		return
	}
	st := ad.routes.stamp(obj, to)
	m.Stamp(st.Epoch, st.Seq)
}

// waitPressure waits, for a send from outside the handlers (ctx non-nil)
// of a message not yet stamped, until t's object is not paused here: up
// to SendTimeout (ErrPushedBack), ctx's end, or the host's close.
func (ad *admission) waitPressure(ctx context.Context, t target) error {
	if ctx == nil || t.kr == nil {
		return nil
	}
	ch := ad.pressure.wait(t.obj())
	if ch == nil {
		return nil
	}
	ad.pressureWaits.Add(1)
	timer := time.NewTimer(ad.cfg.SendTimeout)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-timer.C:
		return ErrPushedBack
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-ad.life.closing():
		return ErrShuttingDown
	}
}

// fromHere reports whether turn is a turn of one of this host's owners
// (its sends go through the owner's outbox).
func (ad *admission) fromHere(turn *Context) bool {
	return turn != nil && turn.owner != nil && turn.owner.t == ad.owners
}

// accepts reports whether the host takes a send from this context.
func (ad *admission) accepts(turn *Context) bool {
	if ad.fromHere(turn) {
		return ad.life.acceptsInternal()
	}
	return ad.life.acceptsExternal()
}

// dispatch admits m for t and takes ownership of m in every case. From a
// handler of this host it goes through the owner's outbox; from outside, it
// waits for a permit, then for lane room.
func (ad *admission) dispatch(ctx context.Context, turn *Context, t target, m *payload.Message) error {
	_, err := ad.dispatchRun(ctx, turn, t, m, false)
	return err
}

// dispatchRun is dispatch that, with inline, may run the item's turn on
// this goroutine (Config.InlineAsk); it reports whether it did.
func (ad *admission) dispatchRun(ctx context.Context, turn *Context, t target, m *payload.Message, inline bool) (bool, error) {
	if int64(m.Len())+mailbox.ItemOverhead > ad.cfg.ApplicationLimits.Bytes {
		// Larger than any lane: refused here, the same whether the
		// object runs on this host or another.
		m.Release()
		ad.obs.Rejected(t.name(), RejectTooLarge)
		return false, mailbox.ErrTooLarge
	}
	if ad.fromHere(turn) {
		turn.owner.send(t, m)
		return false, nil
	}
	// Pushed back by the object's reorder buffer: wait before taking a
	// permit, so that waiting senders hold none (the message the buffer
	// waits for may need one).
	if err := ad.waitPressure(ctx, t); err != nil {
		m.Release()
		ad.obs.Rejected(t.name(), rejectReason(err))
		return false, err
	}
	if err := ad.acquirePermit(ctx); err != nil {
		m.Release()
		switch {
		case errors.Is(err, mailbox.ErrPermitsClosed):
			ad.obs.Rejected(t.name(), RejectShuttingDown)
			return false, ErrShuttingDown
		case errors.Is(err, ErrPaused):
			ad.obs.Rejected(t.name(), RejectPaused)
			return false, ErrPaused
		}
		ad.obs.Rejected(t.name(), RejectCancelled)
		return false, ctxErr(ctx)
	}
	e := newEnvelope(m)
	e.HoldPermit(ad.jobs.permits)
	return ad.admitWait(ctx, t, e, inline)
}

// acquirePermit takes a job permit for a send from outside the handlers,
// waiting for one until ctx ends — or, once the host is in jeopardy, for
// at most SendTimeout: its permits may all be held by messages of objects
// that run no turn until the store answers, which may take as long as the
// store is away. It returns ErrPaused then (nothing was sent), the sender
// learns it and may send again. A wait that begins while the lease is live
// looks again when the lease's deadline passes (jeopardy begins then,
// unless a renewal moved it).
func (ad *admission) acquirePermit(ctx context.Context) error {
	p := ad.jobs.permits
	if p.TryAcquire() {
		return nil
	}
	for {
		if dl, live := ad.gate.liveUntil(); live {
			wctx, cancel := ctx, context.CancelFunc(func() {})
			if dl != 0 {
				wctx, cancel = context.WithDeadline(ctx, time.Unix(0, dl))
			}
			err := p.Acquire(wctx)
			cancel()
			if err == nil || ctx.Err() != nil || errors.Is(err, mailbox.ErrPermitsClosed) {
				return err
			}
			continue // the deadline passed: paused now, unless renewed
		}
		wctx, cancel := context.WithTimeout(ctx, ad.cfg.SendTimeout)
		err := p.Acquire(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, mailbox.ErrPermitsClosed) {
			return ErrPaused
		}
		return err
	}
}

// admitWait admits an item that holds its permit, waiting up to SendTimeout
// for lane room. On failure the item is released undecoded (and, if it was
// stamped, a skip notice takes its place).
func (ad *admission) admitWait(ctx context.Context, t target, e *mailbox.Envelope, inline bool) (ran bool, err error) {
	var timer, leaving *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if leaving != nil {
			leaving.Stop()
		}
	}()
	retries := 0
	for {
		p, err := ad.router.place(t, fromOutside)
		if err != nil {
			ad.router.reject(t.name(), e, RejectShuttingDown)
			return false, err
		}
		if p.o == nil {
			// External sends wait for room on the link (flow control).
			err := ad.sendRemote(ctx, p.host, t, e.Msg)
			switch {
			case err == nil:
				e.Msg = nil // sent
				e.Release()
				return false, nil
			case retryable(err):
				// The object's host is leaving: it hands its objects on
				// (moves or deactivates them) within moments. Look again
				// at once a few times, then every few milliseconds, for up
				// to SendTimeout in all.
				ad.routes.forget(t.obj(), true)
				retries++
				if retries <= 3 {
					continue
				}
				if leaving == nil {
					leaving = time.NewTimer(ad.cfg.SendTimeout)
				}
				wait := time.NewTimer(time.Duration(min(retries, 20)) * time.Millisecond)
				select {
				case <-wait.C:
					continue
				case <-leaving.C:
					err = notHandedOn(p.host, err)
				case <-ctx.Done():
					err = ctxErr(ctx)
				case <-ad.life.closing():
					err = ErrShuttingDown
				}
				wait.Stop()
			}
			ad.router.reject(t.name(), e, rejectReason(err))
			return false, err
		}
		o := p.o
		ad.stamp(t, e.Msg, ad.routes.self())
		size := e.Msg.Len()
		if ad.obs.timed {
			e.Admitted = ad.nanotime()
		}
		how := admitWait
		if inline {
			how, inline = admitInline, false // only the first attempt
		}
		var room <-chan struct{}
		ran, room, err = ad.router.admit(o, e, how)
		if err == nil {
			ad.obs.Admitted(o.spec.name, mailbox.Application, size)
			return ran, nil
		}
		switch {
		case errors.Is(err, mailbox.ErrClosed):
			if t.o != nil || !ad.life.acceptsExternal() {
				ad.router.reject(t.name(), e, RejectShuttingDown)
				return false, ErrShuttingDown
			}
			continue // passivated or moved: the next lookup finds it
		case errors.Is(err, mailbox.ErrFull):
			if timer == nil {
				timer = time.NewTimer(ad.cfg.SendTimeout)
			}
			select {
			case <-room:
				continue
			case <-ctx.Done():
				ad.router.reject(t.name(), e, RejectCancelled)
				return false, ctxErr(ctx)
			case <-timer.C:
				ad.router.reject(t.name(), e, RejectFull)
				return false, ErrSendTimeout
			case <-ad.life.closing():
				ad.router.reject(t.name(), e, RejectShuttingDown)
				return false, ErrShuttingDown
			}
		default:
			ad.router.reject(t.name(), e, RejectTooLarge)
			return false, err
		}
	}
}

// admitGranted admits an item that was granted its permit asynchronously:
// a handler's send, or (relayed) a message off a link. It cannot wait, so
// lane limits do not apply (the permit bounds it). A relayed message
// whose object is not here (any more) is forwarded.
func (ad *admission) admitGranted(t target, e *mailbox.Envelope, relayed bool) {
	ad.admitGrantedUntil(t, e, relayed, 0, true)
}

// admitGrantedUntil is admitGranted for a send that may be deferred until
// nanotime until (0: SendTimeout from now) while its object's host leaves.
// Without mayWait (on a goroutine that must not wait for the Location
// Store) it reports false, having done nothing with e, where it would have
// to look the object up or forward the message: the caller finishes it on
// a look-up lane.
func (ad *admission) admitGrantedUntil(t target, e *mailbox.Envelope, relayed bool, until int64, mayWait bool) bool {
	retries := 0
	for {
		mode := fromHandler
		if relayed {
			mode = fromLink
		}
		var p place
		var err error
		if mayWait {
			p, err = ad.router.place(t, mode)
		} else {
			var ok bool
			if p, ok = ad.router.placeCached(t); !ok {
				return false
			}
		}
		if err != nil {
			ad.router.endUnrun(nil, t.name(), e, err, RejectShuttingDown)
			return true
		}
		if p.o == nil {
			if relayed && t.kr != nil {
				if !mayWait {
					return false // forwarding may look the object up
				}
				m := e.Msg
				e.Msg = nil
				e.Release() // its permit: forwarding takes none
				ad.router.forward(t.kr, t.id, m, p)
				return true
			}
			err := ad.sendRemote(nil, p.host, t, e.Msg)
			switch {
			case err == nil:
				e.Msg = nil
				e.Release()
				return true
			case retryable(err) && retries < 3 && t.kr != nil:
				ad.routes.forget(t.obj(), true)
				retries++
				continue
			case retryable(err) && t.kr != nil:
				// The object's host is leaving and has not handed it on
				// yet: a handler's send cannot wait here, so it is tried
				// again on the tick, for up to SendTimeout.
				if until == 0 {
					until = ad.nanotime() + int64(ad.cfg.SendTimeout)
				}
				if ad.nanotime() < until && ad.deferSend(deferredSend{t: t, e: e, until: until}) {
					return true
				}
				err = notHandedOn(p.host, err)
			}
			ad.router.endUnrun(nil, t.name(), e, err, rejectReason(err))
			return true
		}
		if !relayed {
			ad.stamp(t, e.Msg, ad.routes.self())
		}
		o := p.o
		size := e.Msg.Len()
		if int64(size)+mailbox.ItemOverhead > ad.cfg.ApplicationLimits.Bytes {
			// From a host whose lanes are larger: this host's limit
			// applies at admission, and the sender of an Ask hears of it.
			ad.router.endUnrun(o, "", e, mailbox.ErrTooLarge, RejectTooLarge)
			return true
		}
		if ad.obs.timed {
			e.Admitted = ad.nanotime()
		}
		if _, _, err = ad.router.admit(o, e, admitOverflow); err == nil {
			ad.obs.Admitted(o.spec.name, mailbox.Application, size)
			return true
		}
		if t.o != nil || !ad.life.acceptsInternal() {
			ad.router.endUnrun(nil, t.name(), e, ErrShuttingDown, RejectShuttingDown)
			return true
		}
	}
}

// admission takes a message from its send to a queue: a host-wide permit,
// then the local owner's mailbox, or the router for an object elsewhere;
// a handler's send to a host that is leaving waits among the deferred
// sends.
type admission struct {
	pressureWaits atomic.Int64 // outside sends that waited for a pause to end (Stats.PressureWaits)
	view          *peerView    // what this host knows of its peers (the peers' leaf)
	*hostEnv
	life     *lifecycle
	gate     *leaseGate
	jobs     *jobQueue
	pressure *pressureSet
	routes   *routes
	peers    *peers
	requests *requestTable
	owners   *ownerTable
	router   *router
	deferred deferredSends // handlers' sends waiting for a leaving host
}

// deferredSends are handlers' sends to objects whose host is leaving,
// tried again on the tick until they are routed or SendTimeout passes.
// Lock: mu, a leaf, guards list and closed.
type deferredSends struct {
	mu     sync.Mutex
	list   []deferredSend
	closed bool // Close ran: nothing more is deferred
}

// deferredSend is a handler's send to an object whose host is leaving,
// waiting to be routed again (retryDeferred).
type deferredSend struct {
	t     target
	e     *mailbox.Envelope
	until int64 // nanotime; past it the send fails
}

// deferSend queues d for the tick; false if the host is closing.
func (ad *admission) deferSend(d deferredSend) bool {
	ad.deferred.mu.Lock()
	defer ad.deferred.mu.Unlock()
	if ad.deferred.closed {
		return false
	}
	ad.deferred.list = append(ad.deferred.list, d)
	return true
}

// deferredJobs registers the deferred sends' periodic job on the host's
// tick: handlers' sends that waited for a leaving host are tried again.
func (ad *admission) deferredJobs(tick *schedule) {
	tick.every("retry deferred sends", tickEvery, func(time.Time) bool { ad.retryDeferred(); return false })
}

// retryDeferred routes the deferred sends again, in the order they were
// deferred (on the tick).
func (ad *admission) retryDeferred() {
	ad.deferred.mu.Lock()
	ds := ad.deferred.list
	ad.deferred.list = nil
	ad.deferred.mu.Unlock()
	for _, d := range ds {
		ad.admitGrantedUntil(d.t, d.e, false, d.until, true)
	}
}

// closeDeferred ends the deferred sends of a closing host.
func (ad *admission) closeDeferred() {
	ad.deferred.mu.Lock()
	ds := ad.deferred.list
	ad.deferred.list, ad.deferred.closed = nil, true
	ad.deferred.mu.Unlock()
	for _, d := range ds {
		ad.router.endUnrun(nil, d.t.name(), d.e, ErrShuttingDown, RejectShuttingDown)
	}
}

// permits returns the host's job permits (admitter).
func (ad *admission) permits() *mailbox.Permits { return ad.jobs.permits }

// onLookupLane runs fn on t's look-up lane (admitter).
func (ad *admission) onLookupLane(t target, fn func()) { ad.router.lookupLane(t).add(fn) }

// rejected counts a refused send to a target of kind (admitter).
func (ad *admission) rejected(kind, why string) { ad.obs.Rejected(kind, why) }
