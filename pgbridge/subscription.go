package pgbridge

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Form is how a subscription claims rows.
type Form uint8

// The claim forms.
const (
	// RowLock claims with SELECT … FOR UPDATE SKIP LOCKED in a transaction
	// that stays open while the handler runs; the settlement runs in the
	// same transaction and nothing is written at claim. A worker or
	// connection that dies rolls the claim back: its rows are claimed
	// again, with the same attempt (the attempt column counts settled
	// retries only).
	RowLock Form = iota
	// Lease claims by setting locked_until to now + Lease (the token) and
	// counting the attempt; every settlement is fenced on the token, the
	// lease is extended every half lease while the handler runs, and an
	// expired lease makes the row claimable again. A settlement that lost
	// its lease changes nothing (ErrLeaseLost).
	Lease
	// Advisory takes a session advisory lock per key on a held connection,
	// then takes the key's oldest row, counting its attempt: at most one row
	// of a key in work anywhere, a key's rows in id order. The settlement
	// commits before the lock is released; a connection that dies releases
	// the lock, and the row is claimed again.
	Advisory
)

// String names the form.
func (f Form) String() string {
	switch f {
	case Lease:
		return "lease"
	case Advisory:
		return "advisory"
	}
	return "row_lock"
}

// Subscription claims rows of an inbox table and runs them through a
// handler. Fill in the exported fields and pass it to Broker.Subscribe.
//
// Per-key order: the Advisory form always runs a key's rows one at a time in
// id order. RowLock and Lease do when Ordered is set: a claim takes only the
// oldest row of each key (a key whose oldest row is in work, or waiting for a
// retry, has no row claimable), in batches too. Without Ordered they claim
// in priority and id order across keys, and two workers may run rows of one
// key at once.
type Subscription struct {
	// Name labels metrics and logs (default: the table name).
	Name string
	// Table is the inbox table.
	Table Table
	// Form is the claim form (default RowLock).
	Form Form
	// Workers is the number of claimers (default 1); each holds a
	// connection while it works on a claim.
	Workers int
	// Batch is the most rows one claim takes (default 1: one row for each
	// free worker).
	Batch int
	// Ordered: rows of one key run in id order (see above).
	Ordered bool
	// Lease is the lease-form lease (default 30 s).
	Lease time.Duration
	// PollInterval is the floor: a claimer that found nothing claims again
	// after it even if nothing woke it (default 1 s).
	PollInterval time.Duration
	// MaxAttempts > 0 dead-letters a row whose attempt reached it and is
	// retried again (and, in the lease and advisory forms, which count the
	// attempt at claim, one claimed past it without running it: a handler
	// that crashed the process every time). Needs Table.DeadLetter.
	MaxAttempts int
	// DecodePolicy settles rows whose payload does not decode.
	DecodePolicy DecodePolicy
	// DecodeRetryDelay is DecodeRetry's delay (default 1 min).
	DecodeRetryDelay time.Duration
	// RetryDelay is the delay of a retry the bridge chooses (a handler's
	// error in Objects, a panic): default attempt × 1 s, at most 1 min.
	RetryDelay func(attempt int) time.Duration
	// OnSettled, if set, is called after each row's settlement with its
	// outcome and nil, ErrLeaseLost or ErrBatchRolledBack.
	OnSettled func(d *Delivery, o Outcome, err error)

	b       *Broker
	h       Handler
	cols    Columns
	channel string
	sql     statements
	mu      sync.Mutex
	wakes   []chan struct{}
	running bool
}

type statements struct {
	claim, heads, lock, unlock, del, retry, dead, extend, rescue string
}

// Subscribe adds a subscription running handler h. It starts with the
// broker (at once if the broker has started).
//
// Configuration errors (NotConfigured, InvalidOperation): no table; MaxAttempts,
// the DecodeDeadLetter policy without a dead-letter table; a row-mode
// handler on a table with a payload column or a payload handler on one
// without; the lease form without a locked_until column.
func (b *Broker) Subscribe(s *Subscription, h Handler) error {
	if s.Table.Name == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe", "no table")
	}
	if h == nil {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe", "no handler")
	}
	s.cols = s.Table.cols()
	c := s.cols
	if (s.MaxAttempts > 0 || s.DecodePolicy == DecodeDeadLetter) && s.Table.DeadLetter == "" {
		return payload.NewError(payload.NotConfigured, "pgbridge.Subscribe",
			"table "+s.Table.Name+": MaxAttempts and DecodeDeadLetter need a dead-letter table (Table.DeadLetter)")
	}
	if c.ID == "" || c.Key == "" || c.Attempt == "" || c.RunAt == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe", "table "+s.Table.Name+": id, key, attempt and run_at columns are required")
	}
	switch h.mode() {
	case modeRow:
		if c.Payload != "" && s.Table.Columns.Payload != "-" {
			return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe",
				"table "+s.Table.Name+": row mode reads a table without a payload column (set Columns.Payload to \"-\")")
		}
	case modePayload:
		if c.Payload == "" || c.ContentType == "" {
			return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe",
				"table "+s.Table.Name+": payload mode needs payload and content_type columns")
		}
	}
	if s.Form == Lease && c.LockedUntil == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe", "table "+s.Table.Name+": the lease form needs a locked_until column")
	}
	if s.Name == "" {
		s.Name = s.Table.Name
	}
	s.Workers = max(s.Workers, 1)
	s.Batch = max(s.Batch, 1)
	if s.Lease <= 0 {
		s.Lease = 30 * time.Second
	}
	if s.PollInterval <= 0 {
		s.PollInterval = time.Second
	}
	if s.DecodeRetryDelay <= 0 {
		s.DecodeRetryDelay = time.Minute
	}
	s.b, s.h, s.channel = b, h, channelName(s.Table.Name)
	s.sql = s.build()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	b.subs = append(b.subs, s)
	if b.started {
		s.start()
	}
	return nil
}

func (s *Subscription) retryDelay(attempt int) time.Duration {
	if s.RetryDelay != nil {
		return s.RetryDelay(attempt)
	}
	return min(time.Duration(attempt)*time.Second, time.Minute)
}

func (s *Subscription) decodeRetryDelay() time.Duration { return s.DecodeRetryDelay }

// start starts the claimers; b.mu is held.
func (s *Subscription) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	s.running = true
	for i := 0; i < s.Workers; i++ {
		c := &claimer{s: s, b: s.b, r: s.h.newRunner(s.b, s), wake: make(chan struct{}, 1), first: i == 0}
		s.wakes = append(s.wakes, c.wake)
		s.b.wg.Add(1)
		go c.loop()
	}
}

// wake makes every claimer of the subscription claim at once.
func (s *Subscription) wake() {
	s.mu.Lock()
	for _, w := range s.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// build writes the subscription's statements.
func (s *Subscription) build() statements {
	c, t := s.cols, ident(s.Table.Name)
	sel := func(alias string) string {
		a := alias + "."
		cols := []string{a + q(c.ID), a + q(c.Key), a + q(c.Attempt)}
		for _, col := range []string{c.Type, c.ContentType, c.Payload, c.Headers} {
			if col != "" {
				cols = append(cols, a+q(col))
			} else {
				cols = append(cols, "NULL")
			}
		}
		if c.LockedUntil != "" {
			cols = append(cols, a+q(c.LockedUntil))
		} else {
			cols = append(cols, "NULL::timestamptz")
		}
		for _, col := range s.Table.RowColumns {
			cols = append(cols, a+q(col))
		}
		if s.Form == RowLock {
			// The claim's transaction id (locking the rows assigns one
			// anyway): if a COMMIT's answer is lost, the server is asked
			// what became of it.
			// With the server's start time: after a restart an xid that
			// was never written to the WAL can be handed out again, so
			// its status says nothing about this claim.
			cols = append(cols, "txid_current()", "pg_postmaster_start_time()")
		}
		return strings.Join(cols, ", ")
	}
	ready := func(alias string) string {
		w := alias + "." + q(c.RunAt) + " <= now()"
		if c.LockedUntil != "" {
			w += " AND " + alias + "." + q(c.LockedUntil) + " IS NULL"
		}
		if s.Ordered && s.Form != Advisory {
			w += " AND NOT EXISTS (SELECT 1 FROM " + t + " p WHERE p." + q(c.Key) + " = " + alias + "." + q(c.Key) +
				" AND p." + q(c.ID) + " < " + alias + "." + q(c.ID) + ")"
		}
		return w
	}
	order := func(alias string) string {
		if c.Priority != "" {
			return alias + "." + q(c.Priority) + " DESC, " + alias + "." + q(c.ID)
		}
		return alias + "." + q(c.ID)
	}
	var st statements
	switch s.Form {
	case RowLock:
		st.claim = "SELECT " + sel("t") + " FROM " + t + " t WHERE " + ready("t") + " ORDER BY " + order("t") + " LIMIT $1 FOR UPDATE SKIP LOCKED"
	case Lease:
		st.claim = "UPDATE " + t + " t SET " + q(c.LockedUntil) + " = now() + $2 * interval '1 microsecond', " +
			q(c.Attempt) + " = t." + q(c.Attempt) + " + 1 WHERE t." + q(c.ID) + " IN (SELECT s." + q(c.ID) + " FROM " + t +
			" s WHERE " + ready("s") + " ORDER BY " + order("s") + " LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING " + sel("t")
		st.extend = "UPDATE " + t + " SET " + q(c.LockedUntil) + " = now() + $3 * interval '1 microsecond' WHERE " + q(c.ID) +
			" = ANY($1::bigint[]) AND " + q(c.LockedUntil) + " = $2 RETURNING " + q(c.ID) + ", " + q(c.LockedUntil)
		st.rescue = "UPDATE " + t + " SET " + q(c.LockedUntil) + " = NULL WHERE " + q(c.LockedUntil) + " < now()"
	case Advisory:
		// Lock up to $3 keys among the heads of the ready set (each key
		// once: a session advisory lock is reentrant), then read each
		// locked key's oldest row in a later statement, whose snapshot
		// sees every settlement committed before the lock was released.
		st.lock = "WITH c AS MATERIALIZED (SELECT DISTINCT ON (k) k FROM (SELECT t." + q(c.Key) + " AS k FROM " + t +
			" t WHERE " + ready("t") + " ORDER BY " + order("t") + " LIMIT $2) x) SELECT k FROM c WHERE pg_try_advisory_lock(hashtext($1), hashtext(k)) LIMIT $3"
		// The attempt is counted at claim, under the key's lock.
		st.heads = "UPDATE " + t + " t SET " + q(c.Attempt) + " = t." + q(c.Attempt) + " + 1 FROM (SELECT h." + q(c.ID) +
			" AS id FROM unnest($1::text[]) AS u(k) CROSS JOIN LATERAL (SELECT " + q(c.ID) + ", " + q(c.RunAt) + " FROM " + t +
			" h WHERE h." + q(c.Key) + " = u.k ORDER BY h." + q(c.ID) + " LIMIT 1) h WHERE h." + q(c.RunAt) + " <= now()) x WHERE t." +
			q(c.ID) + " = x.id AND t." + q(c.RunAt) + " <= now() RETURNING " + sel("t") // rechecked on a row changed meanwhile
		st.unlock = "SELECT count(*) FROM unnest($2::text[]) AS u(k) WHERE pg_advisory_unlock(hashtext($1), hashtext(k))"
	}
	fence, ret := "", ""
	if s.Form == Lease {
		fence = " AND t." + q(c.LockedUntil) + " = $2"
		ret = " RETURNING t." + q(c.ID)
	}
	st.del = "DELETE FROM " + t + " t WHERE t." + q(c.ID) + " = ANY($1::bigint[])" + fence + ret
	retrySet := q(c.RunAt) + " = now() + d.secs * interval '1 second'"
	switch s.Form {
	case Lease:
		retrySet += ", " + q(c.LockedUntil) + " = NULL"
	case RowLock: // nothing is written at claim: count the attempt now
		retrySet += ", " + q(c.Attempt) + " = t." + q(c.Attempt) + " + 1"
	}
	if c.LastError != "" {
		retrySet += ", " + q(c.LastError) + " = d.err"
	}
	dp := 2
	if s.Form == Lease {
		dp = 3
	}
	st.retry = "UPDATE " + t + " t SET " + retrySet + " FROM unnest($1::bigint[], $" + itoa(dp) + "::float8[], $" + itoa(dp+1) +
		"::text[]) AS d(id, secs, err) WHERE t." + q(c.ID) + " = d.id" + fence + ret
	if s.Table.DeadLetter != "" {
		var copyCols []string
		for _, col := range []string{c.ID, c.Key, c.Type, c.ContentType, c.Payload, c.Headers, c.Attempt, c.Priority} {
			if col != "" {
				copyCols = append(copyCols, q(col))
			}
		}
		for _, col := range s.Table.RowColumns {
			copyCols = append(copyCols, q(col))
		}
		list := strings.Join(copyCols, ", ")
		tl := "t." + strings.Join(copyCols, ", t.")
		st.dead = "WITH d AS (SELECT * FROM unnest($1::bigint[], $" + itoa(dp) + "::text[]) AS d(id, reason)), m AS (DELETE FROM " + t +
			" t USING d WHERE t." + q(c.ID) + " = d.id" + fence + " RETURNING " + tl + ", d.reason) INSERT INTO " + ident(s.Table.DeadLetter) +
			" (" + list + ", reason) SELECT " + list + ", reason FROM m RETURNING " + q(c.ID)
	}
	return st
}

// claimer is one worker of a subscription: it claims, runs and settles.
type claimer struct {
	s     *Subscription
	b     *Broker
	r     runner
	wake  chan struct{}
	first bool // runs the lease rescue

	free     []*Delivery // reused deliveries
	live     []*Delivery // the current claim
	arena    []byte
	keys     []string
	lastType string
	lastCT   string
	xid      int64     // row lock: the claim's transaction id
	started  time.Time // row lock: the server's start time at the claim
	rescued  time.Time

	// settlement scratch
	delIDs, retryIDs, deadIDs []int64
	retrySecs                 []float64
	retryErrs, deadReasons    []string
	delD, retryD, deadD       []*Delivery
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
		if s.Form == Lease && c.first && time.Since(c.rescued) >= s.Lease/2 {
			c.rescue()
		}
		n, err := c.claimOnce()
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("pgbridge: claim failed", "subscription", s.Name, "err", err)
		}
		if err == nil && n >= s.Batch {
			continue // more may be ready
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

func (c *claimer) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
}

func (c *claimer) rescue() {
	c.rescued = time.Now()
	ctx, cancel := c.ctx()
	defer cancel()
	if _, err := c.b.pool.Exec(ctx, c.s.sql.rescue); err != nil && c.b.ctx.Err() == nil {
		c.b.log.Warn("pgbridge: lease rescue failed", "subscription", c.s.Name, "err", err)
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
		if s.Form == Lease {
			d.conn = nil
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
			for i := 8; i < 8+n; i++ {
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
	c.r.reset()
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

// acquire takes a connection; done returns it, closing it first unless ok
// (a connection in an unknown state — a failed transaction, advisory locks
// still held — is never reused).
func (c *claimer) acquire(ctx context.Context) (*pgx.Conn, func(ok bool), error) {
	pc, err := c.b.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return pc.Conn(), func(ok bool) {
		if !ok {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			pc.Conn().Close(cctx)
			cancel()
		}
		pc.Release()
	}, nil
}

func (c *claimer) claimRowLock() (n int, err error) {
	b, s := c.b, c.s
	ctx, cancel := c.ctx()
	defer cancel()
	conn, done, err := c.acquire(ctx)
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	var bt pgx.Batch
	bt.Queue("BEGIN")
	bt.Queue(s.sql.claim, s.Batch)
	br := conn.SendBatch(ctx, &bt)
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
		_, err = conn.Exec(ctx, "COMMIT")
		ok = err == nil
		return 0, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	c.run()
	// The settlement and the commit go in one round trip; a failure of any
	// statement (the handler's own, in the claim's transaction, included)
	// rolls the whole claim back.
	sctx, scancel := c.ctx()
	defer scancel()
	var st pgx.Batch
	stmts := c.queueSettle(&st, time.Time{})
	st.Queue("COMMIT")
	br = conn.SendBatch(sctx, &st)
	var serr error
	for i := 0; i <= stmts; i++ {
		if _, err := br.Exec(); err != nil && serr == nil {
			serr = err
		}
	}
	if err := br.Close(); err != nil && serr == nil {
		serr = err
	}
	if serr == nil && conn.PgConn().TxStatus() != 'I' {
		serr = errors.New("transaction did not commit")
	}
	var pge *pgconn.PgError
	if serr != nil && !errors.As(serr, &pge) && c.xid != 0 {
		// No statement was refused by the server: the connection ended,
		// maybe after COMMIT arrived. Close it (so its backend ends the
		// transaction) and ask the server what became of it.
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		ccancel()
		committed, rerr := c.commitFate(c.xid)
		switch {
		case rerr != nil:
			b.stats.unknown.Add(1)
			c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", errors.Join(ErrOutcomeUnknown, serr, rerr)))
			return n, nil
		case committed:
			c.report(nil, nil)
			return n, nil
		}
	}
	if serr != nil {
		b.stats.rollbacks.Add(1)
		b.obs.RolledBack(s.Name, n)
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", errors.Join(ErrBatchRolledBack, serr)))
		return n, nil
	}
	ok = true
	c.report(nil, nil)
	return n, nil
}

// commitFate asks, on another connection, whether transaction xid committed,
// waiting while its backend has not yet ended it.
func (c *claimer) commitFate(xid int64) (bool, error) {
	ctx, cancel := c.ctx()
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
	ctx, cancel := c.ctx()
	defer cancel()
	conn, done, err := c.acquire(ctx)
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	rows, err := conn.Query(ctx, s.sql.lock, s.Table.Name, s.Batch*4+8, s.Batch)
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
	rows, err = conn.Query(ctx, s.sql.heads, c.keys)
	if err != nil {
		return 0, err
	}
	n, err = c.read(rows, conn)
	rows.Close()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		_, err := conn.Exec(ctx, s.sql.unlock, s.Table.Name, c.keys)
		ok = err == nil
		return 0, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	c.run()
	// The settlement and the unlock go in one round trip (one implicit
	// transaction). A claimer that takes a key between the unlock and the
	// commit cannot run a settled row: its heads statement is an UPDATE,
	// which waits for this transaction and then skips a deleted row or one
	// whose run_at moved on.
	sctx, scancel := c.ctx()
	defer scancel()
	var st pgx.Batch
	stmts := c.queueSettle(&st, time.Time{})
	st.Queue(s.sql.unlock, s.Table.Name, c.keys)
	br := conn.SendBatch(sctx, &st)
	var serr error
	for i := 0; i <= stmts; i++ {
		if _, err := br.Exec(); err != nil && serr == nil {
			serr = err
		}
	}
	if err := br.Close(); err != nil && serr == nil {
		serr = err
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
	ctx, cancel := c.ctx()
	defer cancel()
	rows, err := b.pool.Query(ctx, s.sql.claim, s.Batch, s.Lease.Microseconds())
	if err != nil {
		return 0, err
	}
	n, err = c.read(rows, nil)
	rows.Close()
	if err != nil || n == 0 {
		return n, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	token := c.live[0].token
	ext := &extender{c: c, token: token}
	ext.timer = time.AfterFunc(s.Lease/2, ext.extend)
	c.run()
	token = ext.stop()
	sctx, scancel := c.ctx()
	defer scancel()
	var st pgx.Batch
	stmts := c.queueSettle(&st, token)
	br := b.pool.SendBatch(sctx, &st)
	settled := map[int64]bool{}
	var serr error
	for i := 0; i < stmts; i++ {
		rows, err := br.Query()
		if err != nil {
			serr = err
			break
		}
		for rows.Next() {
			id, _ := rawInt64(rows.RawValues()[0], rows.FieldDescriptions()[0].Format, rows.FieldDescriptions()[0].DataTypeOID)
			settled[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil && serr == nil {
			serr = err
		}
	}
	if err := br.Close(); err != nil && serr == nil {
		serr = err
	}
	if serr != nil {
		// Not settled: the leases expire and the rows are claimed again.
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", serr))
		return n, serr
	}
	c.report(settled, nil)
	return n, nil
}

// extender keeps a lease claim's rows leased while the handler runs.
type extender struct {
	c       *claimer
	mu      sync.Mutex
	token   time.Time
	timer   *time.Timer
	stopped bool
}

func (e *extender) extend() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	c := e.c
	ids := make([]int64, 0, len(c.live))
	for _, d := range c.live {
		if !d.LeaseLost() {
			ids = append(ids, d.ID)
		}
	}
	ctx, cancel := c.ctx()
	defer cancel()
	rows, err := c.b.pool.Query(ctx, c.s.sql.extend, ids, e.token, c.s.Lease.Microseconds())
	if err != nil {
		c.b.log.Warn("pgbridge: lease extension failed", "subscription", c.s.Name, "err", err)
		e.timer.Reset(c.s.Lease / 4)
		return
	}
	kept := map[int64]bool{}
	var tok time.Time
	for rows.Next() {
		raw, fd := rows.RawValues(), rows.FieldDescriptions()
		id, _ := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
		tok, _ = rawTime(raw[1], fd[1].Format, fd[1].DataTypeOID)
		kept[id] = true
	}
	rows.Close()
	if rows.Err() != nil {
		e.timer.Reset(c.s.Lease / 4)
		return
	}
	for _, d := range c.live {
		if !kept[d.ID] && !d.LeaseLost() {
			d.markLost()
		} else if kept[d.ID] {
			d.setToken(tok)
		}
	}
	if len(kept) > 0 {
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

// run runs the handler over the claim's deliveries.
func (c *claimer) run() {
	c.r.run(c.b.ctx, c.live)
}

// queueSettle queues the settlement statements of the claim (array
// statements, one per outcome kind present) and returns how many.
func (c *claimer) queueSettle(bt *pgx.Batch, token time.Time) int {
	s := c.s
	c.delIDs, c.retryIDs, c.deadIDs = c.delIDs[:0], c.retryIDs[:0], c.deadIDs[:0]
	c.retrySecs, c.retryErrs, c.deadReasons = c.retrySecs[:0], c.retryErrs[:0], c.deadReasons[:0]
	for _, d := range c.live {
		o := d.outcome
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
	if len(c.delIDs) > 0 {
		if lease {
			bt.Queue(s.sql.del, c.delIDs, token)
		} else {
			bt.Queue(s.sql.del, c.delIDs)
		}
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
// the whole claim's failure (nothing settled).
func (c *claimer) report(settled map[int64]bool, err error) {
	b, s := c.b, c.s
	now := nanotime()
	for _, d := range c.live {
		derr := err
		if err == nil && settled != nil && !settled[d.ID] {
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
