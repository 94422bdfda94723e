package membership

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/berthrt/berth/internal/fifo"
)

// DefaultWatchBuffer is the backlog of a Memory watcher when
// Options.WatchBuffer is zero.
const DefaultWatchBuffer = 256

// Options configures a Memory. The zero Options works: the real clock,
// DefaultTTL, a sweep every second, DefaultWatchBuffer.
type Options struct {
	// Now is the store's clock; nil means time.Now. Expiry is judged by
	// it alone.
	Now func() time.Time
	// TTL is how long a lease lasts after Join or Renew, by Now; zero
	// means DefaultTTL.
	TTL time.Duration
	// SweepEvery is how often, in real time (a time.Ticker, whatever Now
	// is), the store looks for leases that expired while no call came in,
	// to remove them and report them to watchers. Every call also looks
	// first. Zero means one second.
	SweepEvery time.Duration
	// WatchBuffer is how many events a watcher may have waiting before its
	// backlog is replaced by a Sync (see Membership.Watch); zero means
	// DefaultWatchBuffer.
	WatchBuffer int
}

// Memory is the in-memory Membership, the embedded default for hosts in one
// process. It is safe for concurrent use. It runs one goroutine per
// watcher, until its watch ends, and one for the expiry sweep while it has
// live members: the sweep starts with the first Join and ends as soon as no
// member is live (the last one left or expired), so a Memory whose members all left and whose watches
// ended runs no goroutine (Close is then optional). Close stops them all.
// The zero Memory is not usable; use NewMemory.
//
// Lock order: Memory.mu → watcher.mu (a change is queued to every watcher
// while mu is held, which is what gives all watchers one order).
type Memory struct {
	now      func() time.Time
	ttl      time.Duration
	watchBuf int

	mu       sync.Mutex
	names    map[string]*entry     // guarded by mu; never shrinks: it fences generations
	watchers map[*watcher]struct{} // guarded by mu
	rev      uint64                // guarded by mu
	closed   bool                  // guarded by mu
	sweeping bool                  // the sweep goroutine runs; guarded by mu
	every    time.Duration
	idle     chan struct{} // one slot: the last live member may be gone, the sweep may end now
	// lastContact is the store's time of the last Join or Renew (guarded
	// by mu): a silence starts there (see Membership, "Silences").
	lastContact time.Time

	stop     chan struct{} // closed by Close
	stopOnce sync.Once
	bg       sync.WaitGroup

	faultMu sync.Mutex
	fault   func(ctx context.Context, op string) error // Fault; guarded by faultMu
}

// Fault makes every later call run f first (nil: none), outside the
// membership's lock: op is the method's name ("Renew", "Join", …). A
// non-nil error fails the call with it, changing nothing — the store is
// away; f may also block (honouring ctx) to make it slow. A call f fails
// is no contact: a membership whose every call fails is silent (see
// Membership, "Silences"), and its sweep expires nobody meanwhile. Tests
// of outages use it.
func (m *Memory) Fault(f func(ctx context.Context, op string) error) {
	m.faultMu.Lock()
	m.fault = f
	m.faultMu.Unlock()
}

// faulty runs the Fault hook of a call.
func (m *Memory) faulty(ctx context.Context, op string) error {
	m.faultMu.Lock()
	f := m.fault
	m.faultMu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, op)
}

// entry is what Memory knows of a name: its latest run, live or not.
type entry struct {
	m       Member    // the latest run; m.LeaseGen is the name's highest generation
	expires time.Time // by the store's clock
	live    bool      // false once the run left or expired
	left    bool      // the run left (rather than expired)
}

// NewMemory returns an empty membership. It panics if a field of opts is
// negative.
func NewMemory(opts Options) *Memory {
	switch {
	case opts.TTL < 0:
		panic("membership: NewMemory: Options.TTL is negative")
	case opts.SweepEvery < 0:
		panic("membership: NewMemory: Options.SweepEvery is negative")
	case opts.WatchBuffer < 0:
		panic("membership: NewMemory: Options.WatchBuffer is negative")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = time.Second
	}
	if opts.WatchBuffer == 0 {
		opts.WatchBuffer = DefaultWatchBuffer
	}
	m := &Memory{
		now:      opts.Now,
		ttl:      opts.TTL,
		watchBuf: opts.WatchBuffer,
		names:    map[string]*entry{},
		watchers: map[*watcher]struct{}{},
		stop:     make(chan struct{}),
		every:    opts.SweepEvery,
		idle:     make(chan struct{}, 1),
	}
	return m
}

// startSweepLocked starts the sweep goroutine unless it runs.
func (m *Memory) startSweepLocked() {
	if m.sweeping || m.closed {
		return
	}
	m.sweeping = true
	m.bg.Add(1)
	go m.sweeper(m.every)
}

// notLiveLocked is called when a run stops being live: if none is left,
// the sweep ends now rather than at its next tick.
func (m *Memory) notLiveLocked() {
	if m.sweeping && !m.anyLiveLocked() {
		select {
		case m.idle <- struct{}{}:
		default:
		}
	}
}

// anyLiveLocked reports whether some run is live.
func (m *Memory) anyLiveLocked() bool {
	for _, e := range m.names {
		if e.live {
			return true
		}
	}
	return false
}

// Close stops the sweep and every watch (their channels close) and waits
// for their goroutines. Later calls fail with ErrClosed. Close is
// idempotent.
func (m *Memory) Close() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		close(m.stop)
	})
	m.bg.Wait()
}

func (m *Memory) sweeper(every time.Duration) {
	defer m.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.idle:
			m.mu.Lock()
			if m.closed || !m.anyLiveLocked() {
				m.sweeping = false
				m.mu.Unlock()
				return
			}
			m.mu.Unlock()
		case <-t.C:
			m.mu.Lock()
			if !m.closed {
				m.sweepLocked()
			}
			if m.closed || !m.anyLiveLocked() {
				m.sweeping = false // a later Join starts a new sweep
				m.mu.Unlock()
				return
			}
			m.mu.Unlock()
		}
	}
}

// beginLocked checks the context and the store, and expires what is due,
// so every call sees (and every watcher is told of) expiries before the
// call's own change. A Join or Renew (contact) first ends a silence.
func (m *Memory) beginLocked(ctx context.Context, contact bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.closed {
		return ErrClosed
	}
	if contact {
		m.endSilenceLocked()
	}
	m.sweepLocked()
	return nil
}

// endSilenceLocked is a Join's or Renew's contact: after a silence (no
// Join or Renew for more than half a TTL) every lease that was live when
// it began gets a full TTL from now; now becomes the last contact.
func (m *Memory) endSilenceLocked() {
	now := m.now()
	if m.silentLocked(now) {
		for _, e := range m.names {
			if e.live && e.expires.After(m.lastContact) && e.expires.Before(now.Add(m.ttl)) {
				e.expires = now.Add(m.ttl)
			}
		}
	}
	if now.After(m.lastContact) {
		m.lastContact = now
	}
}

// silentLocked reports whether the store heard no Join or Renew for more
// than half a TTL before now.
func (m *Memory) silentLocked(now time.Time) bool {
	return !m.lastContact.IsZero() && now.Sub(m.lastContact) > m.ttl/2
}

// sweepLocked removes the runs whose lease expired by the store's clock,
// reporting them by deadline (then name). A silent store expires nothing:
// its leases ran out because nobody could reach it, and the next Join or
// Renew gives them a full TTL (endSilenceLocked).
func (m *Memory) sweepLocked() {
	now := m.now()
	if m.silentLocked(now) {
		return
	}
	var due []*entry
	for _, e := range m.names {
		if e.live && !now.Before(e.expires) {
			due = append(due, e)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].expires.Equal(due[j].expires) {
			return due[i].expires.Before(due[j].expires)
		}
		return due[i].m.Name < due[j].m.Name
	})
	for _, e := range due {
		e.live = false
		m.emitLocked(Event{Type: Expired, Member: e.m.clone()})
	}
	if len(due) > 0 {
		m.notLiveLocked()
	}
}

// emitLocked gives ev the next revision and queues it to every watcher.
func (m *Memory) emitLocked(ev Event) {
	m.rev++
	ev.Rev = m.rev
	for w := range m.watchers {
		w.push(ev, m.syncLocked)
	}
}

// listLocked returns the live members that are not Gone, by name.
func (m *Memory) listLocked() []Member {
	list := make([]Member, 0, len(m.names))
	for _, e := range m.names {
		if e.live && e.m.State != Gone {
			list = append(list, e.m.clone())
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

// syncLocked returns a Sync event for the current list.
func (m *Memory) syncLocked() Event {
	return Event{Type: Sync, Rev: m.rev, Members: m.listLocked()}
}

func (m *Memory) lease(e *entry) Lease {
	return Lease{Name: e.m.Name, Gen: e.m.LeaseGen, TTL: m.ttl}
}

// Join implements Membership.
func (m *Memory) Join(ctx context.Context, mem Member) (Lease, error) {
	if err := m.faulty(ctx, "Join"); err != nil {
		return Lease{}, err
	}
	if mem.State == 0 {
		mem.State = Serving
	}
	if mem.Name == "" || mem.LeaseGen == 0 || mem.State != Serving {
		return Lease{}, ErrInvalidMember
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.beginLocked(ctx, true); err != nil {
		return Lease{}, err
	}
	e := m.names[mem.Name]
	if e != nil {
		switch {
		case e.live && e.m.LeaseGen == mem.LeaseGen:
			if e.m.Address != mem.Address || e.m.MaxMessage != mem.MaxMessage || e.m.Version != mem.Version || !slices.Equal(e.m.Kinds, mem.Kinds) {
				return Lease{}, ErrNameTaken
			}
			e.expires = m.now().Add(m.ttl) // a retried Join: renew
			return m.lease(e), nil
		case mem.LeaseGen <= e.m.LeaseGen:
			return Lease{}, &GenerationError{Op: "Join", Name: mem.Name, Gen: mem.LeaseGen, Current: e.m.LeaseGen}
		case e.live:
			return Lease{}, ErrNameTaken
		}
	}
	e = &entry{m: mem.clone(), expires: m.now().Add(m.ttl), live: true}
	m.names[mem.Name] = e
	m.startSweepLocked()
	m.emitLocked(Event{Type: Joined, Member: e.m.clone()})
	return m.lease(e), nil
}

// runLocked finds the live run gen of name for Renew and SetState.
func (m *Memory) runLocked(op, name string, gen uint64) (*entry, error) {
	e := m.names[name]
	switch {
	case e == nil:
		return nil, ErrNotMember
	case e.m.LeaseGen != gen:
		return nil, &GenerationError{Op: op, Name: name, Gen: gen, Current: e.m.LeaseGen}
	case e.left:
		return nil, ErrNotMember
	case !e.live:
		return nil, ErrLeaseExpired
	}
	return e, nil
}

// Renew implements Membership.
func (m *Memory) Renew(ctx context.Context, name string, gen uint64) (Lease, error) {
	if err := m.faulty(ctx, "Renew"); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.beginLocked(ctx, true); err != nil {
		return Lease{}, err
	}
	e, err := m.runLocked("Renew", name, gen)
	if err != nil {
		return Lease{}, err
	}
	e.expires = m.now().Add(m.ttl)
	return m.lease(e), nil
}

// SetState implements Membership.
func (m *Memory) SetState(ctx context.Context, name string, gen uint64, to State) (Member, error) {
	if err := m.faulty(ctx, "SetState"); err != nil {
		return Member{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.beginLocked(ctx, false); err != nil {
		return Member{}, err
	}
	e, err := m.runLocked("SetState", name, gen)
	if err != nil {
		return Member{}, err
	}
	from := e.m.State
	if to == from {
		return e.m.clone(), nil
	}
	if !from.CanBecome(to) {
		return Member{}, ErrIllegalTransition
	}
	e.m.State = to
	m.emitLocked(Event{Type: StateChanged, Member: e.m.clone(), From: from})
	return e.m.clone(), nil
}

// Leave implements Membership.
func (m *Memory) Leave(ctx context.Context, name string, gen uint64) error {
	if err := m.faulty(ctx, "Leave"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.beginLocked(ctx, false); err != nil {
		return err
	}
	e := m.names[name]
	switch {
	case e == nil:
		return ErrNotMember
	case e.m.LeaseGen != gen:
		return &GenerationError{Op: "Leave", Name: name, Gen: gen, Current: e.m.LeaseGen}
	case !e.live:
		return nil // already left or expired
	}
	e.live, e.left = false, true
	m.emitLocked(Event{Type: Left, Member: e.m.clone()})
	m.notLiveLocked()
	return nil
}

// Members implements Membership.
func (m *Memory) Members(ctx context.Context) ([]Member, error) {
	if err := m.faulty(ctx, "Members"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.beginLocked(ctx, false); err != nil {
		return nil, err
	}
	return m.listLocked(), nil
}

// Expire ends the lease of name's live run now, as if the host had stopped
// renewing long ago, and reports it to watchers (tests, and an in-process
// network's kill). It does nothing if name has no live run.
func (m *Memory) Expire(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.names[name]; e != nil && e.live && !m.closed {
		m.endSilenceLocked() // an expiry on purpose: the store is not silent
		e.expires = m.now()
		m.sweepLocked()
	}
}

// Watch implements Membership.
func (m *Memory) Watch(ctx context.Context) (<-chan Event, error) {
	if err := m.faulty(ctx, "Watch"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.beginLocked(ctx, false); err != nil {
		return nil, err
	}
	w := &watcher{
		limit:  m.watchBuf,
		notify: make(chan struct{}, 1),
		out:    make(chan Event),
	}
	w.queue = append(w.queue, m.syncLocked())
	m.watchers[w] = struct{}{}
	m.bg.Add(1)
	go m.pump(ctx, w)
	return w.out, nil
}

// pump hands w's backlog to its channel until ctx is done or m closes.
func (m *Memory) pump(ctx context.Context, w *watcher) {
	defer m.bg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.watchers, w)
		m.mu.Unlock()
		close(w.out)
	}()
	for {
		ev, ok := w.pop()
		if !ok {
			select {
			case <-w.notify:
				continue
			case <-ctx.Done():
				return
			case <-m.stop:
				return
			}
		}
		select {
		case w.out <- ev:
		case <-ctx.Done():
			return
		case <-m.stop:
			return
		}
	}
}

// watcher is one Watch: a bounded backlog the writers append to without
// waiting, and a pump goroutine that moves it to the channel (the
// mailbox shape of nats-server's ipqueue: a mutex, a slice, a one-slot
// notify channel).
type watcher struct {
	limit  int
	notify chan struct{} // one slot: the backlog is not empty
	out    chan Event

	mu    sync.Mutex
	queue []Event // guarded by mu; pending events are queue[head:]
	head  int     // guarded by mu
}

// push queues ev; if the backlog is full it is discarded and replaced by a
// Sync from snapshot (called with Memory.mu held, after ev's change). It never
// blocks.
func (w *watcher) push(ev Event, snapshot func() Event) {
	w.mu.Lock()
	if len(w.queue)-w.head < w.limit {
		w.queue = append(w.queue, ev)
	} else {
		n := 1 // ev itself
		for _, old := range w.queue[w.head:] {
			if old.Type == Sync {
				n += old.Dropped // a Sync stands for the events it replaced
			} else {
				n++
			}
		}
		clear(w.queue)
		s := snapshot()
		s.Dropped = n
		w.queue, w.head = append(w.queue[:0], s), 0
	}
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// pop takes the oldest pending event.
func (w *watcher) pop() (Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.queue) {
		return Event{}, false
	}
	ev := w.queue[w.head]
	w.queue[w.head] = Event{}
	w.queue, w.head = fifo.Compact(w.queue, w.head+1)
	return ev, true
}

var _ Membership = (*Memory)(nil)
