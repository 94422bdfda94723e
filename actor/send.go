package actor

import (
	"context"
	"time"

	"github.com/berthrt/berth/payload"
)

// Tell sends msg to object to and returns once it is accepted locally:
// admitted to the owner's queue, or — from a handler, while the host's job
// permits are exhausted — queued in order behind that owner's earlier sends.
// The declared type M selects the codec and the handler.
//
// From outside a handler, Tell first waits (cancellably) for a job permit,
// then, if the owner's lane is full, up to SendTimeout for room (or for
// credit and room on the link to the owner's host: a failure of that host
// ends the wait with an error wrapping ErrPeerFailed, nothing sent). Errors:
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
	var meta []payload.MetaEntry
	if h.trace != nil {
		meta = h.trace.inject(ctx, nil)
	}
	m, err := payload.NewMessage(h.pool, h.reg, payload.Header{
		Target: payload.Target{Scope: payload.ScopeObject, Name: to.Kind, ID: to.ID},
		Op:     payload.NewOpID(),
		Origin: h.peers.origin,
		Meta:   meta,
	}, msg)
	if err != nil {
		return err
	}
	return h.admit.dispatch(ctx, turn, target{kr: kr, id: to.ID}, m)
}

// Ask sends request msg to object to and waits for its reply, which the
// object's request handler for M returns. It completes exactly once, with
// whichever comes first: the reply, the handler's error, the deadline (ctx's,
// or RequestTimeout), cancellation of ctx, the host shutting down, or the
// failure of the host the request was handed to.
//
// When the host that this host handed the request to (the object's host,
// or the host a move carried it to) is declared failed — the membership
// reports its lease expired, its leave without handing its work on, or a
// new run of its name, or the Location Store shows the lease of a peer
// whose link broke run out — Ask ends with ErrPeerFailed (Unavailable) as
// soon as this host knows that fact, not at its deadline. The request may
// have run, there or on a host it was forwarded to, and what it did may
// stand: asking again may run it twice. An Ask from outside the handlers
// that was still waiting for credit or room on the link to that host gets
// an error that wraps ErrPeerFailed and says that nothing was sent.
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
// DeadlineExceeded (ErrRequestTimeout), ShuttingDown, Unavailable
// (ErrPeerFailed).
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
	var meta []payload.MetaEntry
	if h.trace != nil {
		meta = h.trace.inject(ctx, nil)
	}
	m, err := payload.NewMessage(h.pool, h.reg, payload.Header{
		Target: payload.Target{Scope: payload.ScopeChannel, Name: channel},
		Op:     payload.NewOpID(),
		Meta:   meta,
	}, msg)
	if err != nil {
		return err
	}
	if turn != nil && turn.host == h {
		turn.owner.sendFanout(&pendingSend{m: m, targets: ts, fanout: true})
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
	src := &outbox{adm: &h.admit}
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
	var meta []payload.MetaEntry
	if h.trace != nil {
		meta = h.trace.inject(ctx, nil)
	}
	m, err := payload.NewMessage(h.pool, h.reg, payload.Header{Target: pt, Op: op, ReplyTo: h.name, Deadline: deadline, Origin: origin, Meta: meta}, msg)
	if err != nil {
		return zero, err
	}
	var g *stateGate
	if turn != nil && turn.host == h && turn.owner.gate != nil {
		// A persistent owner's state and earlier outputs become durable
		// and go first: what this asks may depend on them.
		g = turn.owner.gate
		if err := g.sync(deadline); err != nil {
			m.Release()
			return zero, err
		}
		g.direct++
	}
	p := pendings.Get().(*pending)
	h.requests.add(op, p)
	ran, err := h.admit.dispatchRun(ctx, turn, t, m, h.cfg.InlineAsk && turn == nil)
	if g != nil {
		g.direct--
	}
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
