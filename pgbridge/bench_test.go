package pgbridge

// Benchmarks of the bridge's paths, each next to a raw pgx loop that runs the
// same statements (rawpgx_test.go): go test -run '^$' -bench . -benchmem ./pgbridge
//
// A draining benchmark fills its table with b.N rows by COPY (not timed),
// then times a subscription (or the raw loop) taking every row through its
// handler until the handler has seen the last one and the claimers have
// settled and stopped. One op is one row: ns/op and allocs/op are per row,
// and rows/s is the throughput. Each run checks that every row ran exactly
// once, that the table is empty, and (berth) that the broker counted b.N
// claims and acks.
//
// Both sides of a benchmark share one pool (newPool: MaxConns 24) on one
// database, the same worker count, batch size and poll interval. The
// Work1ms benchmarks give every row a handler that waits 1 ms (time.Sleep)
// before it counts the row: berth's Messages handler runs up to
// Subscription.Concurrency rows of a claim at once, and the raw loop runs
// its rows' waits the same way, up to the same number at once. The
// benchmark tables have autovacuum off so that a vacuum starting in the
// middle of one side's run does not skew the comparison; every run starts
// from a truncated table.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchJob is the message of the payload-mode tables; N is the row's id.
type benchJob struct {
	N    int64
	Note string
}

// benchReply is the reply of the reply round trip.
type benchReply struct{ N int64 }

// benchAcct is the state of the reply round trip's objects.
type benchAcct struct{ n int }

const (
	benchNote = "hello"
	benchPoll = 2 * time.Millisecond
	benchKeys = 64
)

var (
	benchInbox   = Table{Name: "inbox"}
	benchOutbox  = Table{Name: "outbox"}
	rowModeTable = Table{Name: "rows_inbox", Columns: Columns{Payload: "-", ContentType: "-", Type: "-"},
		RowColumns: []string{"name", "amount"}}
	jobType   = actor.TypeName[benchJob]()
	replyType = actor.TypeName[benchReply]()
)

// rowModeDDL makes rows_inbox: Migrate's table and indexes without the
// type, content_type and payload columns, with two row columns.
var rowModeDDL = inboxDDL("rows_inbox") + `
ALTER TABLE rows_inbox DROP COLUMN type, DROP COLUMN content_type, DROP COLUMN payload,
    ADD COLUMN name text NOT NULL, ADD COLUMN amount integer NOT NULL;`

func inboxDDL(name string) string {
	return InboxDDL(name, "") + "ALTER TABLE " + ident(name) + " SET (autovacuum_enabled = off);"
}

// ---- fixture ----

type benchEnv struct {
	pool *pgxpool.Pool
	keys []string
}

// newBenchEnv makes a database with the tables of ddl and a warm pool.
func newBenchEnv(b *testing.B, ddl ...string) *benchEnv {
	b.Helper()
	pool, db := newPool(b)
	benchServerDir = ""
	if db.Server != nil {
		benchServerDir = db.Server.Dir()
	}
	for _, s := range ddl {
		if _, err := pool.Exec(bg, s); err != nil {
			b.Fatal(err)
		}
	}
	// Open the connections both sides will use before any timer runs.
	conns := make([]*pgxpool.Conn, 10)
	for i := range conns {
		c, err := pool.Acquire(bg)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	e := &benchEnv{pool: pool}
	for i := range 1000 {
		e.keys = append(e.keys, "k"+strconv.Itoa(i))
	}
	return e
}

func (e *benchEnv) truncate(b *testing.B, tables ...string) {
	b.Helper()
	for _, t := range tables {
		if _, err := e.pool.Exec(bg, "TRUNCATE "+ident(t)+" RESTART IDENTITY"); err != nil {
			b.Fatal(err)
		}
	}
}

// fillInbox empties inbox and copies n rows into it, ids 1..n, keys cycling
// over the first keys of e.keys, each payload a benchJob whose N is its id.
func (e *benchEnv) fillInbox(b *testing.B, n, keys int) {
	b.Helper()
	e.truncate(b, "inbox")
	var buf []byte
	e.copy(b, "inbox", []string{"key", "type", "content_type", "payload"}, n, func(i int) []any {
		start := len(buf)
		buf, _ = payload.JSON.Encode(buf, &benchJob{N: int64(i + 1), Note: benchNote})
		return []any{e.keys[i%keys], jobType, "application/json", buf[start:len(buf):len(buf)]}
	})
}

// fillRows empties rows_inbox and copies n rows into it: name benchNote,
// amount the row's id.
func (e *benchEnv) fillRows(b *testing.B, n int) {
	b.Helper()
	e.truncate(b, "rows_inbox")
	e.copy(b, "rows_inbox", []string{"key", "name", "amount"}, n, func(i int) []any {
		return []any{e.keys[i%benchKeys], benchNote, int32(i + 1)}
	})
}

func (e *benchEnv) copy(b *testing.B, table string, cols []string, n int, row func(i int) []any) {
	b.Helper()
	got, err := e.pool.CopyFrom(bg, pgx.Identifier{table}, cols, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		return row(i), nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	if got != int64(n) {
		b.Fatalf("copied %d rows, want %d", got, n)
	}
	if _, err := e.pool.Exec(bg, "ANALYZE "+ident(table)); err != nil {
		b.Fatal(err)
	}
}

// measure is a timed section. Besides ns/op it reports rows/s; cpu-ns/op,
// the CPU time this process (the bridge or the raw loop, pgx, the runtime)
// spent per op; and pg-cpu-ns/op, the CPU time of the throwaway Postgres
// server's processes per op (not with BERTH_TEST_DATABASE_URL). The CPU
// figures (Linux only, read from /proc in 10 ms ticks: meaningful for runs
// of a second or more) are less disturbed than the wall clock by other
// processes sharing the machine's cores.
type measure struct {
	b           *testing.B
	cpu, pgCPU  time.Duration
	cpuOK, pgOK bool
	pgDir       string
}

// benchServerDir is the directory of the throwaway server the running
// benchmark's database is on ("" for an external server).
var benchServerDir string

// startTimer resets the benchmark's clock and allocation counters after the
// setup's garbage is collected.
func startTimer(b *testing.B) *measure {
	runtime.GC()
	b.ReportAllocs()
	m := &measure{b: b, pgDir: benchServerDir}
	m.pgCPU, m.pgOK = serverCPU(m.pgDir)
	m.cpu, m.cpuOK = processCPU()
	b.ResetTimer()
	return m
}

// stop stops the clock and reports the metrics.
func (m *measure) stop() {
	b := m.b
	b.StopTimer()
	cpu, cpuOK := processCPU()
	pg, pgOK := serverCPU(m.pgDir)
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "rows/s")
	}
	if cpuOK && m.cpuOK {
		b.ReportMetric(float64((cpu-m.cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	if pgOK && m.pgOK {
		b.ReportMetric(float64((pg-m.pgCPU).Nanoseconds())/float64(b.N), "pg-cpu-ns/op")
	}
}

// processCPU is the user and system time of this process so far (Linux:
// /proc/self/stat, in clock ticks of 10 ms).
func processCPU() (time.Duration, bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	_, ticks, ok := parseStat(stat)
	return time.Duration(ticks) * 10 * time.Millisecond, ok
}

// serverCPU sums the user and system time of the Postgres server whose
// directory is dir — its postmaster and the postmaster's children (the
// backends, the WAL writer, …) — from /proc, in clock ticks of 10 ms.
func serverCPU(dir string) (time.Duration, bool) {
	if dir == "" {
		return 0, false
	}
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	pm := strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0])
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var ticks int64
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		if ppid, t, ok := parseStat(stat); ok && (p.Name() == pm || ppid == pm) {
			ticks += t
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond, true
}

// parseStat reads a /proc/<pid>/stat line: the parent's pid and the
// process's user plus system time in clock ticks.
func parseStat(stat []byte) (ppid string, ticks int64, ok bool) {
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return "", 0, false
	}
	// After the command: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return "", 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	return f[1], u + s, err1 == nil && err2 == nil
}

func (e *benchEnv) expectCount(b *testing.B, table string, want int) {
	b.Helper()
	if got := count(b, e.pool, table); got != want {
		b.Fatalf("%s holds %d rows, want %d", table, got, want)
	}
}

// ---- the check every draining run makes ----

// drainCheck counts the rows a handler saw: each id once, its payload the
// one written for it. finished is closed by the n-th row.
type drainCheck struct {
	n        int64
	seen     []atomic.Int32
	done     atomic.Int64
	bad      atomic.Int64
	finished chan struct{}
}

func newDrainCheck(n int) *drainCheck {
	return &drainCheck{n: int64(n), seen: make([]atomic.Int32, n), finished: make(chan struct{})}
}

// hit records row id, whose payload carried n.
func (c *drainCheck) hit(id, n int64) {
	if id < 1 || id > c.n || n != id {
		c.bad.Add(1)
	} else {
		c.seen[id-1].Add(1)
	}
	if c.done.Add(1) == c.n {
		close(c.finished)
	}
}

// hitRow records row-mode row id, whose columns held amount and name.
func (c *drainCheck) hitRow(id, amount int64, name string) {
	if name != benchNote {
		c.bad.Add(1)
	}
	c.hit(id, amount)
}

func (c *drainCheck) wait(b *testing.B) {
	b.Helper()
	select {
	case <-c.finished:
	case <-time.After(3 * time.Minute):
		b.Fatalf("timed out: %d of %d rows handled", c.done.Load(), c.n)
	}
}

func (c *drainCheck) verify(b *testing.B) {
	b.Helper()
	if d := c.done.Load(); d != c.n {
		b.Fatalf("handled %d rows, want %d", d, c.n)
	}
	if bad := c.bad.Load(); bad != 0 {
		b.Fatalf("%d rows with a wrong id or payload", bad)
	}
	for i := range c.seen {
		if v := c.seen[i].Load(); v != 1 {
			b.Fatalf("row %d handled %d times", i+1, v)
		}
	}
}

// ---- draining benchmarks ----

type drainCase struct {
	form    Form
	workers int
	batch   int
	keys    int           // distinct keys in the table
	work    time.Duration // each row's handler waits this long (time.Sleep) before it counts the row
	// concurrency is Subscription.Concurrency, and the raw loop's rows at
	// once when work > 0 (0: the subscription's default,
	// min(batch, DefaultConcurrency)).
	concurrency int
}

// concurrent is the number of a claim's rows both sides run at once.
func (dc drainCase) concurrent() int {
	if dc.concurrency > 0 {
		return dc.concurrency
	}
	return min(dc.batch, DefaultConcurrency)
}

// handler is the berth handler of a drain case: Messages one row at a
// time, Batches for batches, and Messages waiting dc.work (up to
// Subscription.Concurrency rows of a claim at once) when work is set.
func (dc drainCase) handler(chk *drainCheck) Handler {
	if dc.work > 0 {
		return Messages(func(ctx context.Context, d *Delivery, m benchJob) Outcome {
			time.Sleep(dc.work)
			chk.hit(d.ID, m.N)
			return Ack
		})
	}
	if dc.batch > 1 {
		return Batches(func(ctx context.Context, items []Item[benchJob]) {
			for i := range items {
				chk.hit(items[i].Delivery.ID, items[i].Msg.N)
			}
		})
	}
	return Messages(func(ctx context.Context, d *Delivery, m benchJob) Outcome {
		chk.hit(d.ID, m.N)
		return Ack
	})
}

// drainBerth times a broker with one subscription taking b.N rows: Start,
// wait until the handler has seen the last row, Stop (which returns once
// every claim in work has settled). handler makes the subscription's
// handler for the broker.
func drainBerth(b *testing.B, e *benchEnv, cfg Config, sub *Subscription, handler func(br *Broker) Handler, chk *drainCheck) *Broker {
	b.Helper()
	cfg.Pool = e.pool
	br := newBroker(b, cfg)
	if err := br.Subscribe(sub, handler(br)); err != nil {
		b.Fatal(err)
	}
	m := startTimer(b)
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	chk.wait(b)
	if err := br.Stop(bg); err != nil {
		b.Fatal(err)
	}
	m.stop()
	chk.verify(b)
	if st := br.Stats(); st.Claimed != uint64(b.N) || st.Acked != uint64(b.N) {
		b.Fatalf("stats: claimed %d, acked %d, want %d (%+v)", st.Claimed, st.Acked, b.N, st)
	}
	return br
}

// drainRaw times the raw loop l running claim until b.N rows are handled.
func drainRaw(b *testing.B, l *rawLoop, claim func(ctx context.Context, c *rawClaim) (int, error), before func() error) {
	b.Helper()
	m := startTimer(b)
	if before != nil {
		if err := before(); err != nil {
			b.Fatal(err)
		}
	}
	l.run(b, claim)
	m.stop()
	l.chk.verify(b)
}

// benchDrain runs a drain case's berth and raw sub-benchmarks on e.
func benchDrain(b *testing.B, e *benchEnv, dc drainCase) {
	keys := dc.keys
	if keys == 0 {
		keys = benchKeys
	}
	const lease = 30 * time.Second
	b.Run("berth", func(b *testing.B) {
		e.fillInbox(b, b.N, keys)
		chk := newDrainCheck(b.N)
		sub := &Subscription{Table: benchInbox, Form: dc.form, Workers: dc.workers, Batch: dc.batch,
			Concurrency: dc.concurrency, PollInterval: benchPoll, Lease: lease}
		drainBerth(b, e, Config{}, sub, func(*Broker) Handler { return dc.handler(chk) }, chk)
		e.expectCount(b, "inbox", 0)
	})
	b.Run("raw", func(b *testing.B) {
		e.fillInbox(b, b.N, keys)
		chk := newDrainCheck(b.N)
		l := newRawLoop(e.pool, benchInbox, dc.form, dc.workers, dc.batch, chk)
		l.work, l.concurrency = dc.work, dc.concurrent()
		claim, before := l.rowLock, (func() error)(nil)
		switch dc.form {
		case Lease:
			claim = l.lease(lease.Microseconds())
			before = func() error { _, err := e.pool.Exec(bg, l.sql.rescue); return err } // the first claimer's rescue
		case Advisory:
			claim = l.advisory
		}
		drainRaw(b, l, claim, before)
		e.expectCount(b, "inbox", 0)
	})
}

// BenchmarkRowLock: row lock, one row per claim, one worker.
func BenchmarkRowLock(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	benchDrain(b, e, drainCase{form: RowLock, workers: 1, batch: 1})
}

// BenchmarkLease: lease, one row per claim, one worker.
func BenchmarkLease(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	benchDrain(b, e, drainCase{form: Lease, workers: 1, batch: 1})
}

// BenchmarkAdvisory: advisory, one key per claim, one worker, 1,000 keys.
func BenchmarkAdvisory(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	benchDrain(b, e, drainCase{form: Advisory, workers: 1, batch: 1, keys: 1000})
}

// BenchmarkRowLockWorkers: row lock, one row per claim, 4 and 8 workers
// (goal ≥ 9,000 rows/s).
func BenchmarkRowLockWorkers(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	for _, w := range []int{4, 8} {
		b.Run("w"+strconv.Itoa(w), func(b *testing.B) {
			benchDrain(b, e, drainCase{form: RowLock, workers: w, batch: 1})
		})
	}
}

// BenchmarkRowLockBatch: row lock, 1,000 rows per claim settled by one
// array DELETE, 1 and 2 claimers (goal with 2: ≥ 100,000 rows/s).
func BenchmarkRowLockBatch(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	for _, w := range []int{1, 2} {
		b.Run("w"+strconv.Itoa(w), func(b *testing.B) {
			benchDrain(b, e, drainCase{form: RowLock, workers: w, batch: 1000})
		})
	}
}

// BenchmarkLeaseBatch: lease, 1,000 rows per claim, 1 and 2 claimers
// (goal ≥ 50,000 rows/s).
func BenchmarkLeaseBatch(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	for _, w := range []int{1, 2} {
		b.Run("w"+strconv.Itoa(w), func(b *testing.B) {
			benchDrain(b, e, drainCase{form: Lease, workers: w, batch: 1000})
		})
	}
}

// BenchmarkRowLockBatchWork1ms: BenchmarkRowLockBatch with a handler that
// waits 1 ms a row: Messages runs up to 64 rows of a claim at once (the
// default Concurrency), a key's rows one after another; the raw loop waits
// for its rows the same way, up to 64 at once, in the claim's transaction.
func BenchmarkRowLockBatchWork1ms(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	for _, w := range []int{1, 2} {
		b.Run("w"+strconv.Itoa(w), func(b *testing.B) {
			benchDrain(b, e, drainCase{form: RowLock, workers: w, batch: 1000, work: time.Millisecond})
		})
	}
}

// BenchmarkLeaseBatchWork1ms: BenchmarkLeaseBatch with a handler that waits
// 1 ms a row, up to 64 rows of a claim at once on both sides (as
// BenchmarkRowLockBatchWork1ms).
func BenchmarkLeaseBatchWork1ms(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	for _, w := range []int{1, 2} {
		b.Run("w"+strconv.Itoa(w), func(b *testing.B) {
			benchDrain(b, e, drainCase{form: Lease, workers: w, batch: 1000, work: time.Millisecond})
		})
	}
}

// BenchmarkRowMode: row lock, one row per claim, one worker, on a table
// without a payload column; the handler scans a text and an int column.
func BenchmarkRowMode(b *testing.B) {
	e := newBenchEnv(b, rowModeDDL)
	b.Run("berth", func(b *testing.B) {
		e.fillRows(b, b.N)
		chk := newDrainCheck(b.N)
		sub := &Subscription{Table: rowModeTable, Workers: 1, Batch: 1, PollInterval: benchPoll}
		h := Rows(func(ctx context.Context, d *Delivery, r *Row) Outcome {
			var name string
			var amount int32
			if err := r.Scan(0, &name); err != nil {
				chk.bad.Add(1)
			}
			if err := r.Scan(1, &amount); err != nil {
				chk.bad.Add(1)
			}
			chk.hitRow(d.ID, int64(amount), name)
			return Ack
		})
		drainBerth(b, e, Config{}, sub, func(*Broker) Handler { return h }, chk)
		e.expectCount(b, "rows_inbox", 0)
	})
	b.Run("raw", func(b *testing.B) {
		e.fillRows(b, b.N)
		chk := newDrainCheck(b.N)
		l := newRawLoop(e.pool, rowModeTable, RowLock, 1, 1, chk)
		drainRaw(b, l, l.rowMode, nil)
		e.expectCount(b, "rows_inbox", 0)
	})
}

// BenchmarkReply: the reply round trip in the row-lock form, one row per
// claim, one worker. berth: Objects delivers each row to an object through
// an actor host, whose request handler replies; Routed inserts the reply
// into outbox in the claim's transaction. raw: claim, decode, encode the
// reply, INSERT it on the claim's connection, DELETE and COMMIT. Stop
// begins while the last reply may still be on its way: it must be published
// and its row acknowledged (the run fails otherwise).
func BenchmarkReply(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"), inboxDDL("outbox"))
	verify := func(b *testing.B) {
		e.expectCount(b, "inbox", 0)
		var n int
		if err := e.pool.QueryRow(bg, `SELECT count(*) FROM outbox WHERE type = $1 AND content_type = 'application/json'`,
			replyType).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n != b.N {
			b.Fatalf("outbox holds %d replies, want %d", n, b.N)
		}
	}
	b.Run("berth", func(b *testing.B) {
		e.fillInbox(b, b.N, benchKeys)
		e.truncate(b, "outbox")
		chk := newDrainCheck(b.N)
		kind := actor.NewKind("acct", func(ctx *actor.Context, id string) (*benchAcct, error) { return &benchAcct{}, nil })
		actor.HandleRequest(kind, func(ctx *actor.Context, st *benchAcct, m benchJob) (benchReply, error) {
			st.n++
			chk.hit(m.N, m.N)
			return benchReply{N: m.N}, nil
		})
		host, err := actor.NewHost(actor.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		if err := host.Register(kind); err != nil {
			b.Fatal(err)
		}
		if err := host.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { host.Close() })
		sub := &Subscription{Table: benchInbox, Workers: 1, Batch: 1, PollInterval: benchPoll}
		br := drainBerth(b, e, Config{Routes: map[string]Table{replyType: benchOutbox}}, sub, func(br *Broker) Handler {
			return Objects(host, "acct", ObjectOptions{Replies: Routed{Broker: br}})
		}, chk)
		if st := br.Stats(); st.Published != uint64(b.N) {
			b.Fatalf("published %d replies, want %d", st.Published, b.N)
		}
		verify(b)
	})
	b.Run("raw", func(b *testing.B) {
		e.fillInbox(b, b.N, benchKeys)
		e.truncate(b, "outbox")
		chk := newDrainCheck(b.N)
		insert := rawInsert(benchOutbox)
		l := newRawLoop(e.pool, benchInbox, RowLock, 1, 1, chk)
		l.reply = func(ctx context.Context, conn *pgx.Conn, c *rawClaim, i int) error {
			rep := benchReply{N: c.msgs[i].N}
			var err error
			if c.buf, err = payload.JSON.Encode(c.buf[:0], &rep); err != nil {
				return err
			}
			_, err = conn.Exec(ctx, insert, c.keys[i], replyType, "application/json", c.buf, (*string)(nil), int16(0))
			return err
		}
		drainRaw(b, l, l.rowLock, nil)
		verify(b)
	})
}

// ---- publishing ----

// BenchmarkPublish: one insert per op on the pool, one goroutine. berth:
// Send through Repository and Routed (encode into a pooled buffer, insert);
// raw: encode into a reused buffer and the same INSERT with the same
// arguments.
func BenchmarkPublish(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	berth := func(b *testing.B, pub func(br *Broker) Publisher) {
		e.truncate(b, "inbox")
		br := newBroker(b, Config{Pool: e.pool, Routes: map[string]Table{jobType: benchInbox}})
		p := pub(br)
		m := startTimer(b)
		for i := range b.N {
			if err := Send(bg, br, e.pool, p, e.keys[i%benchKeys], benchJob{N: int64(i + 1), Note: benchNote}); err != nil {
				b.Fatal(err)
			}
		}
		m.stop()
		if st := br.Stats(); st.Published != uint64(b.N) {
			b.Fatalf("published %d, want %d", st.Published, b.N)
		}
		e.expectPublished(b, b.N)
	}
	b.Run("repository", func(b *testing.B) {
		berth(b, func(br *Broker) Publisher { return Repository{Broker: br, Table: benchInbox} })
	})
	b.Run("routed", func(b *testing.B) {
		berth(b, func(br *Broker) Publisher { return Routed{Broker: br} })
	})
	b.Run("raw", func(b *testing.B) {
		e.truncate(b, "inbox")
		insert := rawInsert(benchInbox)
		var buf []byte
		var msg benchJob
		m := startTimer(b)
		for i := range b.N {
			msg = benchJob{N: int64(i + 1), Note: benchNote}
			var err error
			if buf, err = payload.JSON.Encode(buf[:0], &msg); err != nil {
				b.Fatal(err)
			}
			if _, err := e.pool.Exec(bg, insert, e.keys[i%benchKeys], jobType, "application/json", buf, (*string)(nil), int16(0)); err != nil {
				b.Fatal(err)
			}
		}
		m.stop()
		e.expectPublished(b, b.N)
	})
}

// BenchmarkPublishTx: the outbox pattern, one transaction per op on the
// pool (BEGIN, the insert, COMMIT); berth publishes with Send through
// Repository into the caller's pgx.Tx, raw with tx.Exec.
func BenchmarkPublishTx(b *testing.B) {
	e := newBenchEnv(b, inboxDDL("inbox"))
	b.Run("berth", func(b *testing.B) {
		e.truncate(b, "inbox")
		br := newBroker(b, Config{Pool: e.pool})
		var pub Publisher = Repository{Broker: br, Table: benchInbox} // boxed once, as BenchmarkPublish does
		m := startTimer(b)
		for i := range b.N {
			tx, err := e.pool.Begin(bg)
			if err != nil {
				b.Fatal(err)
			}
			if err := Send(bg, br, tx, pub, e.keys[i%benchKeys], benchJob{N: int64(i + 1), Note: benchNote}); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(bg); err != nil {
				b.Fatal(err)
			}
		}
		m.stop()
		e.expectPublished(b, b.N)
	})
	b.Run("raw", func(b *testing.B) {
		e.truncate(b, "inbox")
		insert := rawInsert(benchInbox)
		var buf []byte
		var msg benchJob
		m := startTimer(b)
		for i := range b.N {
			tx, err := e.pool.Begin(bg)
			if err != nil {
				b.Fatal(err)
			}
			msg = benchJob{N: int64(i + 1), Note: benchNote}
			if buf, err = payload.JSON.Encode(buf[:0], &msg); err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(bg, insert, e.keys[i%benchKeys], jobType, "application/json", buf, (*string)(nil), int16(0)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(bg); err != nil {
				b.Fatal(err)
			}
		}
		m.stop()
		e.expectPublished(b, b.N)
	})
}

// expectPublished checks that inbox holds n rows, ids 1..n, each of the
// job type with the payload written for it.
func (e *benchEnv) expectPublished(b *testing.B, n int) {
	b.Helper()
	var rows, good int
	err := e.pool.QueryRow(bg, `SELECT count(*), count(*) FILTER (WHERE type = $1 AND content_type = 'application/json'
		AND (convert_from(payload, 'UTF8')::jsonb ->> 'N')::bigint = id AND headers IS NULL) FROM inbox`, jobType).Scan(&rows, &good)
	if err != nil {
		b.Fatal(err)
	}
	if rows != n || good != n {
		b.Fatalf("inbox holds %d rows (%d as published), want %d", rows, good, n)
	}
}
