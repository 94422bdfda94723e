package pgstore

import (
	"context"
	"math"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configures a Store. The zero Options works: the database's clock.
type Options struct {
	// ManualClock is a test facility: the store's clock is frozen at the
	// database's time when Open runs and moves only by Advance, so that
	// deadlines are exact and tests step time instead of sleeping. Hosts
	// leave it false. Two stores on one database with manual clocks keep
	// two clocks: use one Store per database in such tests.
	ManualClock bool
	// LeasePool, if set, runs the lease calls (RenewLease, Lease) on a
	// pool of their own, so that a host's renewals never wait behind its
	// other store work for a connection: a host whose renewals stall past
	// its lease pauses its objects (jeopardy), and a burst of activations
	// after a crash keeps every connection of a small pool busy. Nil: the
	// lease calls share the Store's pool.
	LeasePool *pgxpool.Pool
	// RenewPool, if set, runs RenewLease only: a pool of its own (see
	// OpenPools), which no lease check or other call can hold up. Nil:
	// RenewLease runs on LeasePool (or the Store's pool).
	RenewPool *pgxpool.Pool
}

// Store is the Location Store (relocation.Store) on Postgres. Its methods
// are safe for concurrent use and from several processes on one database.
// It runs no goroutine; the pool is the caller's, and stays open when the
// Store is dropped.
type Store struct {
	pool   *pgxpool.Pool
	leases *pgxpool.Pool // the lease calls' pool (Options.LeasePool, or pool)
	renews *pgxpool.Pool // RenewLease's pool (Options.RenewPool, or leases)
	clock  *clock
}

var _ relocation.Store = (*Store)(nil)

// Open migrates the database (Migrate) and returns a Store on pool.
func Open(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		panic("pgstore: Open: nil pool")
	}
	if err := Migrate(ctx, pool); err != nil {
		return nil, err
	}
	c, err := newClock(ctx, pool, opts.ManualClock)
	if err != nil {
		return nil, wrapErr(ctx, "pgstore.Open", err)
	}
	leases := opts.LeasePool
	if leases == nil {
		leases = pool
	}
	renews := opts.RenewPool
	if renews == nil {
		renews = leases
	}
	return &Store{pool: pool, leases: leases, renews: renews, clock: c}, nil
}

// Advance moves the store's clock forward by d: every later statement
// judges leases d later. A test facility (see Options.ManualClock); it also
// works on the running clock, as an offset added to the database's time.
// It panics if d is negative.
func (s *Store) Advance(d time.Duration) { s.clock.advance(d) }

// rowCols are the columns of pgstore_locations in the order scanRow reads.
const rowCols = `kind, id, state, host, lease_gen, object_gen, owner_gen, version, ord`

// scanRow reads rowCols into a Row.
func scanRow(r pgx.Row, extra ...any) (relocation.Row, error) {
	var (
		row                                relocation.Row
		state                              int16
		leaseGen, objectGen, ownerGen, ver int64
	)
	dest := append([]any{&row.Object.Kind, &row.Object.ID, &state, &row.Host, &leaseGen, &objectGen, &ownerGen, &ver, &row.Order}, extra...)
	if err := r.Scan(dest...); err != nil {
		return relocation.Row{}, err
	}
	row.State = relocation.RowState(state)
	row.LeaseGen, row.ObjectGen, row.OwnerGen, row.Version = uint64(leaseGen), uint64(objectGen), uint64(ownerGen), uint64(ver)
	if len(row.Order) == 0 {
		row.Order = nil
	}
	return row, nil
}

// Get implements relocation.Store.
func (s *Store) Get(ctx context.Context, obj relocation.Object) (relocation.Row, error) {
	const op = "pgstore.Store.Get"
	if err := ctx.Err(); err != nil {
		return relocation.Row{}, err
	}
	row, err := scanRow(s.pool.QueryRow(ctx, `SELECT `+rowCols+` FROM pgstore_locations WHERE kind = $1 AND id = $2`, obj.Kind, obj.ID))
	if err == pgx.ErrNoRows {
		return relocation.Row{}, relocation.ErrNoRow
	}
	if err != nil {
		return relocation.Row{}, wrapErr(ctx, op, err)
	}
	return row, nil
}

// reserveSQL is Reserve's one statement ($3 kind, $4 id, $5 host). Why it
// is atomic:
//   - cur locks the object's row (FOR UPDATE). In READ COMMITTED a row that
//     a concurrent writer changed is re-read after that writer commits, so
//     cur is the row's latest version and nobody changes it until this
//     statement's transaction ends. The decision below is made on it.
//   - me is the reserving host's live lease, read from the statement's
//     snapshot, unlocked: for it the statement happens at that instant.
//   - ownl locks the lease of the row's owner (host and lease generation)
//     FOR SHARE: a renewal of that lease (which locks it FOR UPDATE) is
//     ordered with this takeover. One that committed first is re-read
//     here (READ COMMITTED re-checks a row it waited for), so its lease
//     is live and nothing is taken; one that comes after waits for this
//     statement's commit and then sees the row taken (Lease.Lapsed).
//   - owner says whether that owner still holds its rows: its lease is
//     live, or it ran out during a silence of the store (no renewal of
//     any host for more than half of it) that no renewal has ended yet.
//   - ins creates the row when cur found none. If another Reserve creates
//     it first (a row this statement's snapshot cannot see), ON CONFLICT DO
//     NOTHING makes ins write nothing, and the statement says 'n': nothing
//     written, nothing known. Reserve runs it again, with a new snapshot
//     that sees the row; nothing was written, so the rerun cannot change
//     an outcome.
//   - upd takes the row over when it is Preserved or its owner's lease is
//     not live (expired, or replaced by a restart's newer generation).
//     Both writes join me: without a live lease nothing is written.
//
// The statement returns exactly one row: 'w' and the written row, 'c' and
// the row as it is (no write), or 'n'; each with the host's live lease
// generation (NULL: none).
const reserveSQL = `
WITH clk AS MATERIALIZED (SELECT ` + clockSQL + ` AS now),
me AS MATERIALIZED (
	SELECT l.gen FROM pgstore_leases l, clk WHERE l.host = $5 AND l.deadline > clk.now),
cur AS MATERIALIZED (
	SELECT ` + rowCols + ` FROM pgstore_locations WHERE kind = $3 AND id = $4 FOR UPDATE),
ownl AS MATERIALIZED (
	SELECT l.deadline, l.ttl_us FROM cur, pgstore_leases l
	WHERE l.host = cur.host AND l.gen = cur.lease_gen FOR SHARE OF l),
owner AS MATERIALIZED (
	SELECT EXISTS (SELECT 1 FROM ownl, clk WHERE ownl.deadline > clk.now
		OR clk.now - (SELECT max(renewed_at) FROM pgstore_leases) > ownl.ttl_us * interval '1 microsecond' / 2) AS live),
ins AS (
	INSERT INTO pgstore_locations (kind, id, state, host, lease_gen, object_gen, owner_gen, version)
	SELECT $3, $4, 1, $5, me.gen, 1, 1, 1 FROM me WHERE NOT EXISTS (SELECT 1 FROM cur)
	ON CONFLICT (kind, id) DO NOTHING
	RETURNING ` + rowCols + `),
upd AS (
	UPDATE pgstore_locations r
	SET state = 1, host = $5, lease_gen = me.gen, owner_gen = r.owner_gen + 1, version = r.version + 1
	FROM cur, me, owner
	WHERE r.kind = cur.kind AND r.id = cur.id AND (cur.state = 3 OR NOT owner.live)
	RETURNING r.kind, r.id, r.state, r.host, r.lease_gen, r.object_gen, r.owner_gen, r.version, r.ord)
SELECT 'w', ins.*, (SELECT gen FROM me) FROM ins
UNION ALL
SELECT 'w', upd.*, (SELECT gen FROM me) FROM upd
UNION ALL
SELECT 'c', cur.*, (SELECT gen FROM me) FROM cur WHERE NOT EXISTS (SELECT 1 FROM upd)
UNION ALL
SELECT 'n', '', '', 0::smallint, '', 0, 0, 0, 0, NULL::bytea, (SELECT gen FROM me)
WHERE NOT EXISTS (SELECT 1 FROM cur) AND NOT EXISTS (SELECT 1 FROM ins)`

// maxRetries bounds Reserve's reruns after a concurrent creation of the row.
const maxRetries = 10

// Reserve implements relocation.Store: the reserving host's lease must be
// live (checked first); the owner (same host and lease generation) gets
// its row back unchanged. One statement (reserveSQL).
func (s *Store) Reserve(ctx context.Context, obj relocation.Object, host string) (relocation.Row, error) {
	const op = "pgstore.Store.Reserve"
	for range maxRetries {
		if err := ctx.Err(); err != nil {
			return relocation.Row{}, err
		}
		frozen, off := s.clock.args()
		var (
			tag   string
			myGen *int64
		)
		row, err := scanRow(taggedRow{s.pool.QueryRow(ctx, reserveSQL, frozen, off, obj.Kind, obj.ID, host), &tag}, &myGen)
		switch {
		case err != nil:
			return relocation.Row{}, wrapErr(ctx, op, err)
		case myGen == nil:
			return relocation.Row{}, relocation.ErrLeaseExpired // nothing written: both writes need the lease
		case tag == "w":
			return row, nil
		case tag == "n":
			continue // a concurrent Reserve created the row: run again
		case row.Host == host && row.LeaseGen == uint64(*myGen):
			return row, nil // already ours (a Preserved row has no host)
		}
		return relocation.Row{}, &relocation.ConflictError{Current: row}
	}
	return relocation.Row{}, payload.NewError(payload.Unavailable, op, "the row kept being created and deleted; try again")
}

// taggedRow scans a leading text column into tag, then the rest.
type taggedRow struct {
	row pgx.Row
	tag *string
}

func (r taggedRow) Scan(dest ...any) error { return r.row.Scan(append([]any{r.tag}, dest...)...) }

// casSQL builds a conditional write's one statement. $3 kind, $4 id, $5-$9
// the expected host, lease generation, object generation, owner generation
// and version; write is the UPDATE or DELETE of the row named by ok, with
// RETURNING rowCols; stateCond limits the row states the write accepts;
// lease says whether the lease the write needs is live (a boolean
// expression on clk).
//
// Why it is atomic: cur locks the row (FOR UPDATE: in READ COMMITTED, the
// latest version of a row a concurrent writer changed, held until the
// statement ends), ok is cur when it has exactly the expected ownership, an
// accepted state and a live lease, and the write changes only that row.
// The decision is made once, on the locked row, and the statement returns
// what it was made on: 'w' and the written row, or 'c' and the row as it
// is with whether the lease is live, for the caller to tell a conflict
// from an expired lease. No follow-up read is needed.
func casSQL(stateCond, lease, write string) string {
	return `
WITH clk AS MATERIALIZED (SELECT ` + clockSQL + ` AS now),
cur AS MATERIALIZED (
	SELECT ` + rowCols + ` FROM pgstore_locations WHERE kind = $3 AND id = $4 FOR UPDATE),
live AS MATERIALIZED (
	SELECT (` + lease + `) AS ok FROM clk),
ok AS MATERIALIZED (
	SELECT cur.kind, cur.id FROM cur, live
	WHERE cur.host = $5 AND cur.lease_gen = $6 AND cur.object_gen = $7 AND cur.owner_gen = $8 AND cur.version = $9
	AND (` + stateCond + `) AND live.ok),
w AS (` + write + `)
SELECT 'w', w.*, true FROM w
UNION ALL
SELECT 'c', cur.*, (SELECT ok FROM live) FROM cur WHERE NOT EXISTS (SELECT 1 FROM w)`
}

// ownerLease is the lease Commit, Preserve and Delete need: the expected
// owner's own (host and generation). A Preserved row has no owner (host
// ”), so its writes need no lease.
const ownerLease = `$5::text = '' OR EXISTS (SELECT 1 FROM pgstore_leases l
	WHERE l.host = $5 AND l.gen = $6 AND l.deadline > clk.now)`

var (
	commitSQL = casSQL(`cur.state IN (1, 2)`, ownerLease, `
	UPDATE pgstore_locations r SET state = 2, version = r.version + 1
	FROM ok WHERE r.kind = ok.kind AND r.id = ok.id
	RETURNING r.kind, r.id, r.state, r.host, r.lease_gen, r.object_gen, r.owner_gen, r.version, r.ord`)

	// newOwnerSQL: $10 is the new host, whose lease must be live.
	newOwnerSQL = casSQL(`true`, `EXISTS (SELECT 1 FROM pgstore_leases l WHERE l.host = $10 AND l.deadline > clk.now)`, `
	UPDATE pgstore_locations r
	SET state = 2, host = $10, lease_gen = (SELECT l.gen FROM pgstore_leases l WHERE l.host = $10),
		owner_gen = r.owner_gen + 1, version = r.version + 1
	FROM ok WHERE r.kind = ok.kind AND r.id = ok.id
	RETURNING r.kind, r.id, r.state, r.host, r.lease_gen, r.object_gen, r.owner_gen, r.version, r.ord`)

	// preserveSQL: $10 is the order state (NULL clears it).
	preserveSQL = casSQL(`true`, ownerLease, `
	UPDATE pgstore_locations r SET state = 3, host = '', lease_gen = 0, ord = $10::bytea, version = r.version + 1
	FROM ok WHERE r.kind = ok.kind AND r.id = ok.id
	RETURNING r.kind, r.id, r.state, r.host, r.lease_gen, r.object_gen, r.owner_gen, r.version, r.ord`)

	deleteSQL = casSQL(`true`, ownerLease, `
	DELETE FROM pgstore_locations r USING ok WHERE r.kind = ok.kind AND r.id = ok.id
	RETURNING r.kind, r.id, r.state, r.host, r.lease_gen, r.object_gen, r.owner_gen, r.version, r.ord`)
)

// cas runs a conditional write and turns its outcome into the interface's
// answer: the written row; ErrNoRow; a *ConflictError with the row as it
// is (NewerOwner exactly when its owner generation is above the expected
// one) when the ownership or state does not match; ErrLeaseExpired when
// only the lease stood in the way.
func (s *Store) cas(ctx context.Context, op, query string, obj relocation.Object, expect relocation.Ownership,
	stateOK func(relocation.RowState) bool, extra ...any) (relocation.Row, error) {
	if err := ctx.Err(); err != nil {
		return relocation.Row{}, err
	}
	frozen, off := s.clock.args()
	args := append([]any{frozen, off, obj.Kind, obj.ID, expect.Host, i64(expect.LeaseGen), i64(expect.ObjectGen),
		i64(expect.OwnerGen), i64(expect.Version)}, extra...)
	var (
		tag  string
		live bool
	)
	row, err := scanRow(taggedRow{s.pool.QueryRow(ctx, query, args...), &tag}, &live)
	switch {
	case err == pgx.ErrNoRows:
		return relocation.Row{}, relocation.ErrNoRow
	case err != nil:
		return relocation.Row{}, wrapErr(ctx, op, err)
	case tag == "w":
		return row, nil
	case row.OwnerGen > expect.OwnerGen:
		return relocation.Row{}, &relocation.ConflictError{Current: row, NewerOwner: true}
	case row.Ownership != expect || !stateOK(row.State):
		return relocation.Row{}, &relocation.ConflictError{Current: row}
	case !live:
		return relocation.Row{}, relocation.ErrLeaseExpired
	}
	// The row matched and the lease was live, yet nothing was written: the
	// statement contradicts itself.
	return relocation.Row{}, payload.NewError(payload.InternalFailure, op, "conditional write matched but did not write")
}

func anyState(relocation.RowState) bool { return true }

// Commit implements relocation.Store: the row must be the expected
// owner's reservation (or already its active row), and the owner's lease
// (host and generation) live. One statement.
func (s *Store) Commit(ctx context.Context, obj relocation.Object, expect relocation.Ownership) (relocation.Row, error) {
	return s.cas(ctx, "pgstore.Store.Commit", commitSQL, obj, expect, func(st relocation.RowState) bool {
		return st == relocation.Reserved || st == relocation.Active
	})
}

// NewOwner implements relocation.Store: newHost's lease must be live. One
// statement.
func (s *Store) NewOwner(ctx context.Context, obj relocation.Object, expect relocation.Ownership, newHost string) (relocation.Row, error) {
	return s.cas(ctx, "pgstore.Store.NewOwner", newOwnerSQL, obj, expect, anyState, newHost)
}

// Preserve implements relocation.Store: the owner's lease (host and
// generation) must be live, unless the row is already Preserved. The
// store keeps its own copy of order. One statement.
func (s *Store) Preserve(ctx context.Context, obj relocation.Object, expect relocation.Ownership, order []byte) (relocation.Row, error) {
	var ord any
	if len(order) > 0 {
		ord = order // pgx sends the bytes now: the caller may change its slice afterwards
	}
	return s.cas(ctx, "pgstore.Store.Preserve", preserveSQL, obj, expect, anyState, ord)
}

// Delete implements relocation.Store: the owner's lease (host and
// generation) must be live, unless the row is Preserved. One statement,
// which also deletes the object's state (relocation.StateStore): the
// state row's foreign key cascades the location row's deletion, within
// the statement.
func (s *Store) Delete(ctx context.Context, obj relocation.Object, expect relocation.Ownership) error {
	_, err := s.cas(ctx, "pgstore.Store.Delete", deleteSQL, obj, expect, anyState)
	return err
}

// silenceSQL ends a silence of the store (relocation.Store, "Silences"):
// last is when any host last renewed; a lease that was live then, and
// whose half length has passed since, gets a fresh length from now. The
// leases are locked in host order (two renewals that both end the silence
// cannot deadlock), and a lease another renewal extended meanwhile is
// re-read and left alone. Without a silence it finds nothing to change.
const silenceSQL = `
WITH clk AS MATERIALIZED (SELECT ` + clockSQL + ` AS now),
last AS MATERIALIZED (SELECT max(renewed_at) AS at FROM pgstore_leases),
due AS MATERIALIZED (
	SELECT l.host FROM pgstore_leases l, clk, last
	WHERE l.deadline > last.at AND clk.now - last.at > l.ttl_us * interval '1 microsecond' / 2
		AND l.deadline < clk.now + l.ttl_us * interval '1 microsecond'
	ORDER BY l.host COLLATE "C" FOR UPDATE OF l)
UPDATE pgstore_leases l SET deadline = clk.now + l.ttl_us * interval '1 microsecond', renewed_at = clk.now
FROM due, clk WHERE l.host = due.host`

// RenewLease implements relocation.Store: one batch on the renewal pool,
// which the server runs as one transaction. It ends a silence first
// (silenceSQL), then locks the host's lease
// (FOR UPDATE: a takeover of one of its rows waits, or has committed and
// is seen by Owned), judges it, by a time after the lock was granted,
// and inserts it or, when the stored generation is not
// above gen, replaces it; a renewal of the same generation never moves
// the deadline back. The answer says whether this run's lease had run out
// (Lease.Lapsed). The refusal of an older generation is kind Rejected.
// gen above math.MaxInt64 is ErrGenerationRange.
func (s *Store) RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (relocation.Lease, error) {
	const op = "pgstore.Store.RenewLease"
	if err := ctx.Err(); err != nil {
		return relocation.Lease{}, err
	}
	if gen > math.MaxInt64 {
		return relocation.Lease{}, ErrGenerationRange
	}
	if ttl <= 0 {
		ttl = relocation.LeaseTTL
	}
	frozen, off := s.clock.args()
	var (
		l                   relocation.Lease
		g, remainingUS      int64
		oldGen              *int64
		oldRanOut, newerRun bool
	)
	// One batch, one implicit transaction that the server runs whole: the
	// end of a silence, the old lease (locked), the renewal (batch.go).
	var b pgx.Batch
	b.Queue(silenceSQL, frozen, off)
	// The lease is locked first, and judged by a statement of its own:
	// its time (clockSQL) is taken once the lock is held, after every
	// takeover that held the lease before it (Reserve locks it FOR SHARE),
	// so a takeover that found the lease run out is never followed by an
	// answer that says it had not.
	b.Queue(`SELECT 1 FROM pgstore_leases WHERE host = $1 FOR UPDATE`, host)
	b.Queue(`SELECT gen, deadline <= `+clockSQL+` FROM pgstore_leases WHERE host = $3`, frozen, off, host)
	// A newer run's lease is left alone (the WHERE): no row comes back.
	b.Queue(`
INSERT INTO pgstore_leases AS l (host, gen, deadline, renewed_at, ttl_us)
VALUES ($3, $4, `+clockSQL+` + $5::bigint * interval '1 microsecond', `+clockSQL+`, $5)
ON CONFLICT (host) DO UPDATE
SET gen = excluded.gen,
	deadline = CASE WHEN l.gen = excluded.gen THEN greatest(l.deadline, excluded.deadline) ELSE excluded.deadline END,
	renewed_at = excluded.renewed_at, ttl_us = excluded.ttl_us
WHERE l.gen <= excluded.gen
RETURNING host, gen, deadline, (extract(epoch FROM deadline - `+clockSQL+`) * 1000000)::bigint`,
		frozen, off, host, int64(gen), ttl.Microseconds())
	err := sendBatch(ctx, s.renews, &b, func(br pgx.BatchResults) error {
		for range 2 { // the silence; the lock
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var ranOut *bool
		switch err := br.QueryRow().Scan(&oldGen, &ranOut); {
		case err == pgx.ErrNoRows:
			oldGen = nil
		case err != nil:
			return err
		default:
			oldRanOut = ranOut != nil && *ranOut
		}
		err := br.QueryRow().Scan(&l.Host, &g, &l.Deadline, &remainingUS)
		if err == pgx.ErrNoRows { // a newer run holds the lease
			newerRun = true
			return nil
		}
		return err
	})
	if err != nil {
		return relocation.Lease{}, wrapErr(ctx, op, err)
	}
	if newerRun {
		return relocation.Lease{}, payload.NewError(payload.Rejected, op, "a newer run of host "+host+" holds the lease")
	}
	l.Gen = uint64(g)
	l.Remaining = time.Duration(remainingUS) * time.Microsecond
	l.TTL = ttl
	l.Lapsed = oldGen != nil && uint64(*oldGen) == gen && oldRanOut
	return l, nil
}

// Lease implements relocation.Store.
func (s *Store) Lease(ctx context.Context, host string) (relocation.Lease, bool, error) {
	const op = "pgstore.Store.Lease"
	if err := ctx.Err(); err != nil {
		return relocation.Lease{}, false, err
	}
	var l relocation.Lease
	var g, remainingUS, ttlUS int64
	frozen, off := s.clock.args()
	// A lease that ran out during a silence no renewal has ended reports
	// its TTL (relocation.Store.Lease): the owner test of reserveSQL.
	err := s.leases.QueryRow(ctx, `
WITH clk AS MATERIALIZED (SELECT `+clockSQL+` AS now)
SELECT l.host, l.gen, l.deadline,
	CASE WHEN l.deadline <= clk.now
		AND clk.now - (SELECT max(renewed_at) FROM pgstore_leases) > l.ttl_us * interval '1 microsecond' / 2
	THEN l.ttl_us
	ELSE (extract(epoch FROM l.deadline - clk.now) * 1000000)::bigint END,
	l.ttl_us
FROM pgstore_leases l, clk WHERE l.host = $3`, frozen, off, host).Scan(&l.Host, &g, &l.Deadline, &remainingUS, &ttlUS)
	if err == pgx.ErrNoRows {
		return relocation.Lease{}, false, nil
	}
	if err != nil {
		return relocation.Lease{}, false, wrapErr(ctx, op, err)
	}
	l.Gen = uint64(g)
	l.Remaining = time.Duration(remainingUS) * time.Microsecond
	l.TTL = time.Duration(ttlUS) * time.Microsecond
	return l, true, nil
}

// ownedBatch is how many objects one statement of Owned asks about.
const ownedBatch = 10000

// Owned implements relocation.Store: one statement per ownedBatch
// objects, each looking its rows up by primary key.
func (s *Store) Owned(ctx context.Context, host string, gen uint64, objs []relocation.Object) ([]bool, error) {
	const op = "pgstore.Store.Owned"
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if gen > math.MaxInt64 {
		return nil, ErrGenerationRange
	}
	out := make([]bool, len(objs))
	for start := 0; start < len(objs); start += ownedBatch {
		batch := objs[start:min(start+ownedBatch, len(objs))]
		kinds, ids := make([]string, len(batch)), make([]string, len(batch))
		for i, o := range batch {
			kinds[i], ids[i] = o.Kind, o.ID
		}
		rows, err := s.pool.Query(ctx, `
SELECT k.ord FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS k(kind, id, ord)
JOIN pgstore_locations r ON r.kind = k.kind AND r.id = k.id
WHERE r.host = $1 AND r.lease_gen = $2 AND r.state IN (1, 2)`, host, int64(gen), kinds, ids)
		if err != nil {
			return nil, wrapErr(ctx, op, err)
		}
		for rows.Next() {
			var ord int64
			if err := rows.Scan(&ord); err != nil {
				rows.Close()
				return nil, wrapErr(ctx, op, err)
			}
			out[start+int(ord)-1] = true
		}
		if err := rows.Err(); err != nil {
			return nil, wrapErr(ctx, op, err)
		}
	}
	return out, nil
}

// CountObjects implements relocation.Counter with one statement that reads
// every row of the Location Store (bounded by the pool's statement
// timeout, if any): for operators, not for a hot path.
func (s *Store) CountObjects(ctx context.Context) ([]relocation.ObjectCount, error) {
	const op = "pgstore.Store.CountObjects"
	rows, err := s.pool.Query(ctx, `SELECT host, kind, count(*) FROM pgstore_locations
		WHERE state <> 3 AND host <> '' GROUP BY host, kind ORDER BY host, kind`)
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relocation.ObjectCount, error) {
		var c relocation.ObjectCount
		var n int64
		err := r.Scan(&c.Host, &c.Kind, &n)
		c.Objects = int(n)
		return c, err
	})
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	return out, nil
}
