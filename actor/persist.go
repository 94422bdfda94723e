package actor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The durable state part (persister, stateGate): the writes of persistent
// kinds' states and their output gates (docs/architecture.md, "Durable
// state").
//
// Owns: the state store, the queue of writes waiting for the next flush,
// the flush in flight; per persistent owner (stateGate) its write count,
// what is durable, and the outputs its turns made that wait for a write.
// Lock: persister.mu (a leaf) guards the queue and each gate's waiting
// write; stateGate.mu (a leaf) guards the gate's held outputs and what is
// durable. Neither is held across a store call, a send or a reply.
// May call: the state store, requests (replies), an owner's outbox and
// lifecycle lane, the leaves.
// Invariants:
//   - A turn's outputs (its replies, its handlers' sends) leave only once
//     every write of its owner up to the one after that turn is durable,
//     in the order the turns made them; a turn that changed nothing waits
//     for the writes before it.
//   - One flush is in flight per host; the next starts as soon as it
//     returns, with every write queued meanwhile (group commit), the
//     newest state of each object once (coalescing).
//   - A write is fenced by the owner's ownership: a fenced write ends the
//     activation, and its held outputs end as failures, never as if the
//     write had landed.

// persister writes the states of a host's persistent owners.
type persister struct {
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	requests *requestTable
	store    relocation.StateStore // nil: no kind may persist

	mu       sync.Mutex
	queue    []*stateGate // gates with a write waiting, each once; guarded by mu
	flushing bool         // a flush goroutine runs; guarded by mu
	running  sync.WaitGroup

	writes   atomic.Int64 // writes that landed (Stats.StateWrites)
	flushes  atomic.Int64 // store calls that returned (Stats.StateFlushes)
	fencedN  atomic.Int64 // writes fenced: activations ended (Stats.StateFenced)
	failures atomic.Int64 // store calls that failed and were retried (Stats.StateWriteErrors)
	held     atomic.Int64 // outputs waiting for a write now (Stats.OutputsHeld)

	// Counters of Stats, this part's own.
	droppedOutputs atomic.Int64 // outputs of persistent owners ended as failures (Stats.OutputsDropped)
}

// stateGate is a persistent owner's write count and output gate.
type stateGate struct {
	p   *persister
	o   *owner
	obj relocation.Object

	// The owner's turn goroutine only.
	epoch     uint64       // writes queued so far
	turnOut   []heldOutput // the running turn's outputs
	ran       bool         // the running turn's handler ran
	unchanged bool         // the running turn said it changed nothing
	direct    int          // > 0: outputs pass (an Ask from a handler, after sync)

	// Guarded by p.mu: the write waiting for the next flush.
	queued    bool
	next      []byte
	nextEpoch uint64
	nextOwner relocation.Ownership

	mu        sync.Mutex
	held      []heldOutput  // outputs waiting, oldest first; guarded by mu
	durable   uint64        // writes durable (every epoch up to it); guarded by mu
	fenced    bool          // a write was fenced: the activation ends; guarded by mu
	releasing bool          // a goroutine performs released outputs; guarded by mu
	changed   chan struct{} // closed and replaced when durable, fenced or releasing change; guarded by mu
}

// heldOutput is one output of a turn of a persistent owner: a reply, a
// send or a fan-out, and the write it waits for.
type heldOutput struct {
	epoch uint64
	route []byte // a reply: its route (a copy), op and value
	op    payload.OpID
	r     reply
	t     target // a send: its target and message
	m     *payload.Message
	ps    *pendingSend // a fan-out (Publish)
}

// errFenced ends what a fenced activation held.
var errFenced = payload.NewError(payload.Unavailable, "actor",
	"the object has a newer owner: this activation ended before its state was durable (try again)")

func (p *persister) init(store relocation.StateStore) { p.store = store }

// gateFor returns a new owner's gate, or nil for a kind that does not persist.
func (p *persister) gateFor(o *owner) *stateGate {
	if !o.spec.persist || p.store == nil {
		return nil
	}
	return &stateGate{p: p, o: o, obj: relocation.Object{Kind: o.ref.Kind, ID: o.ref.ID}, changed: make(chan struct{})}
}

// enqueue queues g's write of data (its epoch-th), replacing a write of g
// that still waits, and starts a flush if none is in flight.
func (p *persister) enqueue(g *stateGate, epoch uint64, data []byte, owner relocation.Ownership) {
	p.mu.Lock()
	g.next, g.nextEpoch, g.nextOwner = data, epoch, owner
	if !g.queued {
		g.queued = true
		p.queue = append(p.queue, g)
	}
	start := !p.flushing
	p.flushing = true
	p.mu.Unlock()
	if start {
		p.running.Add(1)
		go p.flush()
	}
}

// flush writes what is queued in one store call, hands the next flush on
// to a new goroutine if more was queued meanwhile, and settles the gates.
func (p *persister) flush() {
	defer p.running.Done()
	p.mu.Lock()
	gates := p.queue
	p.queue = nil
	if len(gates) == 0 {
		p.flushing = false
		p.mu.Unlock()
		return
	}
	writes := make([]relocation.StateWrite, len(gates))
	epochs := make([]uint64, len(gates))
	for i, g := range gates {
		writes[i] = relocation.StateWrite{Object: g.obj, Owner: g.nextOwner, Data: g.next}
		epochs[i] = g.nextEpoch
		g.queued, g.next = false, nil
	}
	p.mu.Unlock()

	fenced, err := p.write(writes)

	p.mu.Lock()
	more := len(p.queue) > 0
	p.flushing = more
	p.mu.Unlock()
	if more {
		p.running.Add(1)
		go p.flush()
	}
	j := 0
	for i, g := range gates {
		switch {
		case err != nil:
			g.abandon(err)
		case j < len(fenced) && fenced[j] == i:
			j++
			p.fencedN.Add(1)
			g.fence()
		default:
			p.writes.Add(1)
			g.written(epochs[i])
		}
	}
}

// write makes one batch durable: it retries a failing store (outputs
// wait meanwhile), until the host closes.
func (p *persister) write(writes []relocation.StateWrite) ([]int, error) {
	backoff := 5 * time.Millisecond
	for {
		ctx, cancel := p.life.storeContext()
		fenced, err := p.store.WriteStates(ctx, writes)
		cancel()
		p.flushes.Add(1)
		if err == nil {
			return fenced, nil
		}
		p.failures.Add(1)
		p.peerLogs.stateStore.Warn(p.log, "state store write failed; outputs wait, retrying", "writes", len(writes), "err", err)
		if errors.Is(err, relocation.ErrDuplicateWrite) {
			return nil, err // a bug here, not the store's: retrying cannot help
		}
		select {
		case <-p.life.closing():
			return nil, ErrShuttingDown
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// load makes the state of a persistent owner's new activation: the last
// durable state, restored, or the factory's for an object never written.
func (g *stateGate) load(c *Context) (any, error) {
	o := g.o
	ctx, cancel := g.p.life.storeContext()
	st, err := g.p.store.LoadState(ctx, g.obj)
	cancel()
	switch {
	case errors.Is(err, relocation.ErrNoState):
		return o.spec.factory(c, o.ref.ID)
	case err != nil:
		return nil, err
	}
	return o.spec.restore(c, o.ref.ID, st.Data)
}

// hold keeps an output of the running turn.
func (g *stateGate) hold(out heldOutput) { g.turnOut = append(g.turnOut, out) }

// passes reports whether the running turn's outputs go out at once.
func (g *stateGate) passes() bool { return g.direct > 0 }

// endTurn ends a turn of the owner: if its handler ran and did not say
// it changed nothing, the state is captured and its write queued; the
// turn's outputs join the held ones behind that write (or behind the
// last one queued), and what is durable is released.
func (g *stateGate) endTurn() {
	o := g.o
	if g.ran && !g.unchanged && o.ready {
		g.queueWrite()
	}
	g.ran, g.unchanged = false, false
	g.park()
}

// queueWrite captures the owner's state and queues its write.
func (g *stateGate) queueWrite() {
	o := g.o
	data, err := o.spec.capture(o.state)
	if err != nil {
		// The state cannot be made durable: what this turn did must not
		// look as if it were. Its outputs end as failures.
		g.p.log.Error("persistent state not captured; the turn's outputs fail", "owner", o.ref.String(), "err", err)
		g.failTurn(&payload.Error{Kind: payload.InternalFailure, Op: "actor", Detail: o.ref.String() + ": state capture failed", Err: err})
		return
	}
	g.epoch++
	g.p.enqueue(g, g.epoch, data, o.row)
}

// park moves the turn's outputs behind the last queued write and releases
// what may go.
func (g *stateGate) park() {
	if len(g.turnOut) == 0 {
		return
	}
	g.mu.Lock()
	if g.fenced {
		g.mu.Unlock()
		g.drop(g.turnOut, errFenced)
		g.turnOut = g.turnOut[:0]
		return
	}
	if len(g.held) == 0 && !g.releasing && g.durable >= g.epoch {
		// Nothing to wait for: out at once, on this goroutine.
		g.releasing = true
		g.mu.Unlock()
		for i := range g.turnOut {
			g.perform(&g.turnOut[i])
		}
		clear(g.turnOut)
		g.turnOut = g.turnOut[:0]
		g.mu.Lock()
		g.releasing = false
		g.broadcastLocked()
		more := len(g.held) > 0
		g.mu.Unlock()
		if more {
			g.release()
		}
		return
	}
	for i := range g.turnOut {
		g.turnOut[i].epoch = g.epoch
	}
	g.held = append(g.held, g.turnOut...)
	g.p.held.Add(int64(len(g.turnOut)))
	g.mu.Unlock()
	clear(g.turnOut)
	g.turnOut = g.turnOut[:0]
	g.release()
}

// failTurn ends the running turn's outputs with err.
func (g *stateGate) failTurn(err error) {
	g.drop(g.turnOut, err)
	clear(g.turnOut)
	g.turnOut = g.turnOut[:0]
}

// written records that the owner's writes up to epoch are durable and
// releases what waited for them.
func (g *stateGate) written(epoch uint64) {
	g.mu.Lock()
	if epoch > g.durable {
		g.durable = epoch
	}
	g.broadcastLocked()
	g.mu.Unlock()
	g.release()
}

// release performs, in order, the held outputs whose writes are durable;
// one goroutine at a time does, the others leave what they add to it.
func (g *stateGate) release() {
	g.mu.Lock()
	if g.releasing {
		g.mu.Unlock()
		return
	}
	g.releasing = true
	for {
		n := 0
		for n < len(g.held) && g.held[n].epoch <= g.durable {
			n++
		}
		if n == 0 || g.fenced {
			g.releasing = false
			g.broadcastLocked()
			g.mu.Unlock()
			return
		}
		out := make([]heldOutput, n)
		copy(out, g.held[:n])
		clear(g.held[:n])
		g.held = g.held[n:]
		if len(g.held) == 0 {
			g.held = nil
		}
		g.mu.Unlock()
		g.p.held.Add(-int64(n))
		for i := range out {
			g.perform(&out[i])
		}
		g.mu.Lock()
	}
}

// perform sends one output on its way.
func (g *stateGate) perform(out *heldOutput) {
	o := g.o
	switch {
	case out.route != nil:
		g.p.requests.routeReply(out.route, out.op, out.r)
	case out.ps != nil:
		o.out.enqueue(out.ps)
	case out.m != nil:
		ps := &pendingSend{m: out.m}
		ps.one[0] = out.t
		ps.targets = ps.one[:]
		o.out.enqueue(ps)
	}
}

// drop ends outputs that must not go out as if their turns' writes had
// landed: a reply becomes the error err, a send is dropped and counted.
func (g *stateGate) drop(outs []heldOutput, err error) {
	h := g.p
	for i := range outs {
		out := &outs[i]
		switch {
		case out.route != nil:
			if !out.r.buf.IsZero() {
				out.r.buf.Release()
			}
			if out.r.err != nil {
				h.requests.routeReply(out.route, out.op, out.r) // already a failure
				continue
			}
			h.requests.routeReply(out.route, out.op, reply{err: err})
		case out.ps != nil:
			for _, t := range out.ps.targets[out.ps.next:] {
				h.obs.Rejected(t.name(), RejectUndeliverable)
			}
			out.ps.m.Release()
		case out.m != nil:
			h.obs.Rejected(out.t.name(), RejectUndeliverable)
			out.m.Release()
		}
	}
	h.droppedOutputs.Add(int64(len(outs)))
}

// fence ends the activation: a write found that the object has a newer
// owner. What the gate held ends as failures; the owner closes.
func (g *stateGate) fence() {
	g.mu.Lock()
	if g.fenced {
		g.mu.Unlock()
		return
	}
	g.fenced = true
	outs := g.held
	g.held = nil
	g.broadcastLocked()
	g.mu.Unlock()
	g.p.held.Add(-int64(len(outs)))
	g.p.log.Warn("state write fenced: the object has a newer owner; this activation ends", "owner", g.o.ref.String())
	g.drop(outs, errFenced)
	g.o.postControl(controlFenced)
}

// abandon ends what waited for a write that will never be made (the host
// closed while the store failed).
func (g *stateGate) abandon(err error) {
	g.mu.Lock()
	outs := g.held
	g.held = nil
	g.broadcastLocked()
	g.mu.Unlock()
	g.p.held.Add(-int64(len(outs)))
	g.drop(outs, err)
}

func (g *stateGate) broadcastLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// settled waits until every write queued so far is durable and every
// output before now has gone out, up to ctx's end (then it fails with
// late). A fenced gate fails with errFenced.
func (g *stateGate) settled(ctx context.Context, late error) error {
	for {
		g.mu.Lock()
		switch {
		case g.fenced:
			g.mu.Unlock()
			return errFenced
		case g.durable >= g.epoch && len(g.held) == 0 && !g.releasing:
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return late
		}
	}
}

// sync makes the state as it is now durable and lets every output made so
// far go, within the running turn: an Ask from a handler waits for it,
// so that what it asks never depends on state a crash could take back.
func (g *stateGate) sync(deadline time.Time) error {
	if g.o.ready {
		g.queueWrite()
	}
	g.park()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return g.settled(ctx, ErrRequestTimeout) // the Ask's deadline passed before it could be sent
}

// flushAll waits, between turns, until the owner's state is durable and
// its outputs have gone (a move's capture, a deactivation).
func (g *stateGate) flushAll() error {
	ctx, cancel := g.p.life.storeContext()
	defer cancel()
	return g.settled(ctx, &payload.Error{Kind: payload.Unavailable, Op: "actor",
		Detail: g.o.ref.String() + ": the state store did not make the state durable within StoreTimeout"})
}

// final writes the state a last time (a deactivation: its hook may have
// changed it) and waits for it.
func (g *stateGate) final() error {
	if g.o.ready && !g.isFenced() {
		g.queueWrite()
	}
	return g.flushAll()
}

func (g *stateGate) isFenced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fenced
}
