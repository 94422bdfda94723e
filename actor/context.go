package actor

import (
	"context"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Context is what a handler (or a factory) runs in: a context.Context for
// the turn, plus the owner's identity. It is valid only during the call it
// was passed to; do not keep it. Done is closed when the host closes.
//
// Sends made with a handler's Context (or a context derived from it) never
// wait for a job permit while the owner's gate is held: when the host is
// saturated they queue, in order, behind the owner's earlier sends, and
// Tell returns once the message is queued.
type Context struct {
	host  hostHandle // the owner's host (Host returns it)
	owner *owner
	env   *mailbox.Envelope // the running item; nil outside a turn

	traced context.Context // carries the turn's span, if the host traces (trace.go)
}

type turnKey struct{}

// Deadline implements context.Context. A turn has no deadline of its own;
// see MessageDeadline for the sender's.
func (c *Context) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context: it is closed when the host closes.
func (c *Context) Done() <-chan struct{} { return c.owner.t.life.closing() }

// Err implements context.Context.
func (c *Context) Err() error {
	select {
	case <-c.owner.t.life.closing():
		return context.Canceled
	default:
		return nil
	}
}

// Value implements context.Context.
func (c *Context) Value(key any) any {
	if key == (turnKey{}) {
		return c
	}
	if c.traced != nil {
		return c.traced.Value(key) // the turn's span
	}
	return nil
}

// Self returns the owner's reference: the object, or for a channel
// subscriber Ref{Kind: channel name, ID: "#" and its index}.
func (c *Context) Self() Ref { return c.owner.ref }

// hostHandle is the host a Context's owner runs on, as the Context holds
// it: a *Host (Context.Host, in host.go, returns it as one).
type hostHandle interface{ Name() string }

// StateUnchanged tells the host that the running turn did not change the
// object's state: for a persistent kind (Kind.PersistState) no write
// follows the turn (its outputs still wait for the writes before it).
// Without it every turn whose handler ran is written. It does nothing for
// other kinds.
func (c *Context) StateUnchanged() {
	if c.owner != nil && c.owner.gate != nil && c.env != nil {
		c.owner.gate.unchanged = true
	}
}

// MessageDeadline returns the running message's absolute deadline, if its
// sender set one (every Ask does).
func (c *Context) MessageDeadline() (time.Time, bool) {
	if c.env == nil || c.env.Msg == nil {
		return time.Time{}, false
	}
	return c.env.Msg.Header().Deadline()
}

// Op returns the running message's operation id.
func (c *Context) Op() payload.OpID {
	if c.env == nil || c.env.Msg == nil {
		return payload.OpID{}
	}
	return c.env.Msg.Header().Op()
}

// turnOf returns the handler Context behind ctx if ctx belongs to a turn
// that is running, else nil.
func turnOf(ctx context.Context) *Context {
	c, ok := ctx.(*Context)
	if !ok {
		c, _ = ctx.Value(turnKey{}).(*Context)
	}
	if c == nil || c.env == nil {
		return nil
	}
	return c
}

// begin starts the span of the turn c is about to run for the message
// whose header is hv, a child of the span that sent it, and makes c carry
// it: the sends of the turn's handler continue its trace.
func (t *tracing) begin(c *Context, hd *handler, hv *payload.HeaderView) {
	kind := trace.SpanKindConsumer
	if len(hv.ReplyTo()) > 0 {
		kind = trace.SpanKindServer // a request: its asker waits
	}
	o := c.owner
	c.traced, _ = t.tracer.Start(parentOf(hv), o.spec.spanName,
		trace.WithSpanKind(kind),
		trace.WithAttributes(AttrKind.String(o.spec.name), AttrID.String(o.ref.ID),
			AttrMessageType.String(hd.typeName), t.host))
}

// endTurnSpan ends the span of c's turn.
func (c *Context) endTurnSpan() {
	trace.SpanFromContext(c.traced).End()
	c.traced = nil
}

// traceError records err, which fails the running turn, on its span, if
// it has one.
func (c *Context) traceError(err error) {
	if c.traced == nil {
		return
	}
	s := trace.SpanFromContext(c.traced)
	s.RecordError(err)
	s.SetStatus(codes.Error, err.Error())
}
