package actor

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// replyWith encodes a request handler's result and routes it to the asker.
// A request sent with Tell has no reply route; its result is dropped.
func replyWith[R any](c *Context, r R) error {
	hv := c.env.Msg.Header()
	route := hv.ReplyTo()
	if len(route) == 0 {
		return nil
	}
	t := c.owner.t
	buf, err := payload.Encode(t.pool, t.reg, payload.Header{Op: hv.Op(), Flags: flagReply}, r)
	if err != nil {
		return err
	}
	c.owner.reply(route, hv.Op(), reply{buf: buf})
	return nil
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
	return t.kr.def().name
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
	case errors.Is(err, ErrPaused):
		return RejectPaused
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
	return relocation.Object{Kind: t.kr.def().name, ID: t.id}
}

// newEnvelope returns an application item for m.
func newEnvelope(m *payload.Message) *mailbox.Envelope {
	e := mailbox.NewEnvelope()
	e.Msg = m
	return e
}

// retryable reports whether a send to another host failed because that
// host is leaving or gone: the object is looked up again.
func retryable(err error) bool { return errors.Is(err, errHostGone) || errors.Is(err, errLinkDown) }

// notHandedOn is the error of a send that waited SendTimeout in vain for
// the leaving (or unreachable) host that owns its object to hand it on:
// ErrNotHandedOn, naming the host, and the last error of the send.
func notHandedOn(host string, err error) error {
	return fmt.Errorf("host %s owns the object: %w (%w)", host, ErrNotHandedOn, err)
}

// ackReply tells the sender of an encoded Request that a one-way handler
// returned nil.
func ackReply(c *Context) error {
	hv := c.env.Msg.Header()
	route := hv.ReplyTo()
	if len(route) == 0 {
		return nil
	}
	t := c.owner.t
	buf, err := payload.Encode(t.pool, t.reg, payload.Header{Op: hv.Op(), Flags: flagReply | flagAck}, struct{}{})
	if err != nil {
		return err
	}
	c.owner.reply(route, hv.Op(), reply{buf: buf})
	return nil
}
