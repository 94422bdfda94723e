package pgbridge

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
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
	// Workers is the number of claimers (default 1). In the row-lock and
	// advisory forms each holds a connection while it works on a claim, so
	// Subscribe refuses workers that, with the broker's other such
	// subscriptions, would hold every connection of the pool.
	Workers int
	// Batch is the most rows one claim takes (default 1: one row for each
	// free worker).
	Batch int
	// Concurrency is the most rows of one claim a Messages or Rows handler
	// runs at once (default min(Batch, DefaultConcurrency); 1: one after
	// another). Rows of one key run one after another in claim order —
	// their id order — and different keys side by side, so a handler must
	// be safe for concurrent use (it is already with Workers > 1). In the
	// row-lock form they share the claim's transaction: Delivery.Tx runs
	// one statement at a time. Objects always sends a claim's rows to
	// their objects at once; Batches gets the whole claim.
	Concurrency int
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
	// that crashed the process every time). Needs Table.DeadLetter. 0: the
	// default, DefaultMaxAttempts with a dead-letter table, and no limit
	// without one (a row is then retried, RetryDelay apart, until it
	// succeeds: nothing is dropped); negative: no limit.
	MaxAttempts int
	// DecodePolicy settles rows whose payload does not decode.
	DecodePolicy DecodePolicy
	// DecodeRetryDelay is DecodeRetry's delay (default 1 min).
	DecodeRetryDelay time.Duration
	// RetryDelay is the delay of a retry whose delay the handler did not
	// choose — Retry, a handler's error in Objects, a panic, a row-lock
	// claim the server rolled back — given the row's attempt (1 on its first
	// run). Default Backoff.
	RetryDelay func(attempt int) time.Duration
	// RescanInterval: an unordered row-lock or lease subscription claims
	// from where its latest claim began, and from the start of the table
	// at least this often (default 200 ms) — see floor in the source.
	RescanInterval time.Duration
	// HandlerTimeout bounds a claim's run: the handler's context ends
	// after it (default DefaultHandlerTimeout; negative: no deadline). A
	// handler that ignores its context keeps its claim: in the row-lock
	// form its transaction stays open, in the advisory form its key stays
	// locked; in the lease form the lease is no longer extended past the
	// deadline, so the row is claimed again once its lease ends (and the
	// late settlement changes nothing: ErrLeaseLost).
	HandlerTimeout time.Duration
	// OnSettled, if set, is called after each row's settlement with its
	// outcome and nil, ErrLeaseLost or ErrBatchRolledBack.
	OnSettled func(d *Delivery, o Outcome, err error)

	b        *Broker
	h        Handler
	cols     Columns
	channel  string
	sql      statements
	mu       sync.Mutex
	wakes    []chan struct{}
	claimers []*claimer
	running  bool
	floor    floor
	rescueAt atomic.Int64 // lease form: when the next rescue is due (unix ns)
	paused   atomic.Bool
}

// Pause stops the subscription claiming rows, without stopping the broker
// or its other subscriptions: claims in work finish and settle, and no
// claimer takes another until Resume. Publishing into its table goes on.
func (s *Subscription) Pause() { s.paused.Store(true) }

// Resume makes a paused subscription claim again, at once.
func (s *Subscription) Resume() {
	s.paused.Store(false)
	s.wake()
}

// Paused reports whether the subscription is paused.
func (s *Subscription) Paused() bool { return s.paused.Load() }

type statements struct {
	claim, claimFrom, claimOne, lockFrom, heads, heads1, unlock1, del1, lock, unlock, del, retry, dead, extend, rescue string
	backlog                                                                                                            string
}

// Subscribe adds a subscription running handler h. It starts with the
// broker (at once if the broker has started).
//
// Configuration errors (NotConfigured, InvalidOperation): no table; MaxAttempts,
// the DecodeDeadLetter policy without a dead-letter table; a row-mode
// handler on a table with a payload column or a payload handler on one
// without; the lease form without a locked_until column; row-lock and
// advisory workers (of every subscription of the broker) that would hold
// every connection of the pool while their handlers run — one must stay
// free.
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
	switch {
	case s.MaxAttempts == 0 && s.Table.DeadLetter != "":
		s.MaxAttempts = DefaultMaxAttempts
	case s.MaxAttempts < 0:
		s.MaxAttempts = 0 // no limit
	}
	s.Workers = max(s.Workers, 1)
	s.Batch = max(s.Batch, 1)
	if s.Concurrency <= 0 {
		s.Concurrency = min(s.Batch, DefaultConcurrency)
	}
	if s.Lease <= 0 {
		s.Lease = 30 * time.Second
	}
	if s.PollInterval <= 0 {
		s.PollInterval = time.Second
	}
	if s.DecodeRetryDelay <= 0 {
		s.DecodeRetryDelay = time.Minute
	}
	if s.RescanInterval <= 0 {
		s.RescanInterval = 200 * time.Millisecond
	}
	switch {
	case s.HandlerTimeout == 0:
		s.HandlerTimeout = DefaultHandlerTimeout
	case s.HandlerTimeout < 0:
		s.HandlerTimeout = 0 // none
	}
	s.floor.on = !s.Ordered || s.Form == Advisory
	s.floor.every = int64(s.RescanInterval)
	s.b, s.h, s.channel = b, h, channelName(s.Table.Name)
	s.sql = s.build()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	if err := b.checkBudget(s); err != nil {
		return err
	}
	if b.started {
		if err := s.check(); err != nil {
			return err
		}
	}
	b.subs = append(b.subs, s)
	if b.started {
		s.start()
	}
	return nil
}

// holdsConnections reports whether the subscription's claimers hold a
// connection while their handlers run (row lock: the claim's
// transaction; advisory: the keys' locks).
func (s *Subscription) holdsConnections() bool { return s.Form != Lease }

// checkBudget refuses a subscription whose claimers, with those of the
// broker's other subscriptions that hold a connection while their
// handlers run, would take every connection of the pool: a handler that
// publishes through the pool (Send with the pool, an Objects reply in the
// lease form), a lease extension, the question of a lost commit's fate
// would then wait for a connection only a settlement can free — for ever.
// One connection is left free. b.mu is held.
func (b *Broker) checkBudget(s *Subscription) error {
	if !s.holdsConnections() {
		return nil
	}
	held := s.Workers
	for _, o := range b.subs {
		if o.holdsConnections() {
			held += o.Workers
		}
	}
	if mx := int(b.pool.Config().MaxConns); held >= mx {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Subscribe",
			"subscription "+s.Name+": the row-lock and advisory subscriptions' workers ("+itoa(held)+
				") hold a connection each while their handlers run, and the pool has "+itoa(mx)+
				": it needs at least one more (raise the pool's MaxConns or lower Workers)")
	}
	return nil
}

// check has the server parse and describe each of the subscription's
// statements, executing none: a table or column they name that does not
// exist is NotFound, here, rather than a failure of every claim after it.
func (s *Subscription) check() error {
	const op = "pgbridge.Subscribe"
	ctx, cancel := context.WithTimeout(s.b.ctx, s.b.cfg.StatementTimeout)
	defer cancel()
	c, err := s.b.pool.Acquire(ctx)
	if err != nil {
		return payload.Wrap(payload.Unavailable, op, err)
	}
	defer c.Release()
	st := &s.sql
	for _, q := range []string{st.claim, st.claimFrom, st.claimOne, st.lock, st.lockFrom, st.heads, st.heads1,
		st.del, st.del1, st.retry, st.dead, st.extend, st.rescue, st.backlog} {
		if q == "" {
			continue
		}
		if _, err := c.Conn().PgConn().Prepare(ctx, "", q, nil); err != nil {
			return &payload.Error{Kind: dbKind(err), Op: op,
				Detail: "subscription " + s.Name + " on table " + s.Table.Name, Err: err}
		}
	}
	return nil
}

func (s *Subscription) retryDelay(attempt int) time.Duration {
	if s.RetryDelay != nil {
		return s.RetryDelay(attempt)
	}
	return Backoff(attempt)
}

// DefaultMaxAttempts is Subscription.MaxAttempts's default with a
// dead-letter table: with Backoff, a row that always fails is retried
// for about three weeks before it is dead-lettered.
const DefaultMaxAttempts = 25

// DefaultConcurrency caps Subscription.Concurrency's default.
const DefaultConcurrency = 256

// DefaultHandlerTimeout is Subscription.HandlerTimeout's default.
const DefaultHandlerTimeout = time.Minute

// maxBackoff caps Backoff.
const maxBackoff = 24 * time.Hour

// Backoff is the default retry delay: attempt⁴ seconds (1 s, 16 s, 81 s,
// 4 min, 10 min, ... 4 days at the 25th attempt, capped at 24 h), with
// ±10 % jitter so that rows that failed together do not all come back at
// once.
func Backoff(attempt int) time.Duration {
	a := float64(max(attempt, 1))
	d := min(time.Duration(a*a*a*a*float64(time.Second)), maxBackoff)
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

// start starts the claimers; b.mu is held.
func (s *Subscription) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	s.running = true
	for i := 0; i < s.Workers; i++ {
		c := &claimer{s: s, b: s.b, r: s.h.newRunner(s.b, s), wake: make(chan struct{}, 1),
			settled: map[int64]bool{}}
		s.wakes = append(s.wakes, c.wake)
		s.claimers = append(s.claimers, c)
		s.b.wg.Add(1)
		go c.loop()
	}
}

// rescueDue reports whether the lease rescue is due at now, and if so
// takes it: whichever claimer of the subscription comes to its next claim
// first runs it, every PollInterval but at most once a second (and at
// least every half lease), so a row whose lease ran out waits about that
// long, whatever the other claimers are running.
func (s *Subscription) rescueDue(now int64) bool {
	at := s.rescueAt.Load()
	if now < at {
		return false
	}
	every := min(max(s.PollInterval, time.Second), s.Lease/2)
	return s.rescueAt.CompareAndSwap(at, now+int64(every))
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
		if c.Priority != "" {
			cols = append(cols, a+q(c.Priority)+"::integer")
		} else {
			cols = append(cols, "0")
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
	// Claim order: priority descending, then id — written as
	// (-priority, id) so that one index (Migrate's ready index) serves
	// both the order and the position a claim continues from (floor).
	order := func(alias string) string {
		if c.Priority != "" {
			return "(-" + alias + "." + q(c.Priority) + "::integer), " + alias + "." + q(c.ID)
		}
		return alias + "." + q(c.ID)
	}
	from := func(alias string, arg int) string {
		if c.Priority != "" {
			return " AND ((-" + alias + "." + q(c.Priority) + "::integer), " + alias + "." + q(c.ID) + ") >= ($" + itoa(arg) + "::integer, $" + itoa(arg+1) + "::bigint)"
		}
		return " AND " + alias + "." + q(c.ID) + " >= $" + itoa(arg) + "::bigint"
	}
	// The batch size is a literal: with LIMIT $1 Postgres plans every
	// execution anew (a custom plan each time), which costs as much as the
	// claim itself.
	limit := " LIMIT " + itoa(s.Batch)
	var st statements
	switch s.Form {
	case RowLock:
		st.claim = "SELECT " + sel("t") + " FROM " + t + " t WHERE " + ready("t") + " ORDER BY " + order("t") + limit + " FOR UPDATE SKIP LOCKED"
		st.claimFrom = "SELECT " + sel("t") + " FROM " + t + " t WHERE " + ready("t") + from("t", 1) + " ORDER BY " + order("t") + limit + " FOR UPDATE SKIP LOCKED"
		// One row of a rolled-back batch, claimed again on its own.
		st.claimOne = "SELECT " + sel("t") + " FROM " + t + " t WHERE " + ready("t") + " AND t." + q(c.ID) + " = $1::bigint FOR UPDATE SKIP LOCKED"
	case Lease:
		// id = ANY(ARRAY(subquery)), not IN (subquery): with a large
		// batch the planner may turn IN into a hash semi-join over the
		// whole table.
		lease := func(extra string) string {
			return "UPDATE " + t + " t SET " + q(c.LockedUntil) + " = now() + $1 * interval '1 microsecond', " +
				q(c.Attempt) + " = t." + q(c.Attempt) + " + 1 WHERE t." + q(c.ID) + " = ANY(ARRAY(SELECT s." + q(c.ID) + " FROM " + t +
				" s WHERE " + ready("s") + extra + " ORDER BY " + order("s") + limit + " FOR UPDATE SKIP LOCKED)) RETURNING " + sel("t")
		}
		st.claim, st.claimFrom = lease(""), lease(from("s", 2))
		st.extend = "UPDATE " + t + " SET " + q(c.LockedUntil) + " = now() + $3 * interval '1 microsecond' WHERE " + q(c.ID) +
			" = ANY($1::bigint[]) AND " + q(c.LockedUntil) + " = $2 RETURNING " + q(c.ID) + ", " + q(c.LockedUntil)
		st.rescue = "UPDATE " + t + " SET " + q(c.LockedUntil) + " = NULL WHERE " + q(c.LockedUntil) + " < now()"
	case Advisory:
		// Lock up to Batch keys among the heads of the ready set (each key
		// once: a session advisory lock is reentrant), then read each
		// locked key's oldest row in a later statement, whose snapshot
		// sees every settlement committed before the lock was released.
		lock := func(extra string) string {
			return "WITH c AS MATERIALIZED (SELECT DISTINCT ON (k) k FROM (SELECT t." + q(c.Key) + " AS k FROM " + t +
				" t WHERE " + ready("t") + extra + " ORDER BY " + order("t") + " LIMIT " + itoa(4*s.Batch+8) +
				") x) SELECT k FROM c WHERE pg_try_advisory_lock(hashtext($1), hashtext(k))" + limit
		}
		st.lock, st.lockFrom = lock(""), lock(from("t", 2))
		// The attempt is counted at claim, under the key's lock.
		heads := func(keys string) string {
			return "UPDATE " + t + " t SET " + q(c.Attempt) + " = t." + q(c.Attempt) + " + 1 FROM (SELECT h." + q(c.ID) +
				" AS id FROM " + keys + " CROSS JOIN LATERAL (SELECT " + q(c.ID) + ", " + q(c.RunAt) + " FROM " + t +
				" h WHERE h." + q(c.Key) + " = u.k ORDER BY h." + q(c.ID) + " LIMIT 1) h WHERE h." + q(c.RunAt) + " <= now()) x WHERE t." +
				q(c.ID) + " = x.id AND t." + q(c.RunAt) + " <= now() RETURNING " + sel("t") // rechecked on a row changed meanwhile
		}
		// One key: scalar parameters, so the statements are planned once
		// (an array of unknown length is planned anew each time).
		st.heads, st.heads1 = heads("unnest($1::text[]) AS u(k)"), heads("(SELECT $1::text AS k) u")
		st.unlock1 = "SELECT pg_advisory_unlock(hashtext($1), hashtext($2::text))"
		st.unlock = "SELECT count(*) FROM unnest($2::text[]) AS u(k) WHERE pg_advisory_unlock(hashtext($1), hashtext(k))"
	}
	fence, ret := "", ""
	if s.Form == Lease {
		fence = " AND t." + q(c.LockedUntil) + " = $2"
		ret = " RETURNING t." + q(c.ID)
	}
	st.del = "DELETE FROM " + t + " t WHERE t." + q(c.ID) + " = ANY($1::bigint[])" + fence + ret
	// One row: a plain equality, planned once (= ANY of an array of unknown
	// size is planned anew every time).
	st.del1 = "DELETE FROM " + t + " t WHERE t." + q(c.ID) + " = $1::bigint" + fence + ret
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
	// The backlog: the claimable rows (counted up to backlogCap) and how
	// long the next one to be claimed has been ready.
	st.backlog = "SELECT (SELECT count(*) FROM (SELECT 1 FROM " + t + " s WHERE " + ready("s") + " LIMIT " + itoa(backlogCap) +
		") x), (SELECT extract(epoch FROM now() - s." + q(c.RunAt) + ")::float8 FROM " + t + " s WHERE " + ready("s") +
		" ORDER BY " + order("s") + " LIMIT 1)"
	return st
}

// floor is where an unordered subscription's claims continue from: the
// claim-order position (-priority, id) of the first row of the latest
// claim. Claims from the start walk over the index entries of rows deleted
// since the last vacuum — on a queue that drains fast, hundreds of buffers
// per claim — and a claim from the floor descends past them. Rows that
// become claimable before the floor (a retry's delay ran out, a rolled-back
// claim, a row of higher priority) are found by a claim from the start:
// every RescanInterval, after a claim from the floor found nothing, and
// after a failed claim. Ordered row-lock and lease subscriptions claim from
// the start every time: a key's next row becomes claimable when the row
// before it settles, behind any floor. The advisory form uses the floor
// only to find keys (it then takes each key's oldest row, wherever it is).
type floor struct {
	mu       sync.Mutex
	on       bool  // the subscription uses a floor
	every    int64 // rescan interval, ns
	set      bool
	p        int32 // -priority
	id       int64
	rescanAt int64
}

// get returns the floor to claim from (set false: from the start).
func (f *floor) get(now int64) (set bool, p int32, id int64) {
	if !f.on {
		return false, 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if now >= f.rescanAt {
		f.rescanAt = now + f.every
		return false, 0, 0
	}
	return f.set, f.p, f.id
}

// advance sets the floor to the first position of a claim.
func (f *floor) advance(p int32, id int64) {
	if !f.on {
		return
	}
	f.mu.Lock()
	f.set, f.p, f.id = true, p, id
	f.mu.Unlock()
}

func (f *floor) reset() {
	if !f.on {
		return
	}
	f.mu.Lock()
	f.set = false
	f.mu.Unlock()
}
