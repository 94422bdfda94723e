package pgstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/berthrt/berth/internal/fifo"
	"github.com/berthrt/berth/membership"
	"github.com/jackc/pgx/v5"
)

// Watch implements membership.Membership. The first event is a Sync read
// in one statement (the list and the revision it reflects); later events
// come from the changelog, read by the dispatcher in revision order when a
// NOTIFY wakes it, every PollEvery, and after every reconnection of its
// LISTEN connection (notifications sent while it was away are lost; the
// changelog is not). A watcher whose backlog overflows, or whose missing
// changes the changelog no longer holds (pruned, or a database whose
// revision went back), gets a Sync with Dropped set to the number of
// changes it missed.
func (m *Membership) Watch(ctx context.Context) (<-chan membership.Event, error) {
	const op = "pgstore.Membership.Watch"
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	if err := m.sweepIfDue(ctx, op); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return nil, membership.ErrClosed
	}
	// The Sync is read under mu, so that the dispatcher hands out nothing
	// meanwhile: every batch it handed out before was read before this
	// Sync, so the watcher needs exactly the changes after the Sync's
	// revision, and the dispatcher's next batches hold them.
	sync, err := m.readSync(ctx)
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	w := &watcher{limit: m.watchBuf, notify: make(chan struct{}, 1), out: make(chan membership.Event),
		from: sync.Rev, lastSent: sync.Rev}
	w.queue = append(w.queue, sync)
	m.watchers[w] = struct{}{}
	if m.stopDisp == nil {
		m.cursor = sync.Rev
		dctx, stop := context.WithCancel(m.ctx)
		m.stopDisp = stop
		m.bg.Add(1)
		go m.dispatch(dctx)
	}
	m.bg.Add(1)
	go m.pump(ctx, w)
	return w.out, nil
}

// readSync reads the listed members and the revision they reflect in one
// statement (one snapshot).
func (m *Membership) readSync(ctx context.Context) (membership.Event, error) {
	rows, err := m.pool.Query(ctx, `SELECT r.rev, `+memberCols+` FROM pgstore_membership_rev r
		LEFT JOIN (SELECT `+memberCols+` FROM pgstore_members WHERE live AND state <> 3) m ON true
		ORDER BY name COLLATE "C"`)
	if err != nil {
		return membership.Event{}, err
	}
	defer rows.Close()
	ev := membership.Event{Type: membership.Sync, Members: []membership.Member{}}
	for rows.Next() {
		var (
			rev        int64
			name, addr *string
			state      *int16
			kinds      []string
			gen, limit *int64
			version    *string
		)
		if err := rows.Scan(&rev, &name, &addr, &state, &kinds, &gen, &limit, &version); err != nil {
			return membership.Event{}, err
		}
		ev.Rev = uint64(rev)
		if name == nil {
			continue // no member: the LEFT JOIN's one row
		}
		mem := membership.Member{Name: *name, Address: *addr, State: membership.State(*state), Kinds: kinds,
			LeaseGen: uint64(*gen), MaxMessage: *limit, Version: *version}
		if len(mem.Kinds) == 0 {
			mem.Kinds = nil
		}
		ev.Members = append(ev.Members, mem)
	}
	return ev, rows.Err()
}

// pump hands w's backlog to its channel until ctx is done or the
// membership closes; then it removes w, and stops the dispatcher if w was
// the last watcher.
func (m *Membership) pump(ctx context.Context, w *watcher) {
	defer m.bg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.watchers, w)
		if len(m.watchers) == 0 && m.stopDisp != nil {
			m.stopDisp()
			m.stopDisp = nil
		}
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
			case <-m.ctx.Done():
				return
			}
		}
		select {
		case w.out <- ev:
		case <-ctx.Done():
			return
		case <-m.ctx.Done():
			return
		}
	}
}

// dispatch runs while watches are open: it keeps a LISTEN connection and
// hands the changelog to the watchers, until ctx is done (the last watch
// ended, or Close).
func (m *Membership) dispatch(ctx context.Context) {
	defer m.bg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(closeCtx)
			cancel()
		}
	}()
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		if conn == nil {
			c, err := m.listen(ctx)
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("pgstore: membership LISTEN connection failed; retrying", "err", err, "in", backoff)
				}
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			conn, backoff = c, 10*time.Millisecond
		}
		// Read what changed: after a (re)connection this is the resync
		// (the notifications sent meanwhile are lost), afterwards what a
		// notification announced or what a poll finds.
		if err := m.catchUp(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("pgstore: membership changelog read failed; retrying", "err", err)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, m.pollEvery)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && (conn.IsClosed() || !errors.Is(err, context.DeadlineExceeded)) {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(closeCtx)
			cancel()
			conn = nil // reconnect, then resync from the changelog
		}
	}
}

// listen takes a connection of its own for LISTEN (hijacked from the pool,
// so that it does not hold a pool slot).
func (m *Membership) listen(ctx context.Context) (*pgx.Conn, error) {
	pc, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// sleep waits d or until ctx is done; it reports whether ctx is live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// catchBatch is how many changelog rows one read takes.
const catchBatch = 500

// catchUp reads the changelog after the cursor and hands it to the
// watchers, batch by batch, until it has read everything. When the
// changelog cannot show every change since the cursor (pruned, or the
// revision is below it), every watcher gets a Sync instead.
func (m *Membership) catchUp(ctx context.Context) error {
	for {
		m.mu.Lock()
		cursor := m.cursor
		m.mu.Unlock()
		var head int64
		if err := m.pool.QueryRow(ctx, `SELECT rev FROM pgstore_membership_rev`).Scan(&head); err != nil {
			return err
		}
		if uint64(head) == cursor {
			return nil
		}
		var evs []membership.Event
		if uint64(head) > cursor {
			rows, err := m.pool.Query(ctx, `SELECT rev, type, from_state, `+memberCols+` FROM pgstore_member_events
				WHERE rev > $1 ORDER BY rev LIMIT `+strconv.Itoa(catchBatch), int64(cursor))
			if err != nil {
				return err
			}
			evs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (membership.Event, error) {
				var (
					ev        membership.Event
					rev       int64
					typ, from int16
				)
				mem, err := scanMember(rowPrefix{r, []any{&rev, &typ, &from}})
				ev.Type, ev.Rev, ev.From, ev.Member = membership.EventType(typ), uint64(rev), membership.State(from), mem
				return ev, err
			})
			if err != nil {
				return err
			}
		}
		m.mu.Lock()
		if ctx.Err() != nil || m.cursor != cursor {
			m.mu.Unlock()
			return nil // stopped, or (cannot happen: one dispatcher) moved
		}
		if len(evs) == 0 || evs[0].Rev != cursor+1 {
			// A gap: the changes after the cursor are not all there.
			err := m.resyncLocked(ctx, nil)
			m.mu.Unlock()
			if err != nil {
				return err
			}
			continue
		}
		for i, ev := range evs {
			if i > 0 && ev.Rev != evs[i-1].Rev+1 {
				break // cannot happen (revisions are dense); the next read finds the gap
			}
			for w := range m.watchers {
				w.push(ev)
			}
			m.cursor = ev.Rev
		}
		var over []*watcher
		for w := range m.watchers {
			if w.overflowed() {
				over = append(over, w)
			}
		}
		var err error
		if len(over) > 0 {
			err = m.resyncLocked(ctx, over)
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
		if len(evs) < catchBatch && m.cursorIs(uint64(head)) {
			return nil
		}
	}
}

func (m *Membership) cursorIs(rev uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cursor >= rev
}

// resyncLocked gives the watchers ws (nil: all) a Sync of the list as it is
// now in place of their backlog, and moves the cursor to its revision if
// it is behind (ws nil). Called with mu held: the Sync is read after every
// batch handed out, so the changes after its revision are exactly the
// ones the watchers still need.
func (m *Membership) resyncLocked(ctx context.Context, ws []*watcher) error {
	sync, err := m.readSync(ctx)
	if err != nil {
		return err
	}
	if ws == nil {
		for w := range m.watchers {
			ws = append(ws, w)
		}
		m.cursor = sync.Rev
	}
	for _, w := range ws {
		w.resync(sync)
	}
	return nil
}

// rowPrefix scans leading columns into prefix, then the rest.
type rowPrefix struct {
	row    pgx.Row
	prefix []any
}

func (r rowPrefix) Scan(dest ...any) error { return r.row.Scan(append(r.prefix, dest...)...) }

// watcher is one Watch: a bounded backlog the dispatcher appends to without
// waiting, and a pump goroutine that moves it to the channel.
type watcher struct {
	limit  int
	notify chan struct{} // one slot: the backlog is not empty
	out    chan membership.Event

	mu       sync.Mutex
	queue    []membership.Event // guarded by mu; pending events are queue[head:]
	head     int                // guarded by mu
	from     uint64             // guarded by mu: the revision of the last Sync queued; older events are in it
	lastSent uint64             // guarded by mu: the revision of the last event the pump took
	over     bool               // guarded by mu: the backlog overflowed; waiting for a Sync
}

// push queues ev unless the watcher's Sync covers it; if the backlog is
// full it is discarded and the watcher waits for a Sync (overflowed). It
// never blocks.
func (w *watcher) push(ev membership.Event) {
	w.mu.Lock()
	switch {
	case ev.Rev <= w.from || w.over:
	case len(w.queue)-w.head < w.limit:
		w.queue = append(w.queue, ev)
	default:
		clear(w.queue)
		w.queue, w.head, w.over = w.queue[:0], 0, true
	}
	w.mu.Unlock()
	w.wake()
}

func (w *watcher) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *watcher) overflowed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// resync replaces the backlog with s, which stands for every change after
// the last one the pump took.
func (w *watcher) resync(s membership.Event) {
	w.mu.Lock()
	if s.Rev < w.lastSent {
		// Cannot happen with one database: a Sync older than what the
		// watcher has seen would make its revisions go back.
		s.Rev = w.lastSent
	}
	s.Dropped = int(s.Rev - w.lastSent)
	clear(w.queue)
	w.queue, w.head = append(w.queue[:0], s), 0
	w.from, w.over = s.Rev, false
	w.mu.Unlock()
	w.wake()
}

// pop takes the oldest pending event.
func (w *watcher) pop() (membership.Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.queue) {
		return membership.Event{}, false
	}
	ev := w.queue[w.head]
	w.queue[w.head] = membership.Event{}
	w.queue, w.head = fifo.Compact(w.queue, w.head+1)
	w.lastSent = ev.Rev
	return ev, true
}
