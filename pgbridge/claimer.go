package pgbridge

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimer is one worker of a subscription: it claims, runs and settles.
type claimer struct {
	s    *Subscription
	b    *Broker
	r    runner
	wake chan struct{}

	free     []*Delivery // reused deliveries
	live     []*Delivery // the current claim
	arena    []byte
	keys     []string
	lastType string
	lastCT   string
	fromSet  bool // claim from the floor (fromP, fromID)
	fromP    int32
	fromID   int64
	minSet   bool // the claim's first position so far
	minP     int32
	minID    int64
	xid      int64      // row lock: the claim's transaction id
	tx       claimTx    // row lock: the claim's transaction, as handlers see it
	hctx     handlerCtx // the handler's context, with its deadline
	solo     []int64    // row lock: rows of a rolled-back batch, to claim again one at a time
	started  time.Time  // row lock: the server's start time at the claim

	bt      pgx.Batch // reused for every round trip
	args    []any     // reused claim arguments (claimQuery)
	curMu   sync.Mutex
	cur     *pgx.Conn // the connection of the round trip in flight (armed)
	ext     extender
	settled map[int64]bool // lease: ids the fenced settlement changed

	// settlement scratch
	delIDs, retryIDs, deadIDs []int64
	retrySecs                 []float64
	retryErrs, deadReasons    []string
}

func (c *claimer) loop() {
	b, s := c.b, c.s
	defer b.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		select {
		case <-b.stopping:
			return
		default:
		}
		if s.paused.Load() {
			// Paused: claim nothing until Resume (or Stop) wakes it.
			select {
			case <-c.wake:
				continue
			case <-b.stopping:
				return
			}
		}
		if s.Form == Lease && s.rescueDue(nanotime()) {
			c.rescue()
		}
		c.fromSet, c.fromP, c.fromID = s.floor.get(nanotime())
		n, err := c.claimOnce()
		if err != nil && b.ctx.Err() == nil {
			b.stats.claimErrors.Add(1)
			b.obs.ClaimFailed(s.Name, err)
			b.log.Warn("pgbridge: claim failed", "subscription", s.Name, "err", err)
		}
		if err != nil {
			s.floor.reset()
		}
		if err == nil && (n >= s.Batch || len(c.solo) > 0) {
			continue // more may be ready, or a rolled-back batch's rows wait to run one at a time
		}
		if err == nil && n > 0 && (s.Ordered || s.Form == Advisory) {
			// The claim's rows settled: the next row of each of their keys
			// became claimable (a claim takes a key's oldest row only).
			continue
		}
		if err == nil && c.fromSet {
			// Nothing from the floor on: look from the start before
			// sleeping.
			s.floor.reset()
			continue
		}
		timer.Reset(s.PollInterval)
		select {
		case <-c.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		case <-b.stopping:
			return
		}
	}
}

// rescue makes the rows whose lease ran out (their claimer crashed, or
// overran its handler deadline) claimable again, and wakes the
// subscription's claimers when there were any.
func (c *claimer) rescue() {
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
	defer cancel()
	tag, err := c.b.pool.Exec(ctx, c.s.sql.rescue)
	if err != nil {
		if c.b.ctx.Err() == nil {
			c.b.log.Warn("pgbridge: lease rescue failed", "subscription", c.s.Name, "err", err)
		}
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		c.b.stats.rescued.Add(uint64(n))
		c.s.floor.reset() // the rows may lie before the floor
		c.s.wake()
	}
}

// delivery returns a reset delivery for the next row of the claim.
func (c *claimer) delivery() *Delivery {
	var d *Delivery
	if n := len(c.live); n < len(c.free) {
		d = c.free[n]
	} else {
		d = &Delivery{}
		c.free = append(c.free, d)
	}
	d.reset()
	c.live = append(c.live, d)
	return d
}

func (c *claimer) str(raw []byte, last *string) string {
	if raw == nil {
		return ""
	}
	if string(raw) == *last {
		return *last
	}
	*last = string(raw)
	return *last
}

// read turns the claimed rows into deliveries, decoding payloads while the
// driver's values are current.
func (c *claimer) read(rows pgx.Rows, conn *pgx.Conn) (int, error) {
	s, b := c.s, c.b
	now := nanotime()
	for rows.Next() {
		raw := rows.RawValues()
		fd := rows.FieldDescriptions()
		d := c.delivery()
		d.form, d.conn, d.claimNs = s.Form, conn, now
		switch s.Form {
		case Lease:
			d.conn = nil
		case RowLock:
			c.tx.conn, c.tx.c = conn, c
			d.tx = &c.tx
		}
		id, err := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
		if err != nil {
			return 0, err
		}
		att, err := rawInt64(raw[2], fd[2].Format, fd[2].DataTypeOID)
		if err != nil {
			return 0, err
		}
		d.ID, d.Key = id, string(raw[1])
		prio, err := rawInt64(raw[8], fd[8].Format, fd[8].DataTypeOID)
		if err != nil {
			return 0, err
		}
		if p := int32(-prio); !c.minSet || p < c.minP || p == c.minP && id < c.minID {
			c.minSet, c.minP, c.minID = true, p, id
		}
		d.Attempt = int(att)
		if s.Form == RowLock {
			d.Attempt++ // the lease and advisory claims counted it already
		}
		d.Type = c.str(raw[3], &c.lastType)
		d.ContentType = c.str(raw[4], &c.lastCT)
		if raw[6] != nil {
			h := rawJSON(raw[6], fd[6].Format, fd[6].DataTypeOID)
			start := len(c.arena)
			c.arena = append(c.arena, h...)
			d.hdrRaw = c.arena[start:len(c.arena):len(c.arena)]
		}
		if s.Form == Lease {
			if d.token, err = rawTime(raw[7], fd[7].Format, fd[7].DataTypeOID); err != nil {
				return 0, err
			}
		}
		if n := len(s.Table.RowColumns); n > 0 {
			d.row.ID, d.row.Key, d.row.Attempt, d.row.Columns = d.ID, d.Key, d.Attempt, s.Table.RowColumns
			for i := 9; i < 9+n; i++ {
				var v []byte
				if raw[i] != nil {
					start := len(c.arena)
					c.arena = append(c.arena, raw[i]...)
					v = c.arena[start:len(c.arena):len(c.arena)]
				}
				d.row.vals = append(d.row.vals, v)
				d.row.oids = append(d.row.oids, fd[i].DataTypeOID)
				d.row.fmts = append(d.row.fmts, fd[i].Format)
			}
		}
		if s.Form == RowLock {
			x, st := len(raw)-2, len(raw)-1
			if c.xid, err = rawInt64(raw[x], fd[x].Format, fd[x].DataTypeOID); err != nil {
				return 0, err
			}
			if c.started, err = rawTime(raw[st], fd[st].Format, fd[st].DataTypeOID); err != nil {
				return 0, err
			}
		}
		if s.Form != RowLock && s.MaxAttempts > 0 && d.Attempt > s.MaxAttempts {
			d.undec = errMaxAttempts // not run: settled as dead letter below
			d.outcome = DeadLetterWith("exceeded max attempts")
			continue
		}
		body := raw[5]
		if fd[5].Format == pgx.TextFormatCode && fd[5].DataTypeOID == pgtype.ByteaOID && body != nil {
			// A text-format bytea (simple protocol, exec mode): "\x" and hex.
			if body, err = c.unhex(body); err != nil {
				return 0, err
			}
		}
		if err := c.r.read(d, body); err != nil {
			b.stats.decodeFailures.Add(1)
			b.obs.DecodeFailed(s.Name)
			d.undec = err
			d.outcome = s.DecodePolicy.outcome(s.DecodeRetryDelay, err)
		}
	}
	return len(c.live), rows.Err()
}

// unhex decodes a text-format bytea into the arena.
func (c *claimer) unhex(v []byte) ([]byte, error) {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return nil, payload.NewError(payload.ProtocolError, "pgbridge", "bytea in text format without the \\x prefix")
	}
	start := len(c.arena)
	c.arena = slices.Grow(c.arena, (len(v)-2)/2)[:start+(len(v)-2)/2]
	if _, err := hex.Decode(c.arena[start:], v[2:]); err != nil {
		return nil, payload.Wrap(payload.ProtocolError, "pgbridge", err)
	}
	return c.arena[start:len(c.arena):len(c.arena)], nil
}

var errMaxAttempts = errors.New("pgbridge: exceeded max attempts")

func (c *claimer) endClaim() {
	if c.minSet {
		c.s.floor.advance(c.minP, c.minID)
		c.minSet = false
	}
	c.r.reset()
	c.tx.forget()
	c.tx.conn = nil
	c.xid = 0
	c.live = c.live[:0]
	if cap(c.arena) > 1<<20 {
		c.arena = nil
	}
	c.arena = c.arena[:0]
}

// claimOnce claims, runs and settles one claim; it returns the rows claimed.
func (c *claimer) claimOnce() (int, error) {
	defer c.endClaim()
	switch c.s.Form {
	case Lease:
		return c.claimLease()
	case Advisory:
		return c.claimAdvisory()
	}
	return c.claimRowLock()
}

// Statements on a claim's connection run with a context that is never
// cancelled (pgx then skips its per-round-trip cancel watcher: measured,
// a tenth of the client's CPU per row) and a deadline on the connection
// itself: arm sets it before each round trip, under curMu, after checking
// that the broker is not closing; Close cancels the broker and then sets
// every armed connection's deadline to now. Whichever comes second wins,
// so no round trip starts or goes on after Close.
var noCancel = context.Background()

// acquire takes a connection, armed for its first round trip; done
// returns it, closing it first unless ok
// (a connection in an unknown state — a failed transaction, advisory locks
// still held, a deadline passed — is never reused).
func (c *claimer) acquire() (*pgx.Conn, func(ok bool), error) {
	pc, err := c.b.pool.Acquire(c.b.ctx)
	if err != nil {
		return nil, nil, err
	}
	conn := pc.Conn()
	if err := c.arm(conn); err != nil {
		pc.Release()
		return nil, nil, err
	}
	return conn, func(ok bool) {
		c.disarm(conn)
		if !ok {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(cctx)
			cancel()
		}
		pc.Release()
	}, nil
}

// arm gives conn's next round trip the statement timeout, unless the
// broker is closing.
func (c *claimer) arm(conn *pgx.Conn) error {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	if err := c.b.ctx.Err(); err != nil {
		return payload.Wrap(payload.ShuttingDown, "pgbridge", err)
	}
	c.cur = conn
	return conn.PgConn().Conn().SetDeadline(time.Now().Add(c.b.cfg.StatementTimeout))
}

// disarm clears conn's deadline before it goes back to the pool.
func (c *claimer) disarm(conn *pgx.Conn) {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	c.cur = nil
	conn.PgConn().Conn().SetDeadline(time.Time{})
}

// abort ends the claimer's round trip in flight (Close).
func (c *claimer) abort() {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	if c.cur != nil {
		c.cur.PgConn().Conn().SetDeadline(time.Now())
	}
}

// claimQuery returns a claim statement and its arguments: lead, then — when
// the claim continues from the floor — the floor's position. The arguments
// live in the claimer's reused slice until its next claim.
func (c *claimer) claimQuery(fromStart, fromFloor string, lead ...any) (string, []any) {
	c.args = append(c.args[:0], lead...)
	if !c.fromSet {
		return fromStart, c.args
	}
	if c.s.cols.Priority != "" {
		c.args = append(c.args, c.fromP)
	}
	return fromFloor, append(c.args, c.fromID)
}

// batch returns the claimer's reused, emptied batch.
func (c *claimer) batch() *pgx.Batch {
	clear(c.bt.QueuedQueries)
	c.bt.QueuedQueries = c.bt.QueuedQueries[:0]
	return &c.bt
}

// execBatch sends a batch on conn and reads every result; it returns the
// first error.
func execBatch(conn *pgx.Conn, bt *pgx.Batch) error {
	br := conn.SendBatch(noCancel, bt)
	var first error
	for i := 0; i < bt.Len(); i++ {
		if _, err := br.Exec(); err != nil && first == nil {
			first = err
		}
	}
	if err := br.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

func (c *claimer) claimRowLock() (n int, err error) {
	b, s := c.b, c.s
	conn, done, err := c.acquire()
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	bt := c.batch()
	bt.Queue("BEGIN")
	if len(c.solo) > 0 {
		bt.Queue(s.sql.claimOne, c.solo[0])
		c.solo = c.solo[1:]
	} else {
		sql, args := c.claimQuery(s.sql.claim, s.sql.claimFrom)
		bt.Queue(sql, args...)
	}
	br := conn.SendBatch(noCancel, bt)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, err
	}
	rows, err := br.Query()
	if err == nil {
		n, err = c.read(rows, conn)
		rows.Close()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		_, err = conn.Exec(noCancel, "COMMIT")
		ok = err == nil
		return 0, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	c.disarm(conn) // the handler may take as long as it needs
	c.run()
	// The settlement and the commit go in one round trip; a failure of any
	// statement (the handler's own, in the claim's transaction, included)
	// rolls the whole claim back.
	serr := c.arm(conn)
	if serr == nil {
		st := c.batch()
		c.queueSettle(st, c.live, time.Time{})
		st.Queue("COMMIT")
		serr = execBatch(conn, st)
	}
	if serr == nil && conn.PgConn().TxStatus() != 'I' {
		serr = errors.New("transaction did not commit")
	}
	if serr != nil && !isServerError(serr) && c.xid != 0 && b.ctx.Err() == nil {
		// No statement was refused by the server: the connection ended,
		// maybe after COMMIT arrived. Close it (so its backend ends the
		// transaction) and ask the server what became of it.
		// Give the connection back first: when the server restarted,
		// every claimer is here, and the pool must have connections for
		// their questions.
		done(false)
		done = func(bool) {}
		committed, rerr := c.commitFate(c.xid)
		switch {
		case rerr != nil:
			b.stats.unknown.Add(1)
			c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", errors.Join(ErrOutcomeUnknown, serr, rerr)))
			return n, nil
		case committed:
			c.tx.committed(b)
			c.report(nil, nil)
			return n, nil
		}
	}
	if serr != nil {
		s.floor.reset() // its rows are claimable again, before the floor
		b.stats.rollbacks.Add(1)
		b.obs.RolledBack(s.Name, n)
		if isServerError(serr) && b.ctx.Err() == nil {
			// The server refused a statement — the handler's, in the
			// claim's transaction, or a settlement's — and the claim rolled
			// back. Claimed again as it was, the row would fail the same way
			// at once, for ever (its attempt is counted only by a
			// settlement). One row: its failure is a retry, counted outside
			// the rolled-back transaction, so the subscription's retry delay
			// and MaxAttempts end the loop. A batch: which of its rows
			// failed is not known, so each is claimed again on its own.
			if n == 1 {
				if c.countRolledBack(conn, serr) {
					ok = true
					return n, nil
				}
			} else {
				for _, d := range c.live {
					c.solo = append(c.solo, d.ID)
				}
			}
		}
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", errors.Join(ErrBatchRolledBack, serr)))
		return n, nil
	}
	ok = true
	c.tx.committed(b)
	c.report(nil, nil)
	return n, nil
}

// countRolledBack settles the one row of a row-lock claim that rolled back
// because the server refused a statement (serr) as a retry — counted, after
// the subscription's retry delay, or dead-lettered past MaxAttempts — on
// conn, outside the rolled-back transaction. It reports false if that
// failed too (the row is then claimable again as it was).
func (c *claimer) countRolledBack(conn *pgx.Conn, serr error) bool {
	s := c.s
	if conn.PgConn().TxStatus() != 'I' {
		if c.arm(conn) != nil {
			return false
		}
		if _, err := conn.Exec(noCancel, "ROLLBACK"); err != nil {
			return false
		}
	}
	d := c.live[0]
	d.outcome = RetryAfter(s.retryDelay(d.Attempt), "the claim's transaction rolled back: "+serr.Error())
	st := c.batch()
	c.queueSettle(st, c.live, time.Time{})
	if c.arm(conn) != nil {
		return false
	}
	if err := execBatch(conn, st); err != nil || conn.PgConn().TxStatus() != 'I' {
		c.b.log.Warn("pgbridge: a rolled-back row's retry could not be counted", "subscription", s.Name, "id", d.ID, "err", err)
		return false
	}
	c.report(nil, nil)
	return true
}

// isServerError reports whether the server refused a statement (as
// opposed to the connection failing).
func isServerError(err error) bool {
	var pge *pgconn.PgError
	return errors.As(err, &pge)
}

// commitFate asks, on another connection, whether transaction xid committed,
// waiting while its backend has not yet ended it.
func (c *claimer) commitFate(xid int64) (bool, error) {
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
	defer cancel()
	for {
		var status *string
		var started time.Time
		if err := c.b.pool.QueryRow(ctx, "SELECT txid_status($1), pg_postmaster_start_time()", xid).Scan(&status, &started); err != nil {
			if ctx.Err() != nil {
				return false, err
			}
		} else if !started.Equal(c.started) {
			return false, errors.New("the server restarted since the claim")
		} else if status == nil || *status == "aborted" {
			return false, nil
		} else if *status == "committed" {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *claimer) claimAdvisory() (n int, err error) {
	b, s := c.b, c.s
	conn, done, err := c.acquire()
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	sql, args := c.claimQuery(s.sql.lock, s.sql.lockFrom, s.Table.Name)
	rows, err := conn.Query(noCancel, sql, args...)
	if err != nil {
		return 0, err
	}
	c.keys = c.keys[:0]
	for rows.Next() {
		c.keys = append(c.keys, string(rows.RawValues()[0]))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(c.keys) == 0 {
		ok = true
		return 0, nil
	}
	if len(c.keys) == 1 {
		rows, err = conn.Query(noCancel, s.sql.heads1, c.keys[0])
	} else {
		rows, err = conn.Query(noCancel, s.sql.heads, c.keys)
	}
	if err != nil {
		return 0, err
	}
	n, err = c.read(rows, conn)
	rows.Close()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		st := c.batch()
		c.queueUnlock(st)
		err := execBatch(conn, st)
		ok = err == nil
		return 0, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	c.disarm(conn)
	c.run()
	// The settlement and the unlock go in one round trip (one implicit
	// transaction). A claimer that takes a key between the unlock and the
	// commit cannot run a settled row: its heads statement is an UPDATE,
	// which waits for this transaction and then skips a deleted row or one
	// whose run_at moved on.
	serr := c.arm(conn)
	if serr == nil {
		st := c.batch()
		c.queueSettle(st, c.live, time.Time{})
		c.queueUnlock(st)
		serr = execBatch(conn, st)
	}
	if serr != nil && isServerError(serr) && b.ctx.Err() == nil {
		// The server refused a statement, and nothing of the implicit
		// transaction committed: each row settles on its own, then the
		// keys are unlocked.
		c.settleEach(conn, time.Time{})
		if serr = c.arm(conn); serr == nil {
			st := c.batch()
			c.queueUnlock(st)
			serr = execBatch(conn, st)
		}
		ok = serr == nil
		c.report(nil, nil)
		return n, nil
	}
	if serr != nil {
		// Nothing of the implicit transaction committed; the connection
		// (and its locks) is closed by done.
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", serr))
		return n, serr
	}
	c.report(nil, nil)
	ok = true
	return n, nil
}

func (c *claimer) claimLease() (n int, err error) {
	b, s := c.b, c.s
	conn, done, err := c.acquire()
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	sql, args := c.claimQuery(s.sql.claim, s.sql.claimFrom, s.Lease.Microseconds())
	rows, err := conn.Query(noCancel, sql, args...)
	if err != nil {
		return 0, err
	}
	n, err = c.read(rows, nil)
	rows.Close()
	if err != nil || n == 0 {
		ok = err == nil
		return n, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	// The lease needs no connection while the handler runs: give it
	// back, so the extensions (and other claimers) find one.
	done(true)
	ext := &c.ext
	ext.start(c, c.live[0].token)
	c.run()
	token := ext.stop()
	conn, done, err = c.acquire()
	if err != nil {
		// Not settled: the leases expire and the rows are claimed again.
		done = func(bool) {}
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", err))
		return n, err
	}
	clear(c.settled)
	serr := c.settle(conn, c.live, token)
	if serr != nil && isServerError(serr) && b.ctx.Err() == nil {
		// The server refused a statement, and nothing of the implicit
		// transaction committed: each row settles on its own.
		c.settleEach(conn, token)
		c.report(c.settled, nil)
		ok = true
		return n, nil
	}
	if serr != nil {
		// Not settled: the leases expire and the rows are claimed again.
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", serr))
		return n, serr
	}
	c.report(c.settled, nil)
	ok = true
	return n, nil
}

// settle runs the settlement of deliveries ds on conn, in one round trip
// (one implicit transaction), adding to c.settled the ids the lease form's
// fenced statements changed.
func (c *claimer) settle(conn *pgx.Conn, ds []*Delivery, token time.Time) error {
	if err := c.arm(conn); err != nil {
		return err
	}
	st := c.batch()
	c.queueSettle(st, ds, token)
	br := conn.SendBatch(noCancel, st)
	var serr error
	for i := 0; i < st.Len(); i++ {
		rows, err := br.Query()
		if err != nil {
			serr = err
			break
		}
		for rows.Next() {
			raw, fd := rows.RawValues(), rows.FieldDescriptions()
			id, _ := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
			c.settled[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil && serr == nil {
			serr = err
		}
	}
	if err := br.Close(); err != nil && serr == nil {
		serr = err
	}
	return serr
}

// settleEach settles the claim's rows one at a time (lease and advisory
// forms: each row settles on its own), after a settlement of them all
// failed. A row whose settlement the server refuses is retried instead —
// counted, after the subscription's retry delay, so MaxAttempts ends a row
// that can never settle; if that is refused too, the row is left as it is
// (lease: claimed again when its lease ends; advisory: when its key is
// free) and its error is reported to OnSettled.
func (c *claimer) settleEach(conn *pgx.Conn, token time.Time) {
	s := c.s
	clear(c.settled)
	for i, d := range c.live {
		err := c.settle(conn, c.live[i:i+1], token)
		if err != nil && isServerError(err) && d.outcome.Kind != KindRetry {
			d.outcome = RetryAfter(s.retryDelay(d.Attempt), "its settlement was refused: "+err.Error())
			err = c.settle(conn, c.live[i:i+1], token)
		}
		if err != nil {
			d.serr = dbError("pgbridge", err)
			c.b.log.Warn("pgbridge: a row could not be settled", "subscription", s.Name, "id", d.ID, "err", err)
		}
	}
}

// queueUnlock queues the release of the claim's advisory locks.
func (c *claimer) queueUnlock(bt *pgx.Batch) {
	if len(c.keys) == 1 {
		bt.Queue(c.s.sql.unlock1, c.s.Table.Name, c.keys[0])
		return
	}
	bt.Queue(c.s.sql.unlock, c.s.Table.Name, c.keys)
}

// extender keeps a lease claim's rows leased while the handler runs: every
// half lease it moves their locked_until (the token) on, on a connection of
// its own. Each claimer has one, reused claim after claim.
type extender struct {
	c       *claimer
	mu      sync.Mutex
	token   time.Time
	until   time.Time // the handler's deadline: no extension past it (zero: none)
	timer   *time.Timer
	stopped bool
	ids     []int64
	kept    map[int64]bool
}

func (e *extender) start(c *claimer, token time.Time) {
	e.mu.Lock()
	e.c, e.token, e.stopped = c, token, false
	e.until = time.Time{}
	if t := c.s.HandlerTimeout; t > 0 {
		e.until = time.Now().Add(t)
	}
	e.mu.Unlock()
	if e.timer == nil {
		e.timer = time.AfterFunc(c.s.Lease/2, e.extend)
	} else {
		e.timer.Reset(c.s.Lease / 2)
	}
}

func (e *extender) extend() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	c := e.c
	if !e.until.IsZero() && time.Now().After(e.until) {
		// The handler overran its deadline: its rows' leases run out,
		// and the rows are claimed again.
		c.b.log.Warn("pgbridge: a handler overran its deadline; its lease is no longer extended", "subscription", c.s.Name)
		return
	}
	e.ids = e.ids[:0]
	for _, d := range c.live {
		if !d.LeaseLost() {
			e.ids = append(e.ids, d.ID)
		}
	}
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
	defer cancel()
	rows, err := c.b.pool.Query(ctx, c.s.sql.extend, e.ids, e.token, c.s.Lease.Microseconds())
	if err != nil {
		c.b.log.Warn("pgbridge: lease extension failed", "subscription", c.s.Name, "err", err)
		e.timer.Reset(c.s.Lease / 4)
		return
	}
	if e.kept == nil {
		e.kept = map[int64]bool{}
	}
	clear(e.kept)
	var tok time.Time
	for rows.Next() {
		raw, fd := rows.RawValues(), rows.FieldDescriptions()
		id, _ := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
		tok, _ = rawTime(raw[1], fd[1].Format, fd[1].DataTypeOID)
		e.kept[id] = true
	}
	rows.Close()
	if rows.Err() != nil {
		e.timer.Reset(c.s.Lease / 4)
		return
	}
	for _, d := range c.live {
		if !e.kept[d.ID] && !d.LeaseLost() {
			d.markLost()
		} else if e.kept[d.ID] {
			d.setToken(tok)
		}
	}
	if len(e.kept) > 0 {
		e.token = tok
	}
	e.timer.Reset(c.s.Lease / 2)
}

// stop ends the extensions and returns the current token.
func (e *extender) stop() time.Time {
	e.timer.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	return e.token
}

// run runs the handler over the claim's deliveries, with the
// subscription's handler deadline.
func (c *claimer) run() {
	if t := c.s.HandlerTimeout; t > 0 {
		if c.hctx.parent == nil {
			c.hctx.init(c.b.ctx)
		}
		c.hctx.arm(t)
		c.r.run(&c.hctx, c.live)
		c.hctx.disarm()
		return
	}
	c.r.run(c.b.ctx, c.live)
}

// queueSettle queues the settlement statements of deliveries ds (array
// statements, one per outcome kind present) and returns how many.
func (c *claimer) queueSettle(bt *pgx.Batch, ds []*Delivery, token time.Time) int {
	s := c.s
	c.delIDs, c.retryIDs, c.deadIDs = c.delIDs[:0], c.retryIDs[:0], c.deadIDs[:0]
	c.retrySecs, c.retryErrs, c.deadReasons = c.retrySecs[:0], c.retryErrs[:0], c.deadReasons[:0]
	for _, d := range ds {
		o := d.outcome
		if o.Kind == KindRetry && !o.delayed {
			o = RetryAfter(s.retryDelay(d.Attempt), o.Reason)
			d.outcome = o
		}
		if o.Kind == KindRetry && s.MaxAttempts > 0 && d.Attempt >= s.MaxAttempts {
			o = DeadLetterWith("max attempts reached: " + o.Reason)
			d.outcome = o
		}
		if o.Kind == KindDeadLetter && s.sql.dead == "" {
			// No dead-letter table (Subscribe refused MaxAttempts and
			// DecodeDeadLetter without one): a handler's DeadLetter
			// outcome is kept for a later attempt instead of lost.
			o = RetryAfter(s.retryDelay(d.Attempt), "dead letter without a dead-letter table: "+o.Reason)
			d.outcome = o
		}
		switch o.Kind {
		case KindAck, KindDrop:
			c.delIDs = append(c.delIDs, d.ID)
		case KindRetry:
			c.retryIDs = append(c.retryIDs, d.ID)
			c.retrySecs = append(c.retrySecs, o.Delay.Seconds())
			c.retryErrs = append(c.retryErrs, o.Reason)
		case KindDeadLetter:
			c.deadIDs = append(c.deadIDs, d.ID)
			c.deadReasons = append(c.deadReasons, o.Reason)
		}
	}
	n := 0
	lease := s.Form == Lease
	switch {
	case len(c.delIDs) == 1 && lease:
		bt.Queue(s.sql.del1, c.delIDs[0], token)
		n++
	case len(c.delIDs) == 1:
		bt.Queue(s.sql.del1, c.delIDs[0])
		n++
	case len(c.delIDs) > 0 && lease:
		bt.Queue(s.sql.del, c.delIDs, token)
		n++
	case len(c.delIDs) > 0:
		bt.Queue(s.sql.del, c.delIDs)
		n++
	}
	if len(c.retryIDs) > 0 {
		if lease {
			bt.Queue(s.sql.retry, c.retryIDs, token, c.retrySecs, c.retryErrs)
		} else {
			bt.Queue(s.sql.retry, c.retryIDs, c.retrySecs, c.retryErrs)
		}
		n++
	}
	if len(c.deadIDs) > 0 {
		if lease {
			bt.Queue(s.sql.dead, c.deadIDs, token, c.deadReasons)
		} else {
			bt.Queue(s.sql.dead, c.deadIDs, c.deadReasons)
		}
		n++
	}
	return n
}

// report counts the claim's settlements. settled (lease form) holds the
// ids the fenced statements changed; the others lost their lease. err is
// the whole claim's failure (nothing settled); a row's own failure to
// settle is its Delivery's serr.
func (c *claimer) report(settled map[int64]bool, err error) {
	b, s := c.b, c.s
	now := nanotime()
	for _, d := range c.live {
		derr := err
		if err == nil && d.serr != nil {
			derr = d.serr
		} else if err == nil && settled != nil && !settled[d.ID] {
			derr = ErrLeaseLost
			b.stats.leaseLost.Add(1)
			b.obs.LeaseLost(s.Name)
		}
		if derr == nil {
			switch d.outcome.Kind {
			case KindAck:
				b.stats.acked.Add(1)
			case KindRetry:
				b.stats.retried.Add(1)
			case KindDrop:
				b.stats.dropped.Add(1)
			case KindDeadLetter:
				b.stats.dead.Add(1)
			}
			b.obs.Settled(s.Name, d.outcome.Kind, time.Duration(now-d.claimNs))
		}
		if s.OnSettled != nil {
			s.OnSettled(d, d.outcome, derr)
		}
	}
}

func nanotime() int64 { return time.Now().UnixNano() }
