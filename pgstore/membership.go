package pgstore

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of MembershipOptions.
const (
	DefaultSweepEvery = time.Second
	DefaultPollEvery  = time.Second
	DefaultKeepEvents = 10000
)

// notifyChannel is the LISTEN/NOTIFY channel of membership changes; the
// payload is the new revision.
const notifyChannel = "pgstore_membership"

// MembershipOptions configures a Membership. The zero value works: the
// database's clock, membership.DefaultTTL, a sweep and a changelog poll
// every second, membership.DefaultWatchBuffer, DefaultKeepEvents.
type MembershipOptions struct {
	// ManualClock is a test facility: the membership's clock is frozen at
	// the database's time when OpenMembership runs and moves only by
	// Advance. Hosts leave it false.
	ManualClock bool
	// TTL is how long a lease lasts after Join or Renew, by the database's
	// clock; zero means membership.DefaultTTL.
	TTL time.Duration
	// SweepEvery is how often, in real time, the membership looks for
	// leases that expired while no call came in (and prunes the
	// changelog). Every change looks first too. Zero means
	// DefaultSweepEvery.
	SweepEvery time.Duration
	// PollEvery is how often watchers read the changelog when no
	// notification came: a safety net, since NOTIFY is only a wake-up.
	// Zero means DefaultPollEvery.
	PollEvery time.Duration
	// WatchBuffer is a watcher's backlog (see membership.Membership.Watch);
	// zero means membership.DefaultWatchBuffer.
	WatchBuffer int
	// KeepEvents is how many of the latest changelog rows the sweep keeps.
	// A watcher that falls further behind than that (a long disconnection)
	// gets a Sync instead of the changes. Zero means DefaultKeepEvents.
	KeepEvents int
	// Logger receives background failures (a sweep or a changelog read
	// that failed and will be retried). Nil: none are logged.
	Logger *slog.Logger
	// RenewPool, if set, runs Renew only: a pool of its own (see
	// OpenPools), which the watch's reads, the sweeps and the other calls
	// cannot hold up. Nil: Renew runs on the membership's pool.
	RenewPool *pgxpool.Pool
}

// Membership is membership.Membership on Postgres. It is safe for
// concurrent use and from several processes on one database (they share
// the members, the revision and the changelog).
//
// Goroutines: the expiry sweep, from OpenMembership until Close; one pump
// per watcher until its watch ends; and, while at least one watch is
// open, one dispatcher that holds a connection of its own (taken from the
// pool and hijacked) to LISTEN. Close stops them all and waits; the pool
// is the caller's and stays open.
//
// Lock order: Membership.mu → watcher.mu.
type Membership struct {
	pool       *pgxpool.Pool
	renews     *pgxpool.Pool // Renew's (MembershipOptions.RenewPool, or pool)
	clock      *clock
	ttl        time.Duration
	sweepEvery time.Duration
	pollEvery  time.Duration
	watchBuf   int
	keepEvents int
	log        *slog.Logger

	closed atomic.Bool
	ctx    context.Context // cancelled by Close: the background work's
	cancel context.CancelFunc
	bg     sync.WaitGroup

	mu        sync.Mutex
	watchers  map[*watcher]struct{} // guarded by mu
	cursor    uint64                // the last revision handed to watchers; guarded by mu
	stopDisp  context.CancelFunc    // stops the running dispatcher (nil: none runs); guarded by mu
	closeOnce sync.Once
}

var _ membership.Membership = (*Membership)(nil)

// OpenMembership migrates the database (Migrate) and returns a Membership
// on pool, with its sweep running. It panics if a field of opts is
// negative.
func OpenMembership(ctx context.Context, pool *pgxpool.Pool, opts MembershipOptions) (*Membership, error) {
	switch {
	case pool == nil:
		panic("pgstore: OpenMembership: nil pool")
	case opts.TTL < 0, opts.SweepEvery < 0, opts.PollEvery < 0, opts.WatchBuffer < 0, opts.KeepEvents < 0:
		panic("pgstore: OpenMembership: a MembershipOptions field is negative")
	}
	if opts.TTL == 0 {
		opts.TTL = membership.DefaultTTL
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	if opts.PollEvery == 0 {
		opts.PollEvery = DefaultPollEvery
	}
	if opts.WatchBuffer == 0 {
		opts.WatchBuffer = membership.DefaultWatchBuffer
	}
	if opts.KeepEvents == 0 {
		opts.KeepEvents = DefaultKeepEvents
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := Migrate(ctx, pool); err != nil {
		return nil, err
	}
	c, err := newClock(ctx, pool, opts.ManualClock)
	if err != nil {
		return nil, wrapErr(ctx, "pgstore.OpenMembership", err)
	}
	renews := opts.RenewPool
	if renews == nil {
		renews = pool
	}
	m := &Membership{
		pool: pool, renews: renews, clock: c, ttl: opts.TTL, sweepEvery: opts.SweepEvery, pollEvery: opts.PollEvery,
		watchBuf: opts.WatchBuffer, keepEvents: opts.KeepEvents, log: opts.Logger,
		watchers: map[*watcher]struct{}{},
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.bg.Add(1)
	go m.sweeper()
	return m, nil
}

// Advance moves the membership's clock forward by d (a test facility, see
// MembershipOptions.ManualClock). It panics if d is negative.
func (m *Membership) Advance(d time.Duration) { m.clock.advance(d) }

// Close stops the sweep, the dispatcher and every watch (their channels
// close) and waits for their goroutines. Later calls fail with
// membership.ErrClosed. Close is idempotent. Calls in flight finish or
// fail on their own contexts.
func (m *Membership) Close() {
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		m.mu.Lock()
		if m.stopDisp != nil {
			m.stopDisp()
			m.stopDisp = nil
		}
		m.mu.Unlock()
		m.cancel()
	})
	m.bg.Wait()
}

// begin checks the context and the membership for a call.
func (m *Membership) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.closed.Load() {
		return membership.ErrClosed
	}
	return nil
}

func (m *Membership) lease(name string, gen uint64) membership.Lease {
	return membership.Lease{Name: name, Gen: gen, TTL: m.ttl}
}

// memberCols are a member's columns in the order scanMember reads; the
// changelog has the same ones.
const memberCols = `name, address, state, kinds, lease_gen, max_message, version`

func scanMember(r pgx.Row, extra ...any) (membership.Member, error) {
	var (
		mem        membership.Member
		state      int16
		gen, limit int64
	)
	if err := r.Scan(append([]any{&mem.Name, &mem.Address, &state, &mem.Kinds, &gen, &limit, &mem.Version}, extra...)...); err != nil {
		return membership.Member{}, err
	}
	mem.State, mem.LeaseGen, mem.MaxMessage = membership.State(state), uint64(gen), limit
	if len(mem.Kinds) == 0 {
		mem.Kinds = nil
	}
	return mem, nil
}

// memberArgs returns mem's values for memberCols.
func memberArgs(mem membership.Member) []any {
	kinds := mem.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	return []any{mem.Name, mem.Address, int16(mem.State), kinds, int64(mem.LeaseGen), mem.MaxMessage, mem.Version}
}

// change is what a call decided inside its transaction: the event to
// record (Type 0: none) and the call's own answer.
type change struct {
	ev     membership.Event
	result error // the call's typed refusal, if any; the transaction still commits the sweep
}

// inChange runs decide in a transaction that holds the revision lock, after
// expiring the leases that are due. Why a transaction (the only ones in
// the package, with Migrate's): a change must be judged on the state after
// the expiries (an expired name may be joined again, and its Expired must
// come before that Joined), and its event must get the next revision. Both
// need the revision row's lock held from the sweep to the commit, which
// makes changes commit in revision order: the changelog never has a gap
// that fills in later. The lock is taken first and only there, so changes
// cannot deadlock; Renew, which records no event, takes only its member's
// row lock.
//
// decide runs statements on tx with the clock's arguments (one reading for
// the whole transaction) and the revision its event would get. The
// transaction commits the sweep's expiries even when decide refuses the
// call.
func (m *Membership) inChange(ctx context.Context, op string, contact bool,
	decide func(tx pgx.Tx, frozen any, off int64, rev uint64) (change, error)) (membership.Event, error) {
	if err := m.begin(ctx); err != nil {
		return membership.Event{}, err
	}
	frozen, off := m.clock.args()
	var out change
	err := inTx(ctx, m.pool, m.ttl, func(tx pgx.Tx) error {
		var rev int64
		if err := tx.QueryRow(ctx, `SELECT rev FROM pgstore_membership_rev FOR UPDATE`).Scan(&rev); err != nil {
			return err
		}
		if contact {
			if _, err := tx.Exec(ctx, memberSilenceSQL, frozen, off); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE pgstore_membership_rev SET contact_at = `+clockSQL, frozen, off); err != nil {
				return err
			}
		}
		var expired int64
		if err := tx.QueryRow(ctx, sweepSQL, frozen, off, rev).Scan(&expired); err != nil {
			return err
		}
		next := uint64(rev + expired)
		if decide != nil {
			var err error
			if out, err = decide(tx, frozen, off, next+1); err != nil {
				return err
			}
		}
		if out.result == nil && out.ev.Type != 0 {
			next++
			out.ev.Rev = next
			args := append([]any{int64(next), int16(out.ev.Type), int16(out.ev.From)}, memberArgs(out.ev.Member)...)
			if _, err := tx.Exec(ctx, `INSERT INTO pgstore_member_events (rev, type, from_state, `+memberCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, args...); err != nil {
				return err
			}
		}
		if next == uint64(rev) {
			return nil // no change: nothing to record or announce
		}
		// The notification is sent when (and only if) the transaction commits.
		_, err := tx.Exec(ctx, `WITH r AS (UPDATE pgstore_membership_rev SET rev = $1::bigint)
			SELECT pg_notify('`+notifyChannel+`', $1::bigint::text)`, int64(next))
		return err
	})
	if err != nil {
		return membership.Event{}, wrapErr(ctx, op, err)
	}
	return out.ev, out.result
}

// silentSQL is true when the membership is silent for the member row
// row (membership, "Silences"): no Join or Renew of any member for more
// than half of that row's lease by the clock clk.now. Each row is judged
// by its own lease (rowTTLSQL), whichever process judges it: processes
// whose hosts ask for leases of different lengths agree on every row.
func silentSQL(row string) string {
	return `(` + rowTTLSQL(row) + ` > interval '0' AND clk.now - ` + lastContactSQL + ` > ` + rowTTLSQL(row) + ` / 2)`
}

// rowTTLSQL is the length of the member row row's lease: its deadline is
// set to the time of its last Join or Renew (renewed_at) + the TTL of the
// membership that handled it, and the end of a silence keeps that length.
// A row whose length cannot be told (a deadline before its renewed_at,
// which only a row written before renewed_at existed can have) has length
// zero: no silence keeps it, and it expires by its deadline.
func rowTTLSQL(row string) string {
	return `greatest(` + row + `.deadline - ` + row + `.renewed_at, interval '0')`
}

// lastContactSQL is when the membership last heard from a host: the
// latest renewal of any member, or the latest Join (which may have
// failed: a host reached the store all the same).
const lastContactSQL = `greatest((SELECT max(renewed_at) FROM pgstore_members), (SELECT contact_at FROM pgstore_membership_rev))`

// memberSilenceSQL ends a silence: every run that was live when it began,
// and whose half lease it exceeded, gets its full lease (rowTTLSQL) from
// now. Runs in a Join's
// and a Renew's transaction, before anything else; rows are locked in name
// order (two calls that both end the silence cannot deadlock), and a row
// another call extended meanwhile is re-read and left alone.
var memberSilenceSQL = `
WITH clk AS MATERIALIZED (SELECT ` + clockSQL + ` AS now),
last AS MATERIALIZED (SELECT ` + lastContactSQL + ` AS at),
due AS MATERIALIZED (
	SELECT m.name FROM pgstore_members m, clk, last
	WHERE m.live AND m.deadline > last.at AND ` + rowTTLSQL("m") + ` > interval '0' AND clk.now - last.at > ` + rowTTLSQL("m") + ` / 2
		AND m.deadline < clk.now + ` + rowTTLSQL("m") + `
	ORDER BY m.name COLLATE "C" FOR UPDATE OF m)
UPDATE pgstore_members m SET deadline = clk.now + ` + rowTTLSQL("m") + `, renewed_at = clk.now
FROM due, clk WHERE m.name = due.name`

// sweepSQL expires the live runs whose lease ran out by the clock ($1, $2)
// and records an Expired event for each, by deadline then name, from
// revision $3+1; it returns how many. A silent membership expires nobody
// (silentSQL, row by row). It runs inside inChange's transaction. locked takes each
// due row's lock (FOR UPDATE re-reads a row a concurrent Renew changed and
// drops it if it is no longer due), so a renewal that committed first is
// never undone.
var sweepSQL = `
WITH clk AS MATERIALIZED (SELECT ` + clockSQL + ` AS now),
locked AS MATERIALIZED (
	SELECT m.name, m.address, m.state, m.kinds, m.lease_gen, m.max_message, m.version, m.deadline
	FROM pgstore_members m, clk WHERE m.live AND m.deadline <= clk.now AND NOT ` + silentSQL("m") + ` FOR UPDATE OF m),
due AS MATERIALIZED (
	SELECT locked.*, row_number() OVER (ORDER BY deadline, name COLLATE "C") AS n FROM locked),
upd AS (
	UPDATE pgstore_members m SET live = false FROM due WHERE m.name = due.name),
ev AS (
	INSERT INTO pgstore_member_events (rev, type, from_state, ` + memberCols + `)
	SELECT $3::bigint + n, 5, 0, ` + memberCols + ` FROM due)
SELECT count(*) FROM due`

// readRun reads name's row for a decision inside inChange (locking it
// against a concurrent Renew). ok is false when the name never joined. A
// run whose lease ran out during a silence is live (membership,
// "Silences").
func readRun(ctx context.Context, tx pgx.Tx, frozen any, off int64, name string) (run, bool, error) {
	var r run
	mem, err := scanMember(tx.QueryRow(ctx, `WITH clk AS MATERIALIZED (SELECT `+clockSQL+` AS now)
		SELECT `+memberCols+`, live AND (deadline > clk.now OR `+silentSQL("pgstore_members")+`), departed
		FROM pgstore_members, clk WHERE name = $3 FOR UPDATE OF pgstore_members`, frozen, off, name), &r.live, &r.departed)
	if err == pgx.ErrNoRows {
		return run{}, false, nil
	}
	r.m = mem
	return r, err == nil, err
}

// run is what the store knows of a name: its latest run.
type run struct {
	m        membership.Member
	live     bool // not left, not expired by the clock
	departed bool // left (rather than expired)
}

// Join implements membership.Membership. A generation above math.MaxInt64
// is ErrGenerationRange. One transaction (inChange).
func (m *Membership) Join(ctx context.Context, mem membership.Member) (membership.Lease, error) {
	const op = "pgstore.Membership.Join"
	if mem.State == 0 {
		mem.State = membership.Serving
	}
	if mem.Name == "" || mem.LeaseGen == 0 || mem.State != membership.Serving {
		return membership.Lease{}, membership.ErrInvalidMember
	}
	if mem.LeaseGen > math.MaxInt64 {
		return membership.Lease{}, ErrGenerationRange
	}
	if mem.Kinds != nil {
		mem.Kinds = slices.Clone(mem.Kinds)
	}
	_, err := m.inChange(ctx, op, true, func(tx pgx.Tx, frozen any, off int64, rev uint64) (change, error) {
		r, ok, err := readRun(ctx, tx, frozen, off, mem.Name)
		if err != nil {
			return change{}, err
		}
		args := append([]any{frozen, off, m.ttl.Microseconds()}, memberArgs(mem)...)
		switch {
		case ok && r.live && r.m.LeaseGen == mem.LeaseGen:
			if r.m.Address != mem.Address || r.m.MaxMessage != mem.MaxMessage || r.m.Version != mem.Version || !slices.Equal(r.m.Kinds, mem.Kinds) {
				return change{result: membership.ErrNameTaken}, nil
			}
			// A retried Join: renew, no event.
			_, err := tx.Exec(ctx, `UPDATE pgstore_members SET deadline = greatest(deadline, `+clockSQL+` + $3::bigint * interval '1 microsecond'),
				renewed_at = `+clockSQL+` WHERE name = $4`, args[:4]...)
			return change{}, err
		case ok && mem.LeaseGen <= r.m.LeaseGen:
			return change{result: &membership.GenerationError{Op: "Join", Name: mem.Name, Gen: mem.LeaseGen, Current: r.m.LeaseGen}}, nil
		case ok && r.live:
			return change{result: membership.ErrNameTaken}, nil
		}
		// A new name, or a higher generation of one whose last run is out.
		_, err = tx.Exec(ctx, `INSERT INTO pgstore_members (`+memberCols+`, deadline, live, departed, renewed_at)
			VALUES ($4, $5, $6, $7, $8, $9, $10, `+clockSQL+` + $3::bigint * interval '1 microsecond', true, false, `+clockSQL+`)
			ON CONFLICT (name) DO UPDATE SET address = excluded.address, state = excluded.state, kinds = excluded.kinds,
				lease_gen = excluded.lease_gen, max_message = excluded.max_message, version = excluded.version, deadline = excluded.deadline,
				live = true, departed = false, renewed_at = excluded.renewed_at`, args...)
		return change{ev: membership.Event{Type: membership.Joined, Member: mem}}, err
	})
	if err != nil {
		return membership.Lease{}, err
	}
	return m.lease(mem.Name, mem.LeaseGen), nil
}

// renewSQL is Renew's statement ($3 name, $4 generation, $5 TTL in
// microseconds), after the end of a silence in the same transaction. cur locks the member's row (the latest version, as in the
// Location Store's statements), upd extends the lease only if the run is
// the named generation, has not left and has not expired by the clock, and
// the statement returns what the decision was made on, so the caller
// tells the refusals apart without a second read. It takes no revision
// lock: a renewal is not a change watchers see.
const renewSQL = `
WITH clk AS MATERIALIZED (SELECT ` + clockSQL + ` AS now),
cur AS MATERIALIZED (
	SELECT lease_gen, live, departed, deadline FROM pgstore_members WHERE name = $3 FOR UPDATE),
upd AS (
	UPDATE pgstore_members m SET deadline = greatest(m.deadline, clk.now + $5::bigint * interval '1 microsecond'), renewed_at = clk.now
	FROM cur, clk
	WHERE m.name = $3 AND cur.lease_gen = $4 AND cur.live AND cur.deadline > clk.now
	RETURNING 1)
SELECT cur.lease_gen, cur.live AND cur.deadline > clk.now, cur.departed, EXISTS (SELECT 1 FROM upd) FROM cur, clk`

// Renew implements membership.Membership. One batch, run by the server
// as one transaction: the end of a silence (memberSilenceSQL), the run's
// row locked, then renewSQL.
func (m *Membership) Renew(ctx context.Context, name string, gen uint64) (membership.Lease, error) {
	const op = "pgstore.Membership.Renew"
	if err := m.begin(ctx); err != nil {
		return membership.Lease{}, err
	}
	frozen, off := m.clock.args()
	var (
		cur                   int64
		live, departed, moved bool
	)
	found := true
	// One batch, one implicit transaction that the server runs whole
	// (batch.go).
	var b pgx.Batch
	b.Queue(memberSilenceSQL, frozen, off)
	// The run's row is locked by a statement of its own: renewSQL's time
	// (clockSQL) is taken once the lock is held, so a renewal that waited
	// for it (behind a sweep, or another member's end of a silence) is
	// judged and dated after the wait.
	b.Queue(`SELECT 1 FROM pgstore_members WHERE name = $1 FOR UPDATE`, name)
	b.Queue(renewSQL, frozen, off, name, i64(gen), m.ttl.Microseconds())
	err := sendBatch(ctx, m.renews, &b, func(br pgx.BatchResults) error {
		for range 2 { // the silence; the lock
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		err := br.QueryRow().Scan(&cur, &live, &departed, &moved)
		if err == pgx.ErrNoRows {
			found = false
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		return membership.Lease{}, wrapErr(ctx, op, err)
	case !found:
		return membership.Lease{}, membership.ErrNotMember
	case uint64(cur) != gen:
		return membership.Lease{}, &membership.GenerationError{Op: "Renew", Name: name, Gen: gen, Current: uint64(cur)}
	case departed:
		return membership.Lease{}, membership.ErrNotMember
	case !live || !moved:
		return membership.Lease{}, membership.ErrLeaseExpired
	}
	return m.lease(name, gen), nil
}

// checkRun applies Renew's and SetState's refusals to name's run.
func checkRun(op, name string, gen uint64, r run, ok bool) error {
	switch {
	case !ok:
		return membership.ErrNotMember
	case r.m.LeaseGen != gen:
		return &membership.GenerationError{Op: op, Name: name, Gen: gen, Current: r.m.LeaseGen}
	case r.departed:
		return membership.ErrNotMember
	case !r.live:
		return membership.ErrLeaseExpired
	}
	return nil
}

// SetState implements membership.Membership. One transaction (inChange).
func (m *Membership) SetState(ctx context.Context, name string, gen uint64, to membership.State) (membership.Member, error) {
	const op = "pgstore.Membership.SetState"
	var now membership.Member
	_, err := m.inChange(ctx, op, false, func(tx pgx.Tx, frozen any, off int64, rev uint64) (change, error) {
		r, ok, err := readRun(ctx, tx, frozen, off, name)
		if err != nil {
			return change{}, err
		}
		if err := checkRun("SetState", name, gen, r, ok); err != nil {
			return change{result: err}, nil
		}
		from := r.m.State
		now = r.m
		if to == from {
			return change{}, nil
		}
		if !from.CanBecome(to) {
			return change{result: membership.ErrIllegalTransition}, nil
		}
		if _, err := tx.Exec(ctx, `UPDATE pgstore_members SET state = $2 WHERE name = $1`, name, int16(to)); err != nil {
			return change{}, err
		}
		now.State = to
		return change{ev: membership.Event{Type: membership.StateChanged, Member: now, From: from}}, nil
	})
	if err != nil {
		return membership.Member{}, err
	}
	return now, nil
}

// Leave implements membership.Membership. One transaction (inChange).
func (m *Membership) Leave(ctx context.Context, name string, gen uint64) error {
	const op = "pgstore.Membership.Leave"
	_, err := m.inChange(ctx, op, false, func(tx pgx.Tx, frozen any, off int64, rev uint64) (change, error) {
		r, ok, err := readRun(ctx, tx, frozen, off, name)
		switch {
		case err != nil:
			return change{}, err
		case !ok:
			return change{result: membership.ErrNotMember}, nil
		case r.m.LeaseGen != gen:
			return change{result: &membership.GenerationError{Op: "Leave", Name: name, Gen: gen, Current: r.m.LeaseGen}}, nil
		case !r.live:
			return change{}, nil // already left or expired
		}
		if _, err := tx.Exec(ctx, `UPDATE pgstore_members SET live = false, departed = true WHERE name = $1`, name); err != nil {
			return change{}, err
		}
		return change{ev: membership.Event{Type: membership.Left, Member: r.m}}, nil
	})
	return err
}

// sweepIfDue expires the leases that ran out, if any did: a cheap read
// first (the partial index on deadline), the revision lock only then.
func (m *Membership) sweepIfDue(ctx context.Context, op string) error {
	frozen, off := m.clock.args()
	var due bool
	if err := m.pool.QueryRow(ctx, `WITH clk AS MATERIALIZED (SELECT `+clockSQL+` AS now)
		SELECT EXISTS (SELECT 1 FROM pgstore_members m WHERE m.live AND m.deadline <= clk.now AND NOT `+silentSQL("m")+`) FROM clk`,
		frozen, off).Scan(&due); err != nil {
		return wrapErr(ctx, op, err)
	}
	if !due {
		return nil
	}
	_, err := m.inChange(ctx, op, false, nil)
	return err
}

// Members implements membership.Membership: expiries first (sweepIfDue),
// then the live members that are not Gone, by name (byte order).
func (m *Membership) Members(ctx context.Context) ([]membership.Member, error) {
	const op = "pgstore.Membership.Members"
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	if err := m.sweepIfDue(ctx, op); err != nil {
		return nil, err
	}
	frozen, off := m.clock.args()
	rows, err := m.pool.Query(ctx, `WITH clk AS MATERIALIZED (SELECT `+clockSQL+` AS now)
		SELECT `+memberCols+` FROM pgstore_members, clk
		WHERE live AND state <> 3 AND (deadline > clk.now OR `+silentSQL("pgstore_members")+`) ORDER BY name COLLATE "C"`, frozen, off)
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (membership.Member, error) { return scanMember(r) })
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	if list == nil {
		list = []membership.Member{}
	}
	return list, nil
}

// sweeper expires leases while no call comes in, and prunes the
// changelog, every sweepEvery until Close.
func (m *Membership) sweeper() {
	defer m.bg.Done()
	t := time.NewTicker(m.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if err := m.sweepIfDue(m.ctx, "pgstore.Membership.sweep"); err != nil && m.ctx.Err() == nil {
			m.log.Warn("pgstore: membership sweep failed; retrying at the next tick", "err", err)
		}
		if _, err := m.pool.Exec(m.ctx, `DELETE FROM pgstore_member_events
			WHERE rev <= (SELECT rev FROM pgstore_membership_rev) - $1::bigint`, int64(m.keepEvents)); err != nil && m.ctx.Err() == nil {
			m.log.Warn("pgstore: changelog prune failed; retrying at the next tick", "err", err)
		}
	}
}
