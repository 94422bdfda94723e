package pgbridge

// The raw pgx baselines of bench_test.go: loops that run the statements a
// subscription builds ((*Subscription).build, (*Broker).insertSQL) with pgx
// and pgxpool directly — the same statements, the same batches (pipelined
// round trips), the same worker counts and the same poll interval as the
// subscription they are compared with, and nothing else: no contexts with
// timeouts, no observer, no stats, no lease extension timer, no codec
// look-up by content type. With a handler that waits (rawLoop.work) a loop
// runs a claim's rows as a Messages handler with Subscription.Concurrency
// does: up to rawLoop.concurrency at once, a key's rows one after another.
//
// The fixed columns are read from the driver's raw values (as the bridge
// reads them); payloads are decoded with the same codec (payload.JSON) into
// a fresh value per row, and the same per-row function runs as in the
// bridge's handler.

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rawSQL returns the statements (*Subscription).build writes for a
// subscription of form f on t taking batch rows a claim — the raw loops run
// exactly these. For the default columns they are:
//
//   - row lock: SELECT <id, key, attempt, type, content_type, payload,
//     headers, locked_until, …> … ORDER BY priority DESC, id LIMIT $1 FOR
//     UPDATE SKIP LOCKED, in one batch after BEGIN; then DELETE … WHERE id
//     = ANY($1::bigint[]) and COMMIT in another batch;
//   - lease: UPDATE … SET locked_until = now() + $2 µs, attempt = attempt + 1
//     WHERE id IN (SELECT … LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING <the
//     same columns>; then DELETE … = ANY($1) AND locked_until = $2
//     RETURNING id, fenced on the token;
//   - advisory: the lock statement (pg_try_advisory_lock on up to $3 keys
//     among the first $2 ready rows), the heads statement (each locked key's
//     oldest row, its attempt counted), then the DELETE and the unlock
//     statement in one batch — three round trips on one held connection.
func rawSQL(t Table, f Form, batch int) statements {
	s := &Subscription{Table: t, Form: f, Batch: batch}
	s.cols = t.cols()
	return s.build()
}

// rawInsert is the publishers' insert into t (no pg_notify).
func rawInsert(t Table) string {
	return (&Broker{}).insertSQL(t, t.cols(), 0)
}

// newRawLoop is the raw loop of an unordered subscription of form f on t
// with workers claimers taking batch rows a claim.
func newRawLoop(pool *pgxpool.Pool, t Table, f Form, workers, batch int, chk *drainCheck) *rawLoop {
	l := &rawLoop{pool: pool, table: t.Name, sql: rawSQL(t, f, batch), workers: workers, batch: batch,
		poll: benchPoll, chk: chk}
	l.floor.on = true // unordered: every form claims from the floor
	return l
}

// rawLoop is one raw pgx claimer set: workers goroutines that claim up to
// batch rows at a time until chk has seen every row, sleeping poll after a
// claim that found fewer than batch rows (as a subscription's claimer does).
type rawLoop struct {
	pool    *pgxpool.Pool
	table   string     // the subscription's table (the advisory lock's namespace)
	sql     statements // rawSQL of the subscription compared with
	workers int
	batch   int
	poll    time.Duration
	chk     *drainCheck
	// reply, if set, runs for each row inside the row-lock transaction,
	// on the claim's connection, after the row's per-row function (the
	// reply round trip's insert).
	reply func(ctx context.Context, conn *pgx.Conn, c *rawClaim, i int) error
	// work, if set, is how long each row's per-row function waits
	// (time.Sleep) before it counts the row; a claim's rows then run up to
	// concurrency at once (handleWork). Not with reply.
	work        time.Duration
	concurrency int

	floor rawFloor
}

// rawRescan is Subscription.RescanInterval's default.
const rawRescan = 200 * time.Millisecond

// rawFloor mirrors a subscription's floor (subscription.go): an unordered
// row-lock or lease claim continues from the claim-order position
// (-priority, id) of the first row of the latest claim (the claimFrom
// statement), and claims from the start every rawRescan, after a claim
// from the floor found fewer rows than it asked for, and after a failure.
type rawFloor struct {
	mu       sync.Mutex
	on       bool
	set      bool
	p        int32
	id       int64
	rescanAt time.Time
}

func (f *rawFloor) get() (bool, int32, int64) {
	if !f.on {
		return false, 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); !now.Before(f.rescanAt) {
		f.rescanAt = now.Add(rawRescan)
		return false, 0, 0
	}
	return f.set, f.p, f.id
}

func (f *rawFloor) advance(p int32, id int64) {
	if f.on {
		f.mu.Lock()
		f.set, f.p, f.id = true, p, id
		f.mu.Unlock()
	}
}

func (f *rawFloor) reset() {
	if f.on {
		f.mu.Lock()
		f.set = false
		f.mu.Unlock()
	}
}

// rawClaim is one worker's reused claim state.
type rawClaim struct {
	ids    []int64
	keys   []string
	msgs   []benchJob
	token  time.Time
	locked []string // advisory: the keys locked
	buf    []byte   // reply: the encode buffer
	dst    []any    // row mode: Rows.Scan's destinations, into row
	chains [][]int  // work: the claim's row indexes by key, in claim order
	byKey  map[string]int
	row    struct {
		id, prio  int64
		key, name string
		amount    int32
	}

	// The claimed rows' columns, found by name in the first result.
	colsSet                                 bool
	colID, colKey, colPayload, colLU, colPr int

	// The floor: where this claim began (fromSet), and the first position
	// among its rows.
	fromSet bool
	fromP   int32
	fromID  int64
	minSet  bool
	minP    int32
	minID   int64
}

func (c *rawClaim) reset() {
	c.ids, c.keys, c.locked = c.ids[:0], c.keys[:0], c.locked[:0]
	clear(c.msgs)
	c.msgs = c.msgs[:0]
	c.minSet = false
}

// columns finds the columns the raw loops read in a result's fields.
func (c *rawClaim) columns(fd []pgconn.FieldDescription) {
	if c.colsSet {
		return
	}
	c.colsSet = true
	c.colID, c.colKey, c.colPayload, c.colLU, c.colPr = -1, -1, -1, -1, -1
	for i, f := range fd {
		switch f.Name {
		case "id":
			c.colID = i
		case "key":
			c.colKey = i
		case "payload":
			c.colPayload = i
		case "locked_until":
			c.colLU = i
		case "priority":
			c.colPr = i
		}
	}
}

// position records a claimed row's claim-order position (-priority, id).
func (c *rawClaim) position(prio, id int64) {
	if p := int32(-prio); !c.minSet || p < c.minP || p == c.minP && id < c.minID {
		c.minSet, c.minP, c.minID = true, p, id
	}
}

// read reads one claimed row of the default columns: id, key, lease token,
// and the payload decoded into a fresh message.
func (c *rawClaim) read(rows pgx.Rows) error {
	c.columns(rows.FieldDescriptions())
	raw := rows.RawValues()
	id := int64(binary.BigEndian.Uint64(raw[c.colID]))
	c.ids = append(c.ids, id)
	c.keys = append(c.keys, string(raw[c.colKey]))
	if c.colLU >= 0 && raw[c.colLU] != nil {
		us := int64(binary.BigEndian.Uint64(raw[c.colLU]))
		c.token = pgEpoch.Add(time.Duration(us) * time.Microsecond)
	}
	if c.colPr >= 0 {
		c.position(int64(int32(binary.BigEndian.Uint32(raw[c.colPr]))), id)
	}
	c.msgs = append(c.msgs, benchJob{})
	return payload.JSON.Decode(raw[c.colPayload], &c.msgs[len(c.msgs)-1])
}

// run runs the workers until every row was handled, and returns when each
// has settled its last claim.
func (l *rawLoop) run(b *testing.B, claim func(ctx context.Context, c *rawClaim) (int, error)) {
	var wg sync.WaitGroup
	errs := make(chan error, l.workers)
	for range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &rawClaim{}
			timer := time.NewTimer(0)
			<-timer.C
			for {
				c.reset()
				c.fromSet, c.fromP, c.fromID = l.floor.get()
				n, err := claim(bg, c)
				if c.minSet {
					l.floor.advance(c.minP, c.minID)
				}
				if err != nil {
					errs <- err
					return
				}
				if n >= l.batch {
					continue
				}
				if c.fromSet {
					l.floor.reset() // nothing more from the floor on: look from the start
					continue
				}
				timer.Reset(l.poll)
				select {
				case <-l.chk.finished:
					timer.Stop()
					return
				case <-timer.C:
				}
			}
		}()
	}
	select {
	case <-l.chk.finished:
	case err := <-errs:
		b.Fatal(err) // the other workers end when the pool closes
	case <-time.After(3 * time.Minute):
		b.Fatalf("timed out: %d of %d rows handled", l.chk.done.Load(), l.chk.n)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// handle runs the per-row function (and the reply) over a claim.
func (l *rawLoop) handle(ctx context.Context, conn *pgx.Conn, c *rawClaim) error {
	if l.work > 0 {
		l.handleWork(c)
		return nil
	}
	for i := range c.ids {
		l.chk.hit(c.ids[i], c.msgs[i].N)
		if l.reply != nil {
			if err := l.reply(ctx, conn, c, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// handleWork runs the per-row function over a claim, each row after a wait
// of l.work, up to l.concurrency rows at once: the rows of one key one after
// another in claim order, different keys side by side, each goroutine taking
// the next key's rows when it has run a key's — as a subscription's
// Messages handler runs a claim's rows with Subscription.Concurrency.
func (l *rawLoop) handleWork(c *rawClaim) {
	one := func(i int) {
		time.Sleep(l.work)
		l.chk.hit(c.ids[i], c.msgs[i].N)
	}
	if l.concurrency <= 1 || len(c.ids) <= 1 {
		for i := range c.ids {
			one(i)
		}
		return
	}
	if c.byKey == nil {
		c.byKey = map[string]int{}
	}
	clear(c.byKey)
	n := 0
	for i, k := range c.keys {
		j, ok := c.byKey[k]
		if !ok {
			j = n
			n++
			c.byKey[k] = j
			if j == len(c.chains) {
				c.chains = append(c.chains, nil)
			}
			c.chains[j] = c.chains[j][:0]
		}
		c.chains[j] = append(c.chains[j], i)
	}
	var next atomic.Int64
	run := func() {
		for {
			j := int(next.Add(1) - 1)
			if j >= n {
				return
			}
			for _, i := range c.chains[j] {
				one(i)
			}
		}
	}
	var wg sync.WaitGroup
	for range min(l.concurrency, n) - 1 {
		wg.Go(run)
	}
	run()
	wg.Wait()
}

// rowLock: one batch {BEGIN, claim}, the handler, one batch {DELETE, COMMIT}.
func (l *rawLoop) rowLock(ctx context.Context, c *rawClaim) (int, error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer pc.Release()
	conn := pc.Conn()
	var bt pgx.Batch
	bt.Queue("BEGIN")
	if c.fromSet {
		bt.Queue(l.sql.claimFrom, c.fromP, c.fromID)
	} else {
		bt.Queue(l.sql.claim)
	}
	br := conn.SendBatch(ctx, &bt)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, err
	}
	rows, err := br.Query()
	if err == nil {
		for rows.Next() {
			if err = c.read(rows); err != nil {
				break
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	n := len(c.ids)
	if n == 0 {
		_, err := conn.Exec(ctx, "COMMIT")
		return 0, err
	}
	if err := l.handle(ctx, conn, c); err != nil {
		return 0, err
	}
	var st pgx.Batch
	queueDel(&st, l.sql, c.ids)
	st.Queue("COMMIT")
	br = conn.SendBatch(ctx, &st)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return 0, err
		}
	}
	return n, br.Close()
}

// lease: the claim UPDATE … RETURNING on the pool, the handler, the fenced
// DELETE … RETURNING in a batch of one on the pool.
func (l *rawLoop) lease(leaseUs int64) func(ctx context.Context, c *rawClaim) (int, error) {
	return func(ctx context.Context, c *rawClaim) (int, error) {
		var rows pgx.Rows
		var err error
		if c.fromSet {
			rows, err = l.pool.Query(ctx, l.sql.claimFrom, leaseUs, c.fromP, c.fromID)
		} else {
			rows, err = l.pool.Query(ctx, l.sql.claim, leaseUs)
		}
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			if err = c.read(rows); err != nil {
				break
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil || len(c.ids) == 0 {
			return 0, err
		}
		n := len(c.ids)
		if err := l.handle(ctx, nil, c); err != nil {
			return 0, err
		}
		var st pgx.Batch
		queueDelFenced(&st, l.sql, c.ids, c.token)
		br := l.pool.SendBatch(ctx, &st)
		rows, err = br.Query()
		settled := 0
		if err == nil {
			for rows.Next() {
				settled++
			}
			rows.Close()
			err = rows.Err()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil && settled != n {
			return 0, errLeaseCount{want: n, got: settled}
		}
		return n, err
	}
}

type errLeaseCount struct{ want, got int }

func (e errLeaseCount) Error() string {
	return "raw lease: settled " + itoa(e.got) + " of " + itoa(e.want)
}

// advisory: lock keys, take their heads, then DELETE and unlock in one
// batch, on one held connection (without a head: unlock alone).
func (l *rawLoop) advisory(ctx context.Context, c *rawClaim) (int, error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer pc.Release()
	conn := pc.Conn()
	var rows pgx.Rows
	if c.fromSet {
		rows, err = conn.Query(ctx, l.sql.lockFrom, l.table, c.fromP, c.fromID)
	} else {
		rows, err = conn.Query(ctx, l.sql.lock, l.table)
	}
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		c.locked = append(c.locked, string(rows.RawValues()[0]))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(c.locked) == 0 {
		return 0, nil
	}
	if len(c.locked) == 1 {
		rows, err = conn.Query(ctx, l.sql.heads1, c.locked[0])
	} else {
		rows, err = conn.Query(ctx, l.sql.heads, c.locked)
	}
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		if err = c.read(rows); err != nil {
			break
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, err
	}
	n := len(c.ids)
	if n == 0 {
		var err error
		if len(c.locked) == 1 {
			_, err = conn.Exec(ctx, l.sql.unlock1, l.table, c.locked[0])
		} else {
			_, err = conn.Exec(ctx, l.sql.unlock, l.table, c.locked)
		}
		return 0, err
	}
	if err := l.handle(ctx, conn, c); err != nil {
		return 0, err
	}
	// The DELETE and the unlock in one round trip (one implicit
	// transaction).
	var st pgx.Batch
	queueDel(&st, l.sql, c.ids)
	if len(c.locked) == 1 {
		st.Queue(l.sql.unlock1, l.table, c.locked[0])
	} else {
		st.Queue(l.sql.unlock, l.table, c.locked)
	}
	br := conn.SendBatch(ctx, &st)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return 0, err
		}
	}
	return n, br.Close()
}

// rowMode: the row lock's round trips on rows_inbox, reading the row
// columns with pgx's Rows.Scan (nil skips a column).
func (l *rawLoop) rowMode(ctx context.Context, c *rawClaim) (int, error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer pc.Release()
	conn := pc.Conn()
	var bt pgx.Batch
	bt.Queue("BEGIN")
	if c.fromSet {
		bt.Queue(l.sql.claimFrom, c.fromP, c.fromID)
	} else {
		bt.Queue(l.sql.claim)
	}
	br := conn.SendBatch(ctx, &bt)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, err
	}
	rows, err := br.Query()
	if err == nil {
		r := &c.row
		if fd := rows.FieldDescriptions(); len(c.dst) != len(fd) {
			c.dst = make([]any, len(fd)) // nil skips a column
			for i, f := range fd {
				switch f.Name {
				case "id":
					c.dst[i] = &r.id
				case "key":
					c.dst[i] = &r.key
				case "priority":
					c.dst[i] = &r.prio
				case "name":
					c.dst[i] = &r.name
				case "amount":
					c.dst[i] = &r.amount
				}
			}
		}
		for rows.Next() {
			if err = rows.Scan(c.dst...); err != nil {
				break
			}
			c.position(r.prio, r.id)
			c.ids = append(c.ids, r.id)
			c.keys = append(c.keys, r.key)
			c.msgs = append(c.msgs, benchJob{N: int64(r.amount), Note: r.name})
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	n := len(c.ids)
	if n == 0 {
		_, err := conn.Exec(ctx, "COMMIT")
		return 0, err
	}
	for i := range c.ids {
		l.chk.hitRow(c.ids[i], c.msgs[i].N, c.msgs[i].Note)
	}
	var st pgx.Batch
	queueDel(&st, l.sql, c.ids)
	st.Queue("COMMIT")
	br = conn.SendBatch(ctx, &st)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return 0, err
		}
	}
	return n, br.Close()
}

// queueDel queues the delete the bridge's settlement sends for ids: the
// single-row statement for one id, the array statement for more.
func queueDel(bt *pgx.Batch, sql statements, ids []int64) {
	if len(ids) == 1 {
		bt.Queue(sql.del1, ids[0])
		return
	}
	bt.Queue(sql.del, ids)
}

// queueDelFenced is queueDel in the lease form, fenced on the token.
func queueDelFenced(bt *pgx.Batch, sql statements, ids []int64, token time.Time) {
	if len(ids) == 1 {
		bt.Queue(sql.del1, ids[0], token)
		return
	}
	bt.Queue(sql.del, ids, token)
}
