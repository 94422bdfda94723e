package actor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// flagReply marks a reply frame.
const flagReply uint8 = 1

// Tell sends msg to object to and returns once it is accepted locally:
// admitted to the owner's queue, or — from a handler, while the host's job
// permits are exhausted — queued in order behind that owner's earlier sends.
// The declared type M selects the codec and the handler.
//
// From outside a handler, Tell first waits (cancellably) for a job permit,
// then, if the owner's lane is full, up to SendTimeout for room. Errors:
// NotFound (no such kind, or no handler for M), ShuttingDown, DeadlineExceeded
// (ErrSendTimeout; or ctx's deadline passed or ctx was cancelled — the
// error then also matches context.DeadlineExceeded or context.Canceled),
// CapacityExceeded (the message is larger than a lane), and encoding
// errors. A context already done when Tell is called sends nothing.
func Tell[M any](ctx context.Context, h *Host, to Ref, msg M) error {
	turn := turnOf(ctx)
	if !h.admit.accepts(turn) {
		return ErrShuttingDown
	}
	kr, _, err := h.owners.handlerFor(to.Kind, typeName[M]())
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctxErr(ctx) // done before the send: nothing is sent
	}
	m, err := payload.NewMessage(h.pool, h.reg, payload.Header{
		Target: payload.Target{Scope: payload.ScopeObject, Name: to.Kind, ID: to.ID},
		Op:     payload.NewOpID(),
		Origin: h.peers.origin,
	}, msg)
	if err != nil {
		return err
	}
	return h.admit.dispatch(ctx, turn, target{kr: kr, id: to.ID}, m)
}

// Ask sends request msg to object to and waits for its reply, which the
// object's request handler for M returns. It completes exactly once, with
// whichever comes first: the reply, the handler's error, the deadline (ctx's,
// or RequestTimeout), cancellation of ctx, or the host shutting down.
//
// An Ask from a handler has the deadline of the message the handler runs,
// if that is sooner. A context already done sends nothing. Timeouts and
// cancellations are of kind DeadlineExceeded and also match
// context.DeadlineExceeded or context.Canceled.
//
// Errors before sending: NotFound (no such kind or handler), InvalidOperation
// (M has a one-way handler; or a handler asking its own object:
// ErrReentrant), TypeMismatch (the handler replies with another type than
// R), CapacityExceeded (ErrTooManyRequests), ShuttingDown; then those of
// Tell; then the handler's error, InternalFailure if it panicked,
// DeadlineExceeded (ErrRequestTimeout), ShuttingDown.
func Ask[M, R any](ctx context.Context, h *Host, to Ref, msg M) (R, error) {
	var zero R
	turn := turnOf(ctx)
	if !h.admit.accepts(turn) {
		return zero, ErrShuttingDown
	}
	kr, hd, err := h.owners.handlerFor(to.Kind, typeName[M]())
	if err != nil {
		return zero, err
	}
	if err := checkRequest[R](hd, to.Kind); err != nil {
		return zero, err
	}
	if turn != nil && turn.owner.kr == kr && turn.owner.ref.ID == to.ID {
		return zero, ErrReentrant
	}
	if ctx.Err() != nil {
		return zero, ctxErr(ctx)
	}
	return ask[M, R](ctx, h, turn, target{kr: kr, id: to.ID},
		payload.Target{Scope: payload.ScopeObject, Name: to.Kind, ID: to.ID}, msg)
}

// Publish sends msg to every subscriber of its type M on channel, each in
// its own turn with its own job permit; the subscribers share one encoded
// payload, released once after the last of them. It returns once the first
// subscriber has the message and the others are queued for their permits
// (in order, behind earlier sends of the same source).
//
// Errors: NotFound (no such channel, or no subscriber for M), and those of
// Tell for the first subscriber.
func Publish[M any](ctx context.Context, h *Host, channel string, msg M) error {
	turn := turnOf(ctx)
	if !h.admit.accepts(turn) {
		return ErrShuttingDown
	}
	cr := h.owners.channels[channel]
	if cr == nil {
		return payload.NewError(payload.NotFound, "actor.Publish", "no channel "+channel)
	}
	ts := cr.targets[typeName[M]()]
	if len(ts) == 0 {
		return payload.NewError(payload.NotFound, "actor.Publish", "channel "+channel+" has no subscriber for "+typeName[M]())
	}
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	m, err := payload.NewMessage(h.pool, h.reg, payload.Header{
		Target: payload.Target{Scope: payload.ScopeChannel, Name: channel},
		Op:     payload.NewOpID(),
	}, msg)
	if err != nil {
		return err
	}
	if turn != nil && turn.host == h {
		turn.owner.out.enqueue(&pendingSend{m: m, targets: ts, fanout: true})
		return nil
	}
	// The first child waits for its permit like any ingress; the others
	// take theirs lazily through the permit FIFO.
	if err := h.admit.dispatch(ctx, nil, ts[0], m.Share()); err != nil {
		m.Release()
		return err
	}
	if len(ts) == 1 {
		m.Release()
		return nil
	}
	src := &outbox{host: h}
	src.enqueue(&pendingSend{m: m, targets: ts, next: 1, fanout: true})
	return nil
}

// AskChannel sends request msg to one subscriber of channel that serves M
// (round robin) and waits for its reply, like Ask. A subscriber asking its
// own channel is served by another subscriber, or gets ErrReentrant if it
// is the only one.
func AskChannel[M, R any](ctx context.Context, h *Host, channel string, msg M) (R, error) {
	var zero R
	turn := turnOf(ctx)
	if !h.admit.accepts(turn) {
		return zero, ErrShuttingDown
	}
	cr := h.owners.channels[channel]
	if cr == nil {
		return zero, payload.NewError(payload.NotFound, "actor.AskChannel", "no channel "+channel)
	}
	t := typeName[M]()
	var self *owner
	if turn != nil {
		self = turn.owner
	}
	o := cr.pick(t, self)
	if o == nil {
		if s := cr.serve[t]; s != nil && len(s.owners) > 0 {
			return zero, ErrReentrant
		}
		return zero, payload.NewError(payload.NotFound, "actor.AskChannel", "channel "+channel+" has no subscriber serving "+t)
	}
	if err := checkRequest[R](o.spec.handlers[t], channel); err != nil {
		return zero, err
	}
	if ctx.Err() != nil {
		return zero, ctxErr(ctx)
	}
	return ask[M, R](ctx, h, turn, target{o: o}, payload.Target{Scope: payload.ScopeChannel, Name: channel}, msg)
}

func checkRequest[R any](hd *handler, name string) error {
	if !hd.request {
		return payload.NewError(payload.InvalidOperation, "actor.Ask",
			name+": "+hd.typeName+" has a one-way handler; use Tell")
	}
	if rt := typeName[R](); rt != hd.replyType {
		return payload.NewError(payload.TypeMismatch, "actor.Ask",
			name+": the handler for "+hd.typeName+" replies with "+hd.replyType+", not "+rt)
	}
	return nil
}

// ask sends a request and waits for its one terminal.
func ask[M, R any](ctx context.Context, h *Host, turn *Context, t target, pt payload.Target, msg M) (R, error) {
	var zero R
	if int(h.stats.inflight.Add(1)) > h.cfg.MaxRequestsInFlight {
		h.stats.inflight.Add(-1)
		return zero, ErrTooManyRequests
	}
	defer h.stats.inflight.Add(-1)
	start := time.Now()
	deadline := requestDeadline(ctx, h, turn, start)
	if !deadline.After(start) {
		return zero, ErrRequestTimeout // nothing is sent
	}
	op := payload.NewOpID()
	origin := ""
	if pt.Scope == payload.ScopeObject {
		origin = h.peers.origin
	}
	m, err := payload.NewMessage(h.pool, h.reg, payload.Header{Target: pt, Op: op, ReplyTo: h.name, Deadline: deadline, Origin: origin}, msg)
	if err != nil {
		return zero, err
	}
	p := pendings.Get().(*pending)
	h.requests.add(op, p)
	ran, err := h.admit.dispatchRun(ctx, turn, t, m, h.cfg.InlineAsk && turn == nil)
	if err != nil {
		h.requests.take(op)
		pendings.Put(p)
		return zero, err
	}
	if ran {
		// The handler ran on this goroutine: if the deadline or a
		// cancellation passed meanwhile, that terminal came first.
		if cerr := ctx.Err(); cerr != nil || time.Since(start) >= deadline.Sub(start) {
			err = ErrRequestTimeout
			if cerr != nil {
				err = ctxErr(ctx)
			}
			if h.requests.take(op) == nil {
				if r := <-p.ch; !r.buf.IsZero() {
					r.buf.Release()
				}
			}
			pendings.Put(p)
			return zero, err
		}
	}
	r, err := h.requests.await(ctx, op, p, deadline.Sub(start)-time.Since(start))
	if err != nil {
		return zero, err
	}
	if r.err != nil {
		return zero, r.err
	}
	rm, err := h.reg.Open(r.buf)
	if err != nil {
		r.buf.Release()
		return zero, err
	}
	v, err := payload.Value[R](rm)
	rm.Release()
	return v, err
}

// requestDeadline is a request's deadline: the soonest of ctx's, the
// RequestTimeout from start, and — for an Ask from a handler — the deadline
// of the message the handler is running (a handler's request cannot be
// answered usefully after its own asker gave up).
func requestDeadline(ctx context.Context, h *Host, turn *Context, start time.Time) time.Time {
	deadline := start.Add(h.cfg.RequestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if turn != nil {
		if d, ok := turn.MessageDeadline(); ok && d.Before(deadline) {
			deadline = d
		}
	}
	return deadline
}

// await waits for the request's terminal. If the waiter gives up but finds
// the reply already taken by its deliverer, the reply came first and is
// returned.
func (rq *requestTable) await(ctx context.Context, op payload.OpID, p *pending, left time.Duration) (reply, error) {
	h := rq.h
	select {
	case r := <-p.ch: // already answered (a turn run inline, or a fast owner)
		pendings.Put(p)
		return r, nil
	default:
	}
	p.timer.Reset(left)
	var err error
	select {
	case r := <-p.ch:
		p.timer.Stop()
		pendings.Put(p)
		return r, nil
	case <-ctx.Done():
		err = ctxErr(ctx)
	case <-p.timer.C:
		err = ErrRequestTimeout
	case <-h.life.done:
		err = ErrShuttingDown
	}
	p.timer.Stop()
	if h.requests.take(op) == nil {
		r := <-p.ch
		pendings.Put(p)
		return r, nil
	}
	pendings.Put(p)
	return reply{}, err
}

// replyWith encodes a request handler's result and routes it to the asker.
// A request sent with Tell has no reply route; its result is dropped.
func replyWith[R any](c *Context, r R) error {
	hv := c.env.Msg.Header()
	route := hv.ReplyTo()
	if len(route) == 0 {
		return nil
	}
	h := c.host
	buf, err := payload.Encode(h.pool, h.reg, payload.Header{Op: hv.Op(), Flags: flagReply}, r)
	if err != nil {
		return err
	}
	h.requests.routeReply(route, hv.Op(), reply{buf: buf})
	return nil
}

// routeReply delivers a reply to the asker's host. Replies take no permit.
func (rq *requestTable) routeReply(route []byte, op payload.OpID, r reply) {
	h := rq.h
	if string(route) == h.name {
		h.requests.complete(op, r)
		return
	}
	if h.peers.tr == nil {
		h.log.Warn("reply route unknown; reply dropped", "route", string(route))
		if !r.buf.IsZero() {
			r.buf.Release()
		}
		return
	}
	buf := r.buf
	if r.err != nil {
		var err error
		if buf, err = encodeWireError(h, op, r.err); err != nil {
			h.log.Error("error reply not encodable", "err", err)
			return
		}
	}
	err := h.peers.sendItem(string(route), transport.Reply, buf.Bytes())
	buf.Release()
	if err != nil && !errors.Is(err, ErrPeerBacklog) { // that one is counted and logged
		// The asker's host is not reachable from here (it left the
		// network): nobody there waits for this reply any more.
		h.peerLogs.replyLost.Warn(h.log, "reply lost: the asker's host is not reachable", "route", string(route), "err", err)
	}
}

// accepts reports whether the host takes a send from this context.
func (ad *admission) accepts(turn *Context) bool {
	h := ad.h
	if turn != nil && turn.host == h {
		return h.acceptsInternal()
	}
	return h.acceptsExternal()
}

// handlerFor finds the kind and its handler for a message type.
func (ow *ownerTable) handlerFor(kind, typ string) (*kindRuntime, *handler, error) {
	h := ow.h
	kr := h.owners.kinds[kind]
	if kr == nil {
		h.obs.Rejected(kind, RejectNotFound)
		return nil, nil, payload.NewError(payload.NotFound, "actor", "no kind "+kind+" on host "+h.name)
	}
	hd := kr.spec.handlers[typ]
	if hd == nil {
		h.obs.Rejected(kind, RejectNotFound)
		return nil, nil, payload.NewError(payload.NotFound, "actor", "kind "+kind+" has no handler for "+typ)
	}
	return kr, hd, nil
}

// target is where a message goes: an object, activated on demand, or a
// fixed channel subscriber.
type target struct {
	kr *kindRuntime
	id string
	o  *owner
}

func (t target) name() string {
	if t.o != nil {
		return t.o.spec.name
	}
	return t.kr.spec.name
}

// resolveCached is resolve without a store call: it reports false where
// resolve would ask the store.
func (t target) resolveCached() (place, bool) {
	if t.o != nil {
		return place{o: t.o}, true
	}
	return t.kr.locateCached(t.id)
}

func (t target) resolve(mode lookupMode) (place, error) {
	if t.o != nil {
		return place{o: t.o}, nil
	}
	return t.kr.locate(t.id, mode)
}

// rejectReason names, for the observer, why a send to another host failed.
func rejectReason(err error) string {
	switch {
	case errors.Is(err, errHostGone), errors.Is(err, errLinkDown):
		return RejectShuttingDown
	case errors.Is(err, ErrSendTimeout), errors.Is(err, ErrPeerBacklog):
		return RejectFull
	case errors.Is(err, ErrPushedBack):
		return RejectPushedBack
	case errors.Is(err, ErrShuttingDown):
		return RejectShuttingDown
	case errors.Is(err, context.Canceled), errors.Is(err, payload.DeadlineExceeded):
		return RejectCancelled // the sender's context ended (ctxErr)
	case errors.Is(err, mailbox.ErrTooLarge):
		return RejectTooLarge // larger than the destination's lanes
	}
	return RejectUndeliverable
}

// objOf names a target's object for routing and ordering.
func (t target) obj() relocation.Object {
	return relocation.Object{Kind: t.kr.spec.name, ID: t.id}
}

// newEnvelope returns an application item for m.
func newEnvelope(m *payload.Message) *mailbox.Envelope {
	e := mailbox.NewEnvelope()
	e.Msg = m
	return e
}

// dispatch admits m for t and takes ownership of m in every case. From a
// handler of this host it goes through the owner's outbox; from outside, it
// waits for a permit, then for lane room.
func (ad *admission) dispatch(ctx context.Context, turn *Context, t target, m *payload.Message) error {
	h := ad.h
	_, err := h.admit.dispatchRun(ctx, turn, t, m, false)
	return err
}

// dispatchRun is dispatch that, with inline, may run the item's turn on
// this goroutine (Config.InlineAsk); it reports whether it did.
func (ad *admission) dispatchRun(ctx context.Context, turn *Context, t target, m *payload.Message, inline bool) (bool, error) {
	h := ad.h
	if int64(m.Len())+mailbox.ItemOverhead > h.cfg.ApplicationLimits.Bytes {
		// Larger than any lane: refused here, the same whether the
		// object runs on this host or another.
		m.Release()
		h.obs.Rejected(t.name(), RejectTooLarge)
		return false, mailbox.ErrTooLarge
	}
	if turn != nil && turn.host == h {
		turn.owner.out.sendOne(t, m)
		return false, nil
	}
	// Pushed back by the object's reorder buffer: wait before taking a
	// permit, so that waiting senders hold none (the message the buffer
	// waits for may need one).
	if err := h.admit.waitPressure(ctx, t); err != nil {
		m.Release()
		h.obs.Rejected(t.name(), rejectReason(err))
		return false, err
	}
	if err := h.jobs.permits.Acquire(ctx); err != nil {
		m.Release()
		if errors.Is(err, mailbox.ErrPermitsClosed) {
			h.obs.Rejected(t.name(), RejectShuttingDown)
			return false, ErrShuttingDown
		}
		h.obs.Rejected(t.name(), RejectCancelled)
		return false, ctxErr(ctx)
	}
	e := newEnvelope(m)
	e.HoldPermit(h.jobs.permits)
	return h.admit.admitWait(ctx, t, e, inline)
}

// retryable reports whether a send to another host failed because that
// host is leaving or gone: the object is looked up again.
func retryable(err error) bool { return errors.Is(err, errHostGone) || errors.Is(err, errLinkDown) }

// admitWait admits an item that holds its permit, waiting up to SendTimeout
// for lane room. On failure the item is released undecoded (and, if it was
// stamped, a skip notice takes its place).
func (ad *admission) admitWait(ctx context.Context, t target, e *mailbox.Envelope, inline bool) (ran bool, err error) {
	h := ad.h
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
		p, err := t.resolve(fromOutside)
		if err != nil {
			h.router.reject(t.name(), e, RejectShuttingDown)
			return false, err
		}
		if p.o == nil {
			// External sends wait for room on the link (flow control).
			err := h.admit.sendRemote(ctx, p.host, t, e.Msg)
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
				h.routes.forget(t.obj(), true)
				retries++
				if retries <= 3 {
					continue
				}
				if leaving == nil {
					leaving = time.NewTimer(h.cfg.SendTimeout)
				}
				wait := time.NewTimer(time.Duration(min(retries, 20)) * time.Millisecond)
				select {
				case <-wait.C:
					continue
				case <-leaving.C:
					err = notHandedOn(p.host, err)
				case <-ctx.Done():
					err = ctxErr(ctx)
				case <-h.life.done:
					err = ErrShuttingDown
				}
				wait.Stop()
			}
			h.router.reject(t.name(), e, rejectReason(err))
			return false, err
		}
		o := p.o
		h.admit.stamp(t, e.Msg)
		size := e.Msg.Len()
		if h.obs.timed {
			e.Admitted = nanotime()
		}
		how := admitWait
		if inline {
			how, inline = admitInline, false // only the first attempt
		}
		var room <-chan struct{}
		ran, room, err = o.admit(e, how)
		if err == nil {
			h.obs.Admitted(o.spec.name, mailbox.Application, size)
			return ran, nil
		}
		switch {
		case errors.Is(err, mailbox.ErrClosed):
			if t.o != nil || !h.acceptsExternal() {
				h.router.reject(t.name(), e, RejectShuttingDown)
				return false, ErrShuttingDown
			}
			continue // passivated or moved: the next lookup finds it
		case errors.Is(err, mailbox.ErrFull):
			if timer == nil {
				timer = time.NewTimer(h.cfg.SendTimeout)
			}
			select {
			case <-room:
				continue
			case <-ctx.Done():
				h.router.reject(t.name(), e, RejectCancelled)
				return false, ctxErr(ctx)
			case <-timer.C:
				h.router.reject(t.name(), e, RejectFull)
				return false, ErrSendTimeout
			case <-h.life.done:
				h.router.reject(t.name(), e, RejectShuttingDown)
				return false, ErrShuttingDown
			}
		default:
			h.router.reject(t.name(), e, RejectTooLarge)
			return false, err
		}
	}
}

// admitGranted admits an item that was granted its permit asynchronously:
// a handler's send, or (relayed) a message off a link. It cannot wait, so
// lane limits do not apply (the permit bounds it). A relayed message
// whose object is not here (any more) is forwarded.
func (ad *admission) admitGranted(t target, e *mailbox.Envelope, relayed bool) {
	h := ad.h
	h.admit.admitGrantedUntil(t, e, relayed, 0, true)
}

// admitGrantedUntil is admitGranted for a send that may be deferred until
// nanotime until (0: SendTimeout from now) while its object's host leaves.
// Without mayWait (on a goroutine that must not wait for the Location
// Store) it reports false, having done nothing with e, where it would have
// to look the object up or forward the message: the caller finishes it on
// a look-up lane.
func (ad *admission) admitGrantedUntil(t target, e *mailbox.Envelope, relayed bool, until int64, mayWait bool) bool {
	h := ad.h
	retries := 0
	for {
		mode := fromHandler
		if relayed {
			mode = fromLink
		}
		var p place
		var err error
		if mayWait {
			p, err = t.resolve(mode)
		} else {
			var ok bool
			if p, ok = t.resolveCached(); !ok {
				return false
			}
		}
		if err != nil {
			h.router.endUnrun(nil, t.name(), e, err, RejectShuttingDown)
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
				h.router.forward(t.kr, t.id, m, p)
				return true
			}
			err := h.admit.sendRemote(nil, p.host, t, e.Msg)
			switch {
			case err == nil:
				e.Msg = nil
				e.Release()
				return true
			case retryable(err) && retries < 3 && t.kr != nil:
				h.routes.forget(t.obj(), true)
				retries++
				continue
			case retryable(err) && t.kr != nil:
				// The object's host is leaving and has not handed it on
				// yet: a handler's send cannot wait here, so it is tried
				// again on the tick, for up to SendTimeout.
				if until == 0 {
					until = nanotime() + int64(h.cfg.SendTimeout)
				}
				if nanotime() < until && h.admit.deferSend(deferredSend{t: t, e: e, until: until}) {
					return true
				}
				err = notHandedOn(p.host, err)
			}
			h.router.endUnrun(nil, t.name(), e, err, rejectReason(err))
			return true
		}
		if !relayed {
			h.admit.stamp(t, e.Msg)
		}
		o := p.o
		size := e.Msg.Len()
		if int64(size)+mailbox.ItemOverhead > h.cfg.ApplicationLimits.Bytes {
			// From a host whose lanes are larger: this host's limit
			// applies at admission, and the sender of an Ask hears of it.
			h.router.endUnrun(o, "", e, mailbox.ErrTooLarge, RejectTooLarge)
			return true
		}
		if h.obs.timed {
			e.Admitted = nanotime()
		}
		if _, _, err = o.admit(e, admitOverflow); err == nil {
			h.obs.Admitted(o.spec.name, mailbox.Application, size)
			return true
		}
		if t.o != nil || !h.acceptsInternal() {
			h.router.endUnrun(nil, t.name(), e, ErrShuttingDown, RejectShuttingDown)
			return true
		}
	}
}

// notHandedOn is the error of a send that waited SendTimeout in vain for
// the leaving (or unreachable) host that owns its object to hand it on.
func notHandedOn(host string, err error) error {
	return &payload.Error{Kind: payload.Unavailable, Op: "actor", Detail: "host " + host +
		", which owns the object, is leaving or unreachable and did not hand it on within SendTimeout (try again)", Err: err}
}

// admission takes a message from its send to a queue: a host-wide permit,
// then the local owner's mailbox, or the router for an object elsewhere;
// a handler's send to a host that is leaving waits among the deferred
// sends.
type admission struct {
	h        *Host
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
	h := ad.h
	h.admit.deferred.mu.Lock()
	defer h.admit.deferred.mu.Unlock()
	if h.admit.deferred.closed {
		return false
	}
	h.admit.deferred.list = append(h.admit.deferred.list, d)
	return true
}

// deferredJobs registers the deferred sends' periodic job on the host's
// tick: handlers' sends that waited for a leaving host are tried again.
func (ad *admission) deferredJobs(tick *schedule) {
	h := ad.h
	tick.every("retry deferred sends", tickEvery, func(time.Time) bool { h.admit.retryDeferred(); return false })
}

// retryDeferred routes the deferred sends again, in the order they were
// deferred (on the tick).
func (ad *admission) retryDeferred() {
	h := ad.h
	h.admit.deferred.mu.Lock()
	ds := h.admit.deferred.list
	h.admit.deferred.list = nil
	h.admit.deferred.mu.Unlock()
	for _, d := range ds {
		h.admit.admitGrantedUntil(d.t, d.e, false, d.until, true)
	}
}

// closeDeferred ends the deferred sends of a closing host.
func (ad *admission) closeDeferred() {
	h := ad.h
	h.admit.deferred.mu.Lock()
	ds := h.admit.deferred.list
	h.admit.deferred.list, h.admit.deferred.closed = nil, true
	h.admit.deferred.mu.Unlock()
	for _, d := range ds {
		h.router.endUnrun(nil, d.t.name(), d.e, ErrShuttingDown, RejectShuttingDown)
	}
}

// reject ends an item that was never admitted (the sender gets the error;
// a stamped one is announced dropped).
func (rt *router) reject(kind string, e *mailbox.Envelope, reason string) {
	h := rt.h
	h.obs.Rejected(kind, reason)
	if e.Msg != nil {
		h.router.dropped(e.Msg.Header())
	}
	e.Release()
}

// endUnrun ends an admitted or granted item that will not run: a request
// gets err as its reply; the payload is released undecoded; a stamped one
// is announced dropped.
func (rt *router) endUnrun(o *owner, kind string, e *mailbox.Envelope, err error, reason string) {
	h := rt.h
	if o != nil {
		kind = o.spec.name
	}
	h.obs.Rejected(kind, reason)
	if e.Msg != nil {
		hv := e.Msg.Header()
		h.router.dropped(hv)
		if route := hv.ReplyTo(); len(route) > 0 {
			h.requests.routeReply(route, hv.Op(), reply{err: err})
		}
	}
	e.Release()
}

// ctxErr is the error of a send whose context is done: of kind
// DeadlineExceeded (the sender's time ran out: its deadline passed or it
// gave up), wrapping ctx's error, so that errors.Is matches
// context.DeadlineExceeded or context.Canceled as well — the conventions
// of net/http and pgx.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	return &payload.Error{Kind: payload.DeadlineExceeded, Op: "actor", Err: err}
}

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
	host   *Host
	o      *owner      // nil for an external fan-out or a link
	budget *peerBudget // a link's: what its sends leave when their admission begins
	mu     sync.Mutex
	head   *pendingSend // guarded by mu
	tail   *pendingSend
	queued bool // a waiter is in the permit queue; guarded by mu
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
	if idle && ob.host.jobs.permits.TryAcquire() {
		e := newEnvelope(m)
		e.HoldPermit(ob.host.jobs.permits)
		ob.host.admit.admitGranted(t, e, false)
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
		ob.host.jobs.permits.Enqueue(ob)
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
		e.HoldPermit(ob.host.jobs.permits)
		if !ob.host.admit.admitGrantedUntil(t, e, ps.relayed, 0, false) {
			// It would wait for the store: it goes on on a look-up lane,
			// and so does the source after it.
			ob.host.router.lookupLane(t).add(func() {
				ob.host.admit.admitGrantedUntil(t, e, ps.relayed, 0, true)
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
	if !ob.host.jobs.permits.TryAcquire() {
		ob.host.jobs.permits.Enqueue(ob)
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
			ob.host.obs.Rejected(t.name(), RejectShuttingDown)
		}
		if ps.fanout || ps.next == 0 {
			ps.m.Release()
		}
	}
}
