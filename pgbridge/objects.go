package pgbridge

import (
	"context"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
)

// ObjectOptions configures Objects.
type ObjectOptions struct {
	// Replies publishes the reply of a request handler (nil: Routed, the
	// broker's routes; Discard drops replies). A reply that is not
	// published — its type has no route (counted in Stats.NoRoute), the
	// insert failed — fails the row's delivery: it is retried after the
	// subscription's RetryDelay. In the row-lock form the reply is
	// inserted in the claim's transaction, so it is published exactly when
	// the row is settled; in the advisory form on the connection holding
	// the key's lock, before the settlement; in the lease form through the
	// pool, before the settlement (a lost lease can publish a reply twice).
	Replies Publisher
	// OnError maps a handler's error to the row's outcome. The default
	// retries after the subscription's RetryDelay (up to MaxAttempts).
	// Errors that mean the payload did not decode never reach it: the
	// decode policy settles those.
	OnError func(d *Delivery, err error) Outcome
}

// Objects delivers each row to the object Ref{Kind: kind, ID: row key}
// through host h, as the message the row's type, content_type and payload
// encode: the payload is copied once into the host's pool (the boundary copy,
// counted in its copy accounting) and decoded only in the object's turn. The
// object's reply — or its error — is the row's outcome: the reply (through
// opts.Replies) and Ack, or the error through OnError. Rows of one claim are
// sent in id order from one goroutine, so the rows of one key run in that
// order.
func Objects(h *actor.Host, kind string, opts ObjectOptions) Handler {
	return objHandler{h: h, kind: kind, opts: opts}
}

type objHandler struct {
	h    *actor.Host
	kind string
	opts ObjectOptions
}

func (objHandler) mode() handlerMode { return modePayload }

func (o objHandler) newRunner(b *Broker, s *Subscription) runner {
	if o.opts.Replies == nil {
		o.opts.Replies = Routed{Broker: b}
	}
	return &objRunner{objHandler: o, b: b, s: s}
}

type objRunner struct {
	objHandler
	b    *Broker
	s    *Subscription
	reqs []*actor.Request // the claim's requests, by slot (nil: none or finished)
	free []*actor.Request // reused Requests: free[i] serves slot i
	// the last reply's type and content type: replies mostly share them
	lastType, lastCT string
}

func (r *objRunner) read(d *Delivery, body []byte) error {
	n := len(r.reqs)
	if n == len(r.free) {
		r.free = append(r.free, new(actor.Request))
	}
	req := r.free[n]
	err := r.h.Prepare(r.b.ctx, req, actor.Ref{Kind: r.kind, ID: d.Key}, actor.Encoded{
		Type: d.Type, ContentType: d.ContentType, Body: body,
	})
	if err != nil {
		if payload.KindOf(err) == payload.ProtocolError {
			return err // unknown content type: the decode policy
		}
		// Not a property of the row (host stopping, too many requests,
		// no such handler yet): try again later.
		d.outcome = RetryAfter(r.s.retryDelay(d.Attempt), "not delivered: "+err.Error())
		r.reqs = append(r.reqs, nil)
		d.slot = len(r.reqs) - 1
		return nil
	}
	r.reqs = append(r.reqs, req)
	d.slot = len(r.reqs) - 1
	return nil
}

func (r *objRunner) run(ctx context.Context, ds []*Delivery) {
	for _, d := range ds {
		if d.undec != nil || r.reqs[d.slot] == nil {
			continue
		}
		if err := r.reqs[d.slot].Send(ctx); err != nil {
			r.reqs[d.slot] = nil
			d.outcome = r.onError(d, err)
		}
	}
	for _, d := range ds {
		if d.undec != nil || r.reqs[d.slot] == nil {
			continue
		}
		rep, err := r.reqs[d.slot].Wait(ctx)
		r.reqs[d.slot] = nil
		switch {
		case err != nil && payload.KindOf(err) == payload.ProtocolError:
			// The payload did not decode into the handler's type: the
			// handler did not run.
			r.b.stats.decodeFailures.Add(1)
			r.b.obs.DecodeFailed(r.s.Name)
			d.undec = err
			d.outcome = r.s.DecodePolicy.outcome(r.s.DecodeRetryDelay, err)
		case err != nil:
			d.outcome = r.onError(d, err)
		case rep != nil:
			d.outcome = Ack
			// The broker's context, not the handler's: the object's turn
			// is over, and a statement watching a context of its own
			// costs allocations per reply.
			if perr := r.publishReply(r.b.ctx, d, rep); perr != nil {
				d.outcome = RetryAfter(r.s.retryDelay(d.Attempt), "reply not published: "+perr.Error())
			}
			rep.Release()
		default:
			d.outcome = Ack
		}
	}
}

func (r *objRunner) publishReply(ctx context.Context, d *Delivery, rep *payload.Message) error {
	hv := rep.Header()
	// Row lock: in the claim's transaction. Advisory: on the connection
	// the claim holds — through the pool, claimers waiting for their
	// replies could hold every connection.
	var db Querier = r.b.pool
	switch d.form {
	case RowLock:
		db = d.tx
	case Advisory:
		db = d.conn
	}
	if string(hv.Type()) != r.lastType {
		r.lastType = string(hv.Type())
	}
	if string(hv.ContentType()) != r.lastCT {
		r.lastCT = string(hv.ContentType())
	}
	return r.opts.Replies.Publish(ctx, db, Outgoing{
		Key:         d.Key,
		Type:        r.lastType,
		ContentType: r.lastCT,
		Body:        rep.RawView(),
	})
}

// Discard is a Publisher that publishes nothing:
// ObjectOptions{Replies: Discard{}} drops every reply, by choice.
type Discard struct{}

// Publish drops m.
func (Discard) Publish(context.Context, Querier, Outgoing) error { return nil }

func (r *objRunner) onError(d *Delivery, err error) Outcome {
	if r.opts.OnError != nil {
		return r.opts.OnError(d, err)
	}
	return RetryAfter(r.s.retryDelay(d.Attempt), err.Error())
}

func (r *objRunner) reset() {
	for i, q := range r.reqs {
		if q != nil {
			q.Discard()
			r.reqs[i] = nil
		}
	}
	r.reqs = r.reqs[:0]
}
