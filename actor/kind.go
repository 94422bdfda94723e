package actor

import (
	"context"
	"reflect"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

// typeName is the message type name a declared type M travels under; it is
// the name payload.Encode writes into the header.
func typeName[M any]() string { return reflect.TypeFor[M]().String() }

// handler runs one message type: it decodes the payload into the declared
// type, returns the item's permit, runs the user function and, for a
// request, sends the reply.
type handler struct {
	typeName  string
	request   bool
	replyType string // request handlers: the type name of R
	builtin   bool   // berth's own (inspectHandler): not counted as the object's turns
	run       func(c *Context, state any, e *mailbox.Envelope) error
}

// spec is the type-erased definition of a kind or of a channel subscriber:
// a handler set and, for kinds, the state factory and deactivate hook.
// It is read-only once a host using it has started.
type spec struct {
	name       string
	channel    bool
	factory    func(c *Context, id string) (any, error)
	deactivate func(ctx context.Context, id string, state any)
	handlers   map[string]*handler
	errs       []error

	policy    RelocationPolicy
	placement Placement
	capture   func(state any) ([]byte, error)                       // PreserveState
	restore   func(c *Context, id string, data []byte) (any, error) // PreserveState
	persist   bool                                                  // PersistState: the state is durable
	spanName  string                                                // its turns' span name (trace.go)
	summary   func(state any) string                                // Kind.Summarize
}

// RelocationPolicy says what a kind's objects do when their owner moves to
// another host (Host.Relocate, Host.Drain).
type RelocationPolicy uint8

// The relocation policies.
const (
	// DisableRelocation: objects of the kind do not move. A draining host
	// deactivates them instead (their deactivate hook runs) and they
	// activate again elsewhere on their next message. The default, so that
	// no in-memory state is ever dropped by surprise.
	DisableRelocation RelocationPolicy = iota
	// RecreateOnRelocation: the queued messages move; the state is rebuilt
	// on the target by the factory.
	RecreateOnRelocation
	// PreserveState: the state moves too, captured and restored through
	// the kind's adapter (Kind.PreserveState).
	PreserveState
)

// String returns the policy's name.
func (p RelocationPolicy) String() string {
	switch p {
	case RecreateOnRelocation:
		return "recreate"
	case PreserveState:
		return "preserve-state"
	}
	return "disabled"
}

func (s *spec) add(h *handler) {
	if _, dup := s.handlers[h.typeName]; dup {
		s.errs = append(s.errs, payload.NewError(payload.AlreadyExists, "actor.Handle",
			describe(s)+": two handlers for message type "+h.typeName))
		return
	}
	s.handlers[h.typeName] = h
}

func describe(s *spec) string {
	if s.channel {
		return "channel " + s.name
	}
	return "kind " + s.name
}

// Registrable is a Kind or a Channel, ready for Host.Register.
type Registrable interface {
	specs() []*spec
}

// Kind is an object kind: a state type S, a factory that makes the state of
// a newly activated object, and typed handlers. Define it with NewKind, add
// handlers with Handle and HandleRequest, and register it on hosts before
// they start. A Kind is not safe for concurrent modification.
type Kind[S any] struct {
	s *spec
}

// NewKind defines an object kind. factory makes the state of an object when
// it activates, in the object's first turn; an error fails that turn's
// message and the next message tries again.
func NewKind[S any](name string, factory func(ctx *Context, id string) (*S, error)) *Kind[S] {
	s := &spec{name: name, handlers: map[string]*handler{}, spanName: turnSpanName(name), placement: PlaceLocal}
	if name == "" {
		s.errs = append(s.errs, payload.NewError(payload.InvalidOperation, "actor.NewKind", "empty kind name"))
	}
	if factory == nil {
		s.errs = append(s.errs, payload.NewError(payload.InvalidOperation, "actor.NewKind", "kind "+name+": nil factory"))
	} else {
		s.factory = func(c *Context, id string) (any, error) {
			st, err := factory(c, id)
			if err == nil && st == nil {
				err = payload.NewError(payload.InternalFailure, "actor.NewKind", "kind "+name+": factory returned nil state")
			}
			return st, err
		}
	}
	s.add(inspectHandler())
	return &Kind[S]{s: s}
}

// Name returns the kind's name.
func (k *Kind[S]) Name() string { return k.s.name }

// OnDeactivate sets a hook that runs when an object passivates or its host
// stops gracefully, in the object's last turn, with its state.
func (k *Kind[S]) OnDeactivate(fn func(ctx context.Context, id string, state *S)) {
	k.s.deactivate = func(ctx context.Context, id string, st any) { fn(ctx, id, st.(*S)) }
}

func (k *Kind[S]) specs() []*spec { return []*spec{k.s} }

// RecreateOnRelocation lets the kind's objects move: their queued messages
// go to the new owner, whose factory rebuilds the state.
func (k *Kind[S]) RecreateOnRelocation() {
	k.s.policy, k.s.capture, k.s.restore, k.s.persist = RecreateOnRelocation, nil, nil, false
}

// PreserveState lets the kind's objects move with their state: capture
// encodes it on the source, in the object's last turn there; restore
// rebuilds it on the target before any message runs (instead of the
// factory). A restore error aborts the move and the source keeps the object.
func (k *Kind[S]) PreserveState(capture func(state *S) ([]byte, error), restore func(ctx *Context, id string, data []byte) (*S, error)) {
	k.s.policy = PreserveState
	k.s.capture = func(st any) ([]byte, error) { return capture(st.(*S)) }
	k.s.restore = func(c *Context, id string, data []byte) (any, error) {
		st, err := restore(c, id, data)
		if err == nil && st == nil {
			err = payload.NewError(payload.InternalFailure, "actor.PreserveState", "kind "+k.s.name+": restore returned nil state")
		}
		return st, err
	}
}

// PreserveStateJSON is PreserveState with the state encoded as JSON (its
// exported fields, by encoding/json rules).
func (k *Kind[S]) PreserveStateJSON() {
	k.PreserveState(func(st *S) ([]byte, error) {
		return payload.JSON.Encode(nil, st)
	}, func(_ *Context, _ string, data []byte) (*S, error) {
		st := new(S)
		return st, payload.JSON.Decode(data, st)
	})
}

// PersistState makes the kind's objects durable: their state survives
// the crash of their host. It implies PreserveState with the same
// adapters (objects move with their state). The host needs a state store
// (Config.StateStore, or a Store that is a relocation.StateStore).
//
//   - An object's activation restores its last durable state (restore);
//     the factory runs only for an object that never had one. A takeover
//     after a crash restores it too.
//   - After every turn whose handler ran, unless it called
//     Context.StateUnchanged, the state is captured (capture) and written;
//     the writes of many objects go to the store together, one flush as
//     soon as the previous one returns.
//   - Output gate: a turn's outputs — an Ask's reply, the messages its
//     handler sent — leave only once that turn's write (and every earlier
//     one) is durable. Later turns run meanwhile; their outputs queue
//     behind, in order. An Ask from a handler first makes the state as it
//     is durable and lets the outputs before it go (one flush).
//   - A write is fenced by the object's ownership: a former owner (a
//     paused or partitioned host whose object was taken over) never
//     writes. A fenced write ends the activation; what it held fails
//     (kind Unavailable), never released as if it had committed.
//   - A store that fails: outputs wait, the writes are retried, turns go
//     on in order; askers see their own deadlines.
//   - Passivation and Stop write a final state (after the deactivate
//     hook); a move writes what is pending before it captures the state.
//
// So an acknowledged update (an Ask answered, a message sent by a later
// turn) is never lost, whatever crashes. Sends made outside the turn (a
// goroutine the handler started, the deactivate hook) are not gated.
func (k *Kind[S]) PersistState(capture func(state *S) ([]byte, error), restore func(ctx *Context, id string, data []byte) (*S, error)) {
	k.PreserveState(capture, restore)
	k.s.persist = true
}

// PersistStateJSON is PersistState with the state encoded as JSON (its
// exported fields, by encoding/json rules).
func (k *Kind[S]) PersistStateJSON() {
	k.PreserveStateJSON()
	k.s.persist = true
}

// Persistent reports whether the kind's state is durable (PersistState).
func (k *Kind[S]) Persistent() bool { return k.s.persist }

// Relocation returns the kind's relocation policy.
func (k *Kind[S]) Relocation() RelocationPolicy { return k.s.policy }

// Handle adds a one-way handler for messages of type M to kind k, for Tell.
// The handler receives the decoded value, never raw bytes. Asking a type
// that has a one-way handler fails with InvalidOperation before sending.
func Handle[S, M any](k *Kind[S], fn func(ctx *Context, state *S, msg M) error) {
	k.s.add(&handler{typeName: typeName[M](), run: func(c *Context, st any, e *mailbox.Envelope) error {
		v, err := payload.Value[M](e.Msg)
		if err != nil {
			return err
		}
		e.ReturnPermit() // immediately before the handler's first instruction
		if err := fn(c, st.(*S), v); err != nil {
			return err
		}
		return ackReply(c) // only an encoded Request waits for a one-way handler
	}})
}

// HandleRequest adds a request handler for messages of type M to kind k:
// its result R (or error) is the reply to Ask. Sent with Tell, the message
// runs the handler and the result is dropped.
func HandleRequest[S, M, R any](k *Kind[S], fn func(ctx *Context, state *S, msg M) (R, error)) {
	k.s.add(&handler{typeName: typeName[M](), request: true, replyType: typeName[R](), run: func(c *Context, st any, e *mailbox.Envelope) error {
		v, err := payload.Value[M](e.Msg)
		if err != nil {
			return err
		}
		e.ReturnPermit()
		r, err := fn(c, st.(*S), v)
		if err != nil {
			return err
		}
		return replyWith(c, r)
	}})
}

// Channel is a named set of subscribers on a host. Publish fans a message
// out to every subscriber of its type, each in its own turn; AskChannel
// sends a request to one subscriber that serves its type. Channels do not
// relocate. Define subscribers with Subscribe and Serve before registering.
type Channel struct {
	name string
	subs []*spec
	errs []error
}

// NewChannel defines a channel.
func NewChannel(name string) *Channel {
	c := &Channel{name: name}
	if name == "" {
		c.errs = append(c.errs, payload.NewError(payload.InvalidOperation, "actor.NewChannel", "empty channel name"))
	}
	return c
}

// Name returns the channel's name.
func (ch *Channel) Name() string { return ch.name }

func (ch *Channel) specs() []*spec {
	if len(ch.errs) > 0 {
		return []*spec{{name: ch.name, channel: true, errs: ch.errs}}
	}
	return ch.subs
}

func (ch *Channel) subscriber() *spec {
	s := &spec{name: ch.name, channel: true, placement: PlaceLocal, handlers: map[string]*handler{}, spanName: turnSpanName(ch.name),
		factory: func(*Context, string) (any, error) { return struct{}{}, nil }}
	ch.subs = append(ch.subs, s)
	return s
}

// Subscribe adds a subscriber to ch that receives every published message
// of type M in its own turns.
func Subscribe[M any](ch *Channel, fn func(ctx *Context, msg M) error) {
	ch.subscriber().add(&handler{typeName: typeName[M](), run: func(c *Context, _ any, e *mailbox.Envelope) error {
		v, err := payload.Value[M](e.Msg)
		if err != nil {
			return err
		}
		e.ReturnPermit()
		return fn(c, v)
	}})
}

// Serve adds a subscriber to ch that answers requests of type M (AskChannel
// picks one such subscriber per request). It also receives published
// messages of type M; their results are dropped.
func Serve[M, R any](ch *Channel, fn func(ctx *Context, msg M) (R, error)) {
	ch.subscriber().add(&handler{typeName: typeName[M](), request: true, replyType: typeName[R](), run: func(c *Context, _ any, e *mailbox.Envelope) error {
		v, err := payload.Value[M](e.Msg)
		if err != nil {
			return err
		}
		e.ReturnPermit()
		r, err := fn(c, v)
		if err != nil {
			return err
		}
		return replyWith(c, r)
	}})
}

// Summarize sets how Host.Inspect summarizes an object's state: fn runs in
// the inspection's turn, with the state, and its result (cut to
// MaxSummary bytes) is Inspection.Summary. It must not change the state.
func (k *Kind[S]) Summarize(fn func(state *S) string) {
	k.s.summary = func(st any) string { return fn(st.(*S)) }
}

// inspectHandler is the request handler every kind has for inspectRequest.
func inspectHandler() *handler {
	return &handler{typeName: typeName[inspectRequest](), request: true, replyType: typeName[Inspection](), builtin: true,
		run: func(c *Context, st any, e *mailbox.Envelope) error {
			e.ReturnPermit()
			c.StateUnchanged()
			o := c.owner
			in := Inspection{Ref: o.ref, Host: o.t.name, ObjectGeneration: o.row.ObjectGen, OwnerGeneration: o.row.OwnerGen,
				Since: o.since, Queued: o.mb.Len(mailbox.Application), Turns: o.turns.Load()}
			if last := o.lastTurn.Load(); last != 0 {
				in.LastTurn = o.since.Add(time.Duration(last - o.sinceNano))
			}
			for _, m := range o.t.record.since(0) {
				if m.Ref == o.ref {
					in.Moves = append(in.Moves, m)
				}
			}
			if o.spec.summary != nil {
				in.Summary = cutSummary(o.spec.summary(st))
			}
			return replyWith(c, in)
		}}
}

// SetPlacement sets where the kind's objects activate and drain to (see
// Placement); the default, and nil, is PlaceLocal. On a host without a
// transport every placement is local.
func (k *Kind[S]) SetPlacement(p Placement) {
	if p == nil {
		p = PlaceLocal
	}
	k.s.placement = p
}

// Placement returns the kind's placement.
func (k *Kind[S]) Placement() Placement { return k.s.placement }
