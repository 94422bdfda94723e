package actor

import (
	"context"
	"time"

	"github.com/berthrt/berth/payload"
)

// TypeName is the message type name a declared type M travels under: the
// name handlers are registered by, and the one an Encoded message must carry.
func TypeName[M any]() string { return typeName[M]() }

// Encoded is a message already encoded by its producer — a database row, a
// queue record: the name of its type (TypeName), its canonical content type
// and its body. The body is lent: NewRequest copies it once into the host's
// pool (counted in the pool's copy accounting) and does not keep it.
type Encoded struct {
	Type        string
	ContentType string
	Body        []byte
	Meta        []payload.MetaEntry
}

// Request is an encoded message on its way to an object's handler, whose
// outcome the caller waits for: the reply of a request handler, nil for a
// one-way handler that returned nil, or the handler's error. Make it with
// NewRequest, then Send and Wait (or Discard it). Splitting Send from Wait
// lets one goroutine have many requests in flight (a batch of rows).
type Request struct {
	h        *Host
	m        *payload.Message
	t        target
	op       payload.OpID
	p        *pending
	start    time.Time
	deadline time.Time
	sent     bool
	done     bool
}

// NewRequest checks that object to's kind has a handler for enc.Type and
// builds the message, copying enc.Body once. Its deadline is ctx's, or the
// host's RequestTimeout if that is sooner.
//
// Errors: ShuttingDown, NotFound (no such kind or handler), ProtocolError
// (a content type no codec is registered for), InvalidOperation (a handler
// asking its own object), CapacityExceeded (too many requests in flight).
func (h *Host) NewRequest(ctx context.Context, to Ref, enc Encoded) (*Request, error) {
	r := new(Request)
	if err := h.Prepare(ctx, r, to, enc); err != nil {
		return nil, err
	}
	return r, nil
}

// Prepare is NewRequest into a Request the caller owns: a zero Request, or
// one that has finished (Wait returned, or Discard) — so that a caller
// sending many requests can reuse them.
func (h *Host) Prepare(ctx context.Context, r *Request, to Ref, enc Encoded) error {
	if r.m != nil || (r.sent && !r.done) {
		return payload.NewError(payload.InvalidOperation, "actor.Host.Prepare", "request still in use")
	}
	turn := turnOf(ctx)
	if !h.admit.accepts(turn) {
		return ErrShuttingDown
	}
	kr, _, err := h.owners.handlerFor(to.Kind, enc.Type)
	if err != nil {
		return err
	}
	if turn != nil && turn.owner.kr == kr && turn.owner.ref.ID == to.ID {
		return ErrReentrant
	}
	if ctx.Err() != nil {
		return ctxErr(ctx) // done before the send: nothing is sent
	}
	if int(h.stats.inflight.Add(1)) > h.cfg.MaxRequestsInFlight {
		h.stats.inflight.Add(-1)
		return ErrTooManyRequests
	}
	*r = Request{h: h, t: target{kr: kr, id: to.ID}, op: payload.NewOpID(), start: time.Now()}
	r.deadline = requestDeadline(ctx, h, turn, r.start)
	meta := enc.Meta
	if h.trace != nil {
		meta = h.trace.inject(ctx, meta)
	}
	buf, err := h.pool.Frame(&payload.Header{
		Type:        enc.Type,
		ContentType: enc.ContentType,
		Target:      payload.Target{Scope: payload.ScopeObject, Name: to.Kind, ID: to.ID},
		Op:          r.op,
		ReplyTo:     h.name,
		Deadline:    r.deadline,
		Origin:      h.peers.origin,
		Meta:        meta,
	}, enc.Body)
	if err == nil {
		r.m, err = h.reg.Open(buf)
		if err != nil {
			buf.Release()
		}
	}
	if err != nil {
		h.stats.inflight.Add(-1)
		r.done = true
		return err
	}
	return nil
}

// Send admits the request to its object, waiting like Tell for a job
// permit and lane room. After an error the request is finished (Wait
// returns the same error).
func (r *Request) Send(ctx context.Context) error {
	if r.sent || r.done {
		return payload.NewError(payload.InvalidOperation, "actor.Request.Send", "request already sent or discarded")
	}
	r.sent = true
	r.p = pendings.Get().(*pending)
	r.h.requests.add(r.op, r.p)
	m := r.m
	r.m = nil
	if _, err := r.h.admit.dispatchRun(ctx, turnOf(ctx), r.t, m, false); err != nil {
		r.h.requests.take(r.op)
		pendings.Put(r.p)
		r.finish()
		return err
	}
	return nil
}

// Wait waits for the request's one terminal: the reply (a request handler's
// result, which the caller must Release), nil (a one-way handler returned
// nil), the handler's error (ProtocolError when the body did not decode into
// the handler's type: the handler did not run), or the deadline,
// cancellation of ctx, or the host shutting down.
func (r *Request) Wait(ctx context.Context) (*payload.Message, error) {
	if !r.sent || r.done {
		return nil, payload.NewError(payload.InvalidOperation, "actor.Request.Wait", "request not sent, or already finished")
	}
	defer r.finish()
	rep, err := r.h.requests.await(ctx, r.op, r.p, r.deadline.Sub(r.start)-time.Since(r.start))
	if err != nil {
		return nil, err
	}
	if rep.err != nil {
		return nil, rep.err
	}
	m, err := r.h.reg.Open(rep.buf)
	if err != nil {
		rep.buf.Release()
		return nil, err
	}
	if m.Header().Flags()&flagAck != 0 {
		m.Release()
		return nil, nil
	}
	return m, nil
}

// Discard releases a request that was not sent.
func (r *Request) Discard() {
	if r.sent || r.done {
		return
	}
	r.m.Release()
	r.m = nil
	r.finish()
}

func (r *Request) finish() {
	if !r.done {
		r.done = true
		r.h.stats.inflight.Add(-1)
	}
}

// Deliver sends an encoded message to object to and waits for its outcome:
// NewRequest, Send and Wait in one call.
func (h *Host) Deliver(ctx context.Context, to Ref, enc Encoded) (*payload.Message, error) {
	r, err := h.NewRequest(ctx, to, enc)
	if err != nil {
		return nil, err
	}
	if err := r.Send(ctx); err != nil {
		return nil, err
	}
	return r.Wait(ctx)
}

// PayloadStats returns the copy accounting of the host's payload pool:
// boundary copies (NewRequest's copy of an encoded body among them), views
// and decodes.
func (h *Host) PayloadStats() payload.Stats { return h.pool.Stats() }
