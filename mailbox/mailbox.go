package mailbox

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/berthrt/berth/payload"
)

// Lane limits and item accounting (docs/architecture.md, "Job queue, lanes and back-pressure").
const (
	// ItemOverhead is what every item reserves on top of its payload size.
	ItemOverhead = 256
	// LifecycleBurst is the most lifecycle turns run in a row while
	// application items are waiting.
	LifecycleBurst = 8
)

// Limits bound one lane: queued items, and bytes reserved by items that
// have not finished their turn.
type Limits struct {
	Items int
	Bytes int64
}

// The default lane limits.
var (
	DefaultApplicationLimits = Limits{Items: 1024, Bytes: 64 << 20}
	DefaultLifecycleLimits   = Limits{Items: 128, Bytes: 4 << 20}
)

// Admission errors. None of them changes the mailbox.
var (
	// ErrClosed: the owner is not (or no longer) here. Kind NotFound; the
	// caller looks the owner up again.
	ErrClosed = payload.NewError(payload.NotFound, "mailbox.Admit", "owner is closed")
	// ErrFull: the lane has no room for the item now. Kind CapacityExceeded;
	// a sender may wait for room (see AdmitOrWait).
	ErrFull = payload.NewError(payload.CapacityExceeded, "mailbox.Admit", "lane is full")
	// ErrTooLarge: the item is larger than the lane's byte limit and can
	// never be admitted. Kind CapacityExceeded.
	ErrTooLarge = payload.NewError(payload.CapacityExceeded, "mailbox.Admit", "item is larger than the lane")
)

// Counters are host-wide totals that many mailboxes update, read by metrics.
// The zero value is ready to use.
type Counters struct {
	queued [2]stripedGauge
}

// Queued returns the number of items queued in a lane across mailboxes
// (held items included).
func (c *Counters) Queued(l Lane) int64 { return c.queued[l].load() }

// Mailbox is an owner's queue, implementing protoactor-go's actor.Mailbox.
//
// There is no goroutine per owner: whoever makes an empty, idle mailbox
// runnable schedules one drain on the dispatcher, and the drain runs turns
// one at a time — the owner's gate — until nothing runnable is left.
//
// Admission is one atomic span under the mailbox lock: the owner is here
// (not closed), the lane has room, the item gets its sequence number, is
// appended, and the drain is scheduled if needed. A failed check changes
// nothing.
//
// While sealed, no application turn starts; application arrivals are held,
// encoded and in order; lifecycle items still run. Drain hands back the
// unexecuted application queue and the hold without decoding anything.
//
// Lock order: Mailbox.mu is never held while calling the invoker, the
// dispatcher, Permits, or an envelope's Release.
type Mailbox struct {
	mu         sync.Mutex
	lanes      [2]lane // guarded by mu
	hold       lane    // application arrivals while sealed; guarded by mu
	seq        uint64  // guarded by mu
	sealed     bool    // guarded by mu
	closed     bool    // guarded by mu
	scheduled  bool    // a drain is scheduled or running; guarded by mu
	burst      int     // lifecycle turns in a row; guarded by mu
	system     []any   // protoactor system messages; guarded by mu
	room       chan struct{}
	counters   *Counters
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	runFn      func() // m.run, made once: a method value allocates

	// Owner is the layer above's owner object, for the invoker to find from
	// an item (Envelope.Mailbox). Set it before the mailbox is used.
	Owner any
	// OnStop, if set, runs on the drain after protoactor's Stop system
	// message has been processed: the actor is stopped. Set it before use.
	OnStop func()
}

// New returns an open mailbox with the given lane limits (zero limits take
// the defaults). counters may be nil.
func New(app, lifecycle Limits, counters *Counters) *Mailbox {
	if app == (Limits{}) {
		app = DefaultApplicationLimits
	}
	if lifecycle == (Limits{}) {
		lifecycle = DefaultLifecycleLimits
	}
	if counters == nil {
		counters = new(Counters)
	}
	m := &Mailbox{counters: counters}
	m.runFn = m.run
	m.lanes[Application].limit = app
	m.lanes[Lifecycle].limit = lifecycle
	return m
}

// Admit runs the admission span for e: ErrClosed if the owner is closed;
// while sealed, an application item is held; otherwise ErrTooLarge or
// ErrFull if the lane cannot take it; else e is appended with the next
// sequence number and the drain is scheduled if the mailbox was idle. On
// success the mailbox owns e.
func (m *Mailbox) Admit(e *Envelope) error {
	_, err := m.admit(e, false, false)
	return err
}

// AdmitOverflow admits e like Admit but without the lane's item and byte
// limits. It is for items whose number is already bounded elsewhere:
// application items granted a host-wide permit asynchronously, which cannot
// wait for room.
func (m *Mailbox) AdmitOverflow(e *Envelope) error {
	_, err := m.admit(e, true, false)
	return err
}

// AdmitOrWait admits e like Admit; when the lane is full it returns ErrFull
// and a channel that is closed when room may have freed, taken in the same
// span so no wake-up is missed.
func (m *Mailbox) AdmitOrWait(e *Envelope) (<-chan struct{}, error) {
	return m.admit(e, false, true)
}

// AdmitOrRun admits e like AdmitOrWait, except that when the mailbox is
// idle — nothing queued or held, no drain scheduled or running, not sealed
// or closed — it runs e's turn at once on the calling goroutine (the caller
// holds the gate meanwhile) and reports ran. Items that arrive during that
// turn are handed to the dispatcher afterwards. A ran item has ended
// (released) when AdmitOrRun returns.
func (m *Mailbox) AdmitOrRun(e *Envelope) (ran bool, room <-chan struct{}, err error) {
	claimed, room, err := m.AdmitOrClaim(e)
	if claimed {
		m.RunClaimed(e)
		return true, nil, nil
	}
	return false, room, err
}

// AdmitOrClaim is AdmitOrRun in two steps: where AdmitOrRun would run e's
// turn, it takes the gate for e instead and reports claimed; the caller
// must then call RunClaimed(e), without holding a lock that the turn or an
// admission may need. Until then no other turn starts; items admitted
// meanwhile queue behind e.
func (m *Mailbox) AdmitOrClaim(e *Envelope) (claimed bool, room <-chan struct{}, err error) {
	size := e.Size()
	m.mu.Lock()
	if e.Lane != Application || m.closed || m.sealed || m.scheduled || m.dispatcher == nil ||
		len(m.system) > 0 || m.lanes[0].len() > 0 || m.lanes[1].len() > 0 {
		m.mu.Unlock()
		room, err = m.admit(e, false, true)
		return false, room, err
	}
	l := &m.lanes[Application]
	if size > l.limit.Bytes {
		m.mu.Unlock()
		return false, nil, ErrTooLarge
	}
	e.Seq = m.seq
	m.seq++
	e.reserved = size
	l.bytes += size
	m.scheduled = true // the gate: no drain starts while this turn runs
	m.mu.Unlock()
	return true, nil, nil
}

// RunClaimed runs the turn of an item AdmitOrClaim claimed, on the calling
// goroutine, then hands what arrived meanwhile to the dispatcher. The item
// has ended (released) when RunClaimed returns.
func (m *Mailbox) RunClaimed(e *Envelope) {
	l := &m.lanes[Application]
	e.box = m
	m.invoker.InvokeUserMessage(e)

	m.mu.Lock()
	l.bytes -= e.reserved
	m.signalRoomLocked()
	more := m.runnableLocked()
	if !more {
		m.scheduled = false
	}
	m.mu.Unlock()
	e.Release()
	if more {
		m.dispatcher.Schedule(m.runFn)
	}
}

func (m *Mailbox) admit(e *Envelope, overflow, wantRoom bool) (<-chan struct{}, error) {
	size, laneID := e.Size(), e.Lane // e may run and be recycled once unlocked
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if laneID == Application && m.sealed {
		e.Seq = m.seq
		m.seq++
		e.reserved = size
		m.hold.push(e)
		m.mu.Unlock()
		m.counters.queued[Application].add(1)
		return nil, nil
	}
	l := &m.lanes[laneID]
	if !overflow {
		if size > l.limit.Bytes {
			m.mu.Unlock()
			return nil, ErrTooLarge
		}
		if l.len() >= l.limit.Items || l.bytes+size > l.limit.Bytes {
			var room chan struct{}
			if wantRoom {
				if m.room == nil {
					m.room = make(chan struct{})
				}
				room = m.room
			}
			m.mu.Unlock()
			return room, ErrFull
		}
	}
	e.Seq = m.seq
	m.seq++
	e.reserved = size
	l.bytes += size
	l.push(e)
	sched := m.scheduleLocked()
	m.mu.Unlock()
	m.counters.queued[laneID].add(1)
	if sched {
		m.dispatcher.Schedule(m.runFn)
	}
	return nil, nil
}

// scheduleLocked marks the mailbox scheduled if it is idle and has
// something runnable, and reports whether the caller must schedule the drain.
func (m *Mailbox) scheduleLocked() bool {
	if m.scheduled || m.dispatcher == nil || !m.runnableLocked() {
		return false
	}
	m.scheduled = true
	return true
}

func (m *Mailbox) runnableLocked() bool {
	return len(m.system) > 0 || m.lanes[Lifecycle].len() > 0 ||
		(!m.sealed && m.lanes[Application].len() > 0)
}

// nextLocked picks the next item: lifecycle first, at most LifecycleBurst in
// a row while application items wait; application items only when unsealed.
func (m *Mailbox) nextLocked() *Envelope {
	life, app := &m.lanes[Lifecycle], &m.lanes[Application]
	appRunnable := !m.sealed && app.len() > 0
	if life.len() > 0 && (m.burst < LifecycleBurst || !appRunnable) {
		m.burst++
		return life.pop()
	}
	if appRunnable {
		m.burst = 0
		return app.pop()
	}
	return nil
}

// run is the drain: it runs system messages, then turns, until nothing is
// runnable, yielding to the dispatcher after its throughput. The end of one
// turn and the choice of the next share one critical section.
func (m *Mailbox) run() {
	limit := m.dispatcher.Throughput()
	var prev *Envelope // the item whose turn just ended
	for turns := 0; ; {
		m.mu.Lock()
		if prev != nil {
			m.lanes[prev.Lane].bytes -= prev.reserved
			m.signalRoomLocked()
		}
		if len(m.system) > 0 {
			msg := m.system[0]
			m.system[0] = nil
			m.system = m.system[1:]
			if len(m.system) == 0 {
				m.system = nil
			}
			m.mu.Unlock()
			prev = release(prev)
			m.invoker.InvokeSystemMessage(msg)
			if _, stop := msg.(*actor.Stop); stop && m.OnStop != nil {
				m.OnStop()
			}
			continue
		}
		if turns >= limit && limit > 0 && m.runnableLocked() {
			// Yield: stay scheduled and let the dispatcher run us again.
			m.mu.Unlock()
			release(prev)
			m.dispatcher.Schedule(m.runFn)
			return
		}
		e := m.nextLocked()
		if e == nil {
			m.scheduled = false
			m.mu.Unlock()
			release(prev)
			return
		}
		m.signalRoomLocked()
		m.mu.Unlock()
		prev = release(prev)
		m.counters.queued[e.Lane].add(-1)
		e.box = m
		m.invoker.InvokeUserMessage(e)
		prev = e
		turns++
	}
}

// release ends an item after its turn (message released, permit returned
// if the turn did not) and returns nil.
func release(e *Envelope) *Envelope {
	if e != nil {
		e.Release()
	}
	return nil
}

func (m *Mailbox) signalRoomLocked() {
	if m.room != nil {
		close(m.room)
		m.room = nil
	}
}

// Seal stops new application turns at the next turn boundary (a running
// turn finishes). Later application arrivals are held. Lifecycle items
// still run.
func (m *Mailbox) Seal() {
	m.mu.Lock()
	m.sealed = true
	m.mu.Unlock()
}

// Sealed reports whether the mailbox is sealed.
func (m *Mailbox) Sealed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sealed
}

// Drain takes the unexecuted application queue and the hold, each in
// order, without decoding anything. The mailbox stays sealed; their byte
// reservations leave the lane with them. Drain panics unless the mailbox is
// sealed. The caller owns the envelopes.
func (m *Mailbox) Drain() (queued, held []*Envelope) {
	m.mu.Lock()
	if !m.sealed {
		m.mu.Unlock()
		panic("mailbox: Drain of an unsealed mailbox")
	}
	app := &m.lanes[Application]
	queued = app.takeAll()
	for _, e := range queued {
		app.bytes -= e.reserved
	}
	held = m.hold.takeAll()
	m.signalRoomLocked()
	m.mu.Unlock()
	m.counters.queued[Application].add(-int64(len(queued) + len(held)))
	return queued, held
}

// TakeHeld takes the items held so far, in order. The mailbox stays sealed.
func (m *Mailbox) TakeHeld() []*Envelope {
	m.mu.Lock()
	held := m.hold.takeAll()
	m.mu.Unlock()
	m.counters.queued[Application].add(-int64(len(held)))
	return held
}

// Reopen puts items back at the head of the application queue in the order
// given (for an aborted move: captured work, then the hold), appends what
// was held since, unseals, and schedules the drain. Their sequence numbers
// are kept. The lane's limits do not apply to these items.
func (m *Mailbox) Reopen(items []*Envelope) {
	m.mu.Lock()
	app := &m.lanes[Application]
	rest := app.takeAll()
	held := m.hold.takeAll()
	for _, list := range [][]*Envelope{items, rest, held} {
		for _, e := range list {
			app.bytes += e.reserved
			app.push(e)
		}
	}
	m.sealed = false
	sched := m.scheduleLocked()
	m.mu.Unlock()
	m.counters.queued[Application].add(int64(len(items)))
	if sched {
		m.dispatcher.Schedule(m.runFn)
	}
}

// Close marks the owner gone: later admissions fail with ErrClosed. It
// returns every queued item — lifecycle, application, then held, each in
// order — for the caller to end; a running turn finishes normally.
// Protoactor system messages still run.
func (m *Mailbox) Close() []*Envelope {
	m.mu.Lock()
	m.closed = true
	var out []*Envelope
	life := m.lanes[Lifecycle].takeAll()
	app := m.lanes[Application].takeAll()
	held := m.hold.takeAll()
	for _, e := range life {
		m.lanes[Lifecycle].bytes -= e.reserved
	}
	for _, e := range app {
		m.lanes[Application].bytes -= e.reserved
	}
	out = append(append(append(out, life...), app...), held...)
	m.signalRoomLocked()
	m.mu.Unlock()
	m.counters.queued[Lifecycle].add(-int64(len(life)))
	m.counters.queued[Application].add(-int64(len(app) + len(held)))
	return out
}

// CloseIfEmpty closes the mailbox only if nothing is queued or held, and
// reports whether it did. Called from the owner's own turn, it makes that
// turn the owner's last (passivation).
func (m *Mailbox) CloseIfEmpty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return true
	}
	if m.lanes[0].len() > 0 || m.lanes[1].len() > 0 || m.hold.len() > 0 {
		return false
	}
	m.closed = true
	m.signalRoomLocked()
	return true
}

// Closed reports whether Close was called.
func (m *Mailbox) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Len returns the number of queued items in a lane (held items count as
// application items).
func (m *Mailbox) Len(l Lane) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lanes[l].len()
	if l == Application {
		n += m.hold.len()
	}
	return n
}

// Idle reports whether the mailbox has no queued item and no drain
// scheduled or running.
func (m *Mailbox) Idle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.scheduled && m.lanes[0].len() == 0 && m.lanes[1].len() == 0 && m.hold.len() == 0
}

// PostUserMessage implements actor.Mailbox. berth admits its own items with
// Admit; a message posted through protoactor (a raw send to the owner's PID)
// becomes a lifecycle control item, admitted without limits.
func (m *Mailbox) PostUserMessage(message any) {
	e := NewEnvelope()
	e.Lane = Lifecycle
	e.Control = message
	if err := m.AdmitOverflow(e); err != nil {
		e.Release()
	}
}

// PostSystemMessage implements actor.Mailbox: protoactor's system messages
// (start, stop, watch) run before any turn.
func (m *Mailbox) PostSystemMessage(message any) {
	m.mu.Lock()
	m.system = append(m.system, message)
	sched := m.scheduleLocked()
	m.mu.Unlock()
	if sched {
		m.dispatcher.Schedule(m.runFn)
	}
}

// RegisterHandlers implements actor.Mailbox.
func (m *Mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.mu.Lock()
	m.invoker, m.dispatcher = invoker, dispatcher
	m.mu.Unlock()
}

// Start implements actor.Mailbox.
func (m *Mailbox) Start() {}

// UserMessageCount implements actor.Mailbox: queued items of both lanes.
func (m *Mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lanes[0].len() + m.lanes[1].len() + m.hold.len()
}

var _ actor.Mailbox = (*Mailbox)(nil)
