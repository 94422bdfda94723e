package main

// berth pgdemo: Postgres inbox rows delivered to objects through pgbridge,
// with a backend killed and a worker restarted mid-run.
//
//	go run ./cmd/berth pgdemo [-db URL] [-n 20000] [-objects 200] [-workers 4] [-batch 32]
//
// Without -db it starts a throwaway Postgres (internal/pgtest) and stops it
// at the end. It fills an inbox table with N messages for M objects, each
// carrying a per-object sequence number (in sequence order per object),
// delivers them with the row-lock form, Ordered (a key's rows one at a time,
// in id order), to tracker objects on an actor host, and mid-run
//
//  1. terminates one of the bridge's backends that is idle in transaction —
//     a claim whose rows are with the objects: the transaction rolls back,
//     and the rows are claimed and delivered again;
//  2. restarts the worker: Stop (graceful) the broker and start a new one
//     with the same subscription.
//
// Each tracker records every sequence number its handler ran (in memory)
// and applies a sequence only if it is above the last one it applied: a
// redelivered row (sequence ≤ last applied) is recognized and not applied
// again. Its reply, Applied{Seq}, is inserted into a ledger table in the
// claim's own transaction (ObjectOptions.Replies; row-lock form), so the
// ledger holds a sequence exactly when its row's settlement committed.
//
// The report counts what really happened: handler runs, duplicated (a
// sequence whose handler ran more than once — the rolled-back claim's rows,
// whose handlers had run: exactly-once handler runs are impossible when the
// handler's effect is in memory and the settlement commits afterwards, in
// another system), applied twice (what the last-applied guard prevents),
// lost, out of order, the ledger's consistency, rows/s. The exit code is
// non-zero if a row was lost or left unprocessed, a sequence ran out of
// order or was applied twice, or the ledger is not each sequence once.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgbridge"
)

// The demo's tables (dropped and created again by every run).
const (
	pgInbox  = "pgdemo_inbox"
	pgDead   = "pgdemo_inbox_dead"
	pgLedger = "pgdemo_applied"
	// appName marks the bridge's connections in pg_stat_activity; the
	// demo's own (the killer's) have another name.
	appName = "berth-pgdemo-bridge"
)

type pgdemoConfig struct {
	db                         string // "" starts a throwaway server
	n, objects, workers, batch int
	quiet                      bool // no progress lines
	// stallTimeout ends the run when no row was processed for this long
	// (rows then left in the inbox are reported and fail the run).
	stallTimeout time.Duration
}

// startPostgres starts the throwaway server (a variable for the test of
// the missing-binaries message).
var startPostgres = pgtest.Start

// pgdemoMain runs "berth pgdemo args" and returns the exit code.
func pgdemoMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pgdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := pgdemoConfig{stallTimeout: 20 * time.Second}
	fs.StringVar(&cfg.db, "db", "", "Postgres URL to use; its tables "+pgInbox+", "+pgDead+" and "+pgLedger+
		" are dropped and created (default: start a throwaway server)")
	fs.IntVar(&cfg.n, "n", 20000, "messages")
	fs.IntVar(&cfg.objects, "objects", 200, "objects the messages are for")
	fs.IntVar(&cfg.workers, "workers", 4, "claimers of the subscription (each holds a connection)")
	fs.IntVar(&cfg.batch, "batch", 32, "rows per claim")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.n < 1 || cfg.objects < 1 || cfg.workers < 1 || cfg.batch < 1 {
		fmt.Fprintln(stderr, "pgdemo: -n, -objects, -workers and -batch must be at least 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.db == "" {
		srv, err := startPostgres()
		if errors.Is(err, pgtest.ErrNoPostgres) {
			fmt.Fprint(stderr, noPostgres)
			return 1
		}
		if err != nil {
			fmt.Fprintln(stderr, "pgdemo: starting a throwaway Postgres:", err)
			return 1
		}
		defer srv.Stop()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cfg.db, err = pgtest.CreateDatabase(cctx, srv.URL("postgres"), "berth_pgdemo")
		cancel()
		if err != nil {
			fmt.Fprintln(stderr, "pgdemo: creating the database:", err)
			return 1
		}
		fmt.Fprintf(stdout, "throwaway Postgres in %s (stopped at the end)\n", srv.Dir())
	}
	rep, err := runPG(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "pgdemo:", err)
		return 1
	}
	if rep.failed() {
		return 1
	}
	return 0
}

const noPostgres = `pgdemo: no Postgres server binaries found (initdb and pg_ctl, neither on PATH nor in /usr/lib/postgresql/*/bin).
Install them — on Debian or Ubuntu: apt-get install postgresql
(the demo starts its own throwaway server from them; no service needs to run),
or pass the URL of a server you have: berth pgdemo -db postgres://user@host:5432/db
`

// Step is one inbox row's message: the next sequence number of its object.
type Step struct{ Seq int }

// Applied is a tracker's reply to a Step, inserted into the ledger table in
// the claim's transaction.
type Applied struct{ Seq int }

// Snapshot asks a tracker for its state.
type Snapshot struct{}

// Tracker is an object's state, in memory.
type Tracker struct {
	Runs    []int // every sequence its handler ran, in order
	Applied []int // the sequences it applied, in order
	Skipped int   // runs of a sequence ≤ the last applied: not applied again
}

func trackerKind() *actor.Kind[Tracker] {
	k := actor.NewKind("tracker", func(*actor.Context, string) (*Tracker, error) { return &Tracker{}, nil })
	actor.HandleRequest(k, func(_ *actor.Context, t *Tracker, s Step) (Applied, error) {
		t.Runs = append(t.Runs, s.Seq)
		if n := len(t.Applied); n > 0 && s.Seq <= t.Applied[n-1] {
			// Already applied: a row delivered again after its claim
			// rolled back. Not applied again; the reply is sent again,
			// for the ledger insert of this (new) claim.
			t.Skipped++
		} else {
			t.Applied = append(t.Applied, s.Seq) // a gap too: the report counts it out of order
		}
		return Applied{Seq: s.Seq}, nil
	})
	actor.HandleRequest(k, func(_ *actor.Context, t *Tracker, _ Snapshot) (Tracker, error) { return *t, nil })
	return k
}

type pgReport struct {
	inserted     int
	processed    int // rows gone from the inbox: acked or dead-lettered
	acked        int // rows the brokers counted acked
	handlerRuns  int
	duplicated   int // runs of a sequence that had run before
	appliedTwice int // applications of a sequence applied before (the trackers' guard prevents them)
	skipped      int // runs the guard recognized as already applied
	lost         int // expected, never run, not in the inbox nor the dead-letter table
	left         int // still in the inbox at the end
	dead         int // in the dead-letter table
	outOfOrder   int // first runs not in sequence order
	breaks       []string

	ledgerRows, ledgerTwice, ledgerMissing, ledgerStray int

	killed         []int // pids terminated
	rollbacks      uint64
	rolledBackRows int
	restarts       int
	restartTook    time.Duration
	retried        uint64

	fillTook time.Duration
	elapsed  time.Duration // from the first broker's start to the empty inbox
}

// failed: something was lost, left, out of order, applied twice, or the
// ledger is not each acked sequence exactly once.
func (r pgReport) failed() bool {
	return r.lost > 0 || r.left > 0 || r.outOfOrder > 0 || r.appliedTwice > 0 ||
		r.ledgerTwice > 0 || r.ledgerMissing > 0 || r.ledgerStray > 0
}

// observer counts rolled-back claims and rows (Stats counts the claims
// only).
type observer struct {
	rollbacks, rolledBackRows atomic.Int64
}

func (*observer) Claimed(string, int)                                 {}
func (*observer) Settled(string, pgbridge.OutcomeKind, time.Duration) {}
func (*observer) DecodeFailed(string)                                 {}
func (*observer) LeaseLost(string)                                    {}
func (o *observer) RolledBack(_ string, n int) {
	o.rolledBackRows.Add(int64(n))
	o.rollbacks.Add(1)
}
func (*observer) ClaimFailed(string, error) {}
func (*observer) Woken(string)              {}

func runPG(ctx context.Context, cfg pgdemoConfig, w io.Writer) (rep pgReport, err error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pcfg, err := pgxpool.ParseConfig(cfg.db)
	if err != nil {
		return rep, fmt.Errorf("-db: %w", err)
	}
	pcfg.MaxConns = int32(cfg.workers + 4)
	pcfg.ConnConfig.RuntimeParams["application_name"] = appName
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	acfg := pcfg.ConnConfig.Copy()
	acfg.RuntimeParams["application_name"] = "berth-pgdemo"
	admin, err := pgx.ConnectConfig(ctx, acfg)
	if err != nil {
		return rep, fmt.Errorf("connecting to %s: %w", redact(cfg.db), err)
	}
	defer admin.Close(context.Background())

	inbox := pgbridge.Table{Name: pgInbox, DeadLetter: pgDead}
	ledger := pgbridge.Table{Name: pgLedger}
	if _, err := admin.Exec(ctx, "DROP TABLE IF EXISTS "+pgInbox+", "+pgDead+", "+pgLedger); err != nil {
		return rep, err
	}
	for _, t := range []pgbridge.Table{inbox, ledger} {
		if err := pgbridge.Migrate(ctx, admin, t); err != nil {
			return rep, err
		}
	}

	// The publishing broker: its registry encodes the rows, and the
	// objects' replies go through its Repository. It is never started nor
	// stopped while the run lasts: a broker that is stopping refuses to
	// publish (ErrClosed), which would fail the replies of the rows a
	// graceful Stop lets finish.
	pub, err := pgbridge.New(pgbridge.Config{Pool: pool, Logger: quiet})
	if err != nil {
		return rep, err
	}
	defer pub.Close()

	// Fill: seq 1 of every object, then seq 2, … — ids increase with the
	// sequence within each object, and every object's next row is near the
	// head of the table.
	per := make([]int, cfg.objects)
	for i := range per {
		per[i] = cfg.n / cfg.objects
		if i < cfg.n%cfg.objects {
			per[i]++
		}
	}
	fillStart := time.Now()
	if rep.inserted, err = fill(ctx, admin, pub.Registry(), per); err != nil {
		return rep, fmt.Errorf("filling %s: %w", pgInbox, err)
	}
	rep.fillTook = time.Since(fillStart)
	fmt.Fprintf(w, "pgdemo: %d messages for %d objects in %s (COPY, %v); row-lock form, Ordered, %d workers × batch %d\n",
		rep.inserted, cfg.objects, pgInbox, rep.fillTook.Round(time.Millisecond), cfg.workers, cfg.batch)

	host, err := actor.NewHost(actor.Config{Name: "pgdemo", Logger: quiet})
	if err != nil {
		return rep, err
	}
	defer host.Close()
	if err := host.Register(trackerKind()); err != nil {
		return rep, err
	}
	if err := host.Start(); err != nil {
		return rep, err
	}

	obs := &observer{}
	var done pgbridge.Stats // totals of the brokers stopped so far
	startBroker := func() (*pgbridge.Broker, error) {
		b, err := pgbridge.New(pgbridge.Config{Pool: pool, Logger: quiet, Observer: obs})
		if err != nil {
			return nil, err
		}
		sub := &pgbridge.Subscription{
			Name: "pgdemo", Table: inbox, Form: pgbridge.RowLock, Ordered: true,
			Workers: cfg.workers, Batch: cfg.batch, PollInterval: 20 * time.Millisecond, MaxAttempts: 5,
		}
		err = b.Subscribe(sub, pgbridge.Objects(host, "tracker", pgbridge.ObjectOptions{
			Replies: pgbridge.Repository{Broker: pub, Table: ledger},
		}))
		if err == nil {
			err = b.Start()
		}
		if err != nil {
			b.Close()
			return nil, err
		}
		return b, nil
	}
	b, err := startBroker()
	if err != nil {
		return rep, err
	}
	defer func() {
		if b != nil {
			b.Close()
		}
	}()
	stats := func() pgbridge.Stats {
		s := b.Stats()
		s.Acked += done.Acked
		s.Retried += done.Retried
		s.Rollbacks += done.Rollbacks
		s.DeadLettered += done.DeadLettered
		return s
	}

	start := time.Now()
	since := func() string { return fmt.Sprintf("%5.1fs", time.Since(start).Seconds()) }
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	nextLine, lastN, lastAt := start.Add(time.Second), 0, start
	lastProgress, processed := start, 0
	n := rep.inserted
	killDone, killPending, killAt, rollbacksAtKill, rolledAtKill := false, false, time.Time{}, int64(0), int64(0)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-tick.C:
		}
		// Processed: rows gone from the inbox (acked or dead-lettered),
		// counted in the table every 50 ms — not from the bridge's
		// counts, which miss the rows of a claim reported rolled back
		// whose COMMIT went through (see the report).
		if i%5 == 0 {
			var left int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+pgInbox).Scan(&left); err != nil {
				return rep, err
			}
			if n-left != processed {
				processed, lastProgress = n-left, time.Now()
			}
		}
		st := stats()
		// (a) Kill a backend of the bridge's claims, a third of the way —
		// until one claim rolled back: a signal can land just after the
		// claim committed (the backend was idle in its transaction when
		// pg_stat_activity was read).
		if !killDone && processed >= n/3 {
			switch {
			case killPending && obs.rollbacks.Load() > rollbacksAtKill:
				killDone = true
				fmt.Fprintf(w, "%s  the bridge reports its claim rolled back (%d rows, to be delivered again)\n",
					since(), obs.rolledBackRows.Load()-rolledAtKill)
			case killPending && time.Since(killAt) < 100*time.Millisecond:
				// the claim has not noticed yet
			case len(rep.killed) >= 5:
				killDone = true
			default:
				if killPending {
					killPending = false
					fmt.Fprintf(w, "%s  no claim rolled back within 100 ms: the signal landed after the claim committed\n", since())
				}
				// The counts before the kill: the claim may notice it before
				// pg_terminate_backend returns.
				rb, rows := obs.rollbacks.Load(), obs.rolledBackRows.Load()
				pid, err := killOne(ctx, admin)
				if err != nil {
					return rep, fmt.Errorf("pg_terminate_backend: %w", err)
				}
				if pid != 0 {
					rep.killed = append(rep.killed, pid)
					killPending, killAt, rollbacksAtKill, rolledAtKill = true, time.Now(), rb, rows
					fmt.Fprintf(w, "%s  killed backend %d (idle in transaction: a claim whose rows are at the objects)\n", since(), pid)
				}
			}
		}
		// (b) Restart the worker, two thirds of the way.
		if rep.restarts == 0 && processed >= 2*n/3 {
			t0 := time.Now()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := b.Stop(sctx)
			cancel()
			if err != nil {
				return rep, fmt.Errorf("stopping the broker: %w", err)
			}
			old := b.Stats()
			done.Acked += old.Acked
			done.Retried += old.Retried
			done.Rollbacks += old.Rollbacks
			done.DeadLettered += old.DeadLettered
			b = nil
			if b, err = startBroker(); err != nil {
				return rep, fmt.Errorf("starting a new broker: %w", err)
			}
			rep.restarts++
			rep.restartTook = time.Since(t0)
			fmt.Fprintf(w, "%s  worker restarted: broker stopped gracefully and a new one started in %v\n",
				since(), rep.restartTook.Round(time.Microsecond))
			st = stats()
		}
		now := time.Now()
		if !cfg.quiet && !now.Before(nextLine) {
			rate := float64(processed-lastN) / now.Sub(lastAt).Seconds()
			lastN, lastAt = processed, now
			nextLine = nextLine.Add(time.Second)
			fmt.Fprintf(w, "%s  processed %7d/%d  %7.0f rows/s  rolled back %d  retried %d\n",
				since(), processed, n, rate, obs.rolledBackRows.Load(), st.Retried)
		}
		if processed >= n {
			break
		}
		if now.Sub(lastProgress) > cfg.stallTimeout {
			fmt.Fprintf(w, "%s  no row processed for %v: giving up\n", since(), cfg.stallTimeout)
			break
		}
	}
	rep.elapsed = time.Since(start)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = b.Stop(sctx)
	cancel()
	if err != nil {
		return rep, fmt.Errorf("stopping the broker: %w", err)
	}
	st := stats()
	rep.acked = int(st.Acked)
	rep.rollbacks, rep.retried = st.Rollbacks, st.Retried
	rep.rolledBackRows = int(obs.rolledBackRows.Load())

	if err := check(ctx, &rep, host, admin, per); err != nil {
		return rep, err
	}
	printPGReport(w, &rep, cfg)
	return rep, nil
}

// fill copies the rows into the inbox: per[i] steps for object i.
func fill(ctx context.Context, db *pgx.Conn, reg *payload.Registry, per []int) (int, error) {
	ce, err := payload.SendCodecFor[Step](reg)
	if err != nil {
		return 0, err
	}
	typ, ct := actor.TypeName[Step](), ce.ContentType()
	maxPer := 0
	for _, p := range per {
		maxPer = max(maxPer, p)
	}
	var rows [][]any
	for seq := 1; seq <= maxPer; seq++ {
		for i, p := range per {
			if seq > p {
				continue
			}
			body, err := ce.Codec().Encode(nil, &Step{Seq: seq})
			if err != nil {
				return 0, err
			}
			rows = append(rows, []any{objectID(i), typ, ct, body})
		}
	}
	n, err := db.CopyFrom(ctx, pgx.Identifier{pgInbox}, []string{"key", "type", "content_type", "payload"}, pgx.CopyFromRows(rows))
	if err != nil {
		return int(n), err
	}
	// Statistics for the claim's plan now, not when autovacuum gets to the
	// new table: without them the first seconds' claims are slow.
	_, err = db.Exec(ctx, "ANALYZE "+pgInbox)
	return int(n), err
}

func objectID(i int) string { return "obj-" + strconv.Itoa(i) }

// killOne terminates one backend of the bridge's pool that is idle in a
// transaction — a row-lock claim whose rows are with the objects — and
// returns its pid (0 if none was idle in a transaction just then).
func killOne(ctx context.Context, admin *pgx.Conn) (int, error) {
	var pid int
	var ok bool
	err := admin.QueryRow(ctx, `SELECT pid, pg_terminate_backend(pid) FROM (
		SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND state = 'idle in transaction' AND application_name = $1
		LIMIT 1) a`, appName).Scan(&pid, &ok)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !ok {
		return 0, nil
	}
	return pid, err
}

// check reads every object's runs, the ledger and what is left in the
// tables, and counts.
func check(ctx context.Context, rep *pgReport, host *actor.Host, db *pgx.Conn, per []int) error {
	// Sequences still in the inbox or dead-lettered, by object.
	inTable := func(table string) (map[string]map[int]bool, int, error) {
		m := map[string]map[int]bool{}
		n := 0
		err := readSteps(ctx, db, table, func(key string, seq int) {
			if m[key] == nil {
				m[key] = map[int]bool{}
			}
			m[key][seq] = true
			n++
		})
		return m, n, err
	}
	left, nLeft, err := inTable(pgInbox)
	if err != nil {
		return err
	}
	dead, nDead, err := inTable(pgDead)
	if err != nil {
		return err
	}
	rep.left, rep.dead = nLeft, nDead
	rep.processed = rep.inserted - nLeft
	// The ledger's payloads are Applied{Seq}, which read as a Step: the
	// same shape.
	ledgerCount := map[string]map[int]int{}
	if err := readSteps(ctx, db, pgLedger, func(key string, seq int) {
		if ledgerCount[key] == nil {
			ledgerCount[key] = map[int]int{}
		}
		ledgerCount[key][seq]++
		rep.ledgerRows++
	}); err != nil {
		return err
	}

	for i, want := range per {
		id := objectID(i)
		t, err := actor.Ask[Snapshot, Tracker](ctx, host, actor.Ref{Kind: "tracker", ID: id}, Snapshot{})
		if err != nil {
			return fmt.Errorf("reading %s: %w", id, err)
		}
		rep.handlerRuns += len(t.Runs)
		ran := map[int]int{}
		top := 0
		for _, seq := range t.Runs {
			ran[seq]++
			if ran[seq] > 1 {
				rep.duplicated++
				continue
			}
			if seq != top+1 {
				rep.outOfOrder++
				if len(rep.breaks) < 5 {
					rep.breaks = append(rep.breaks, fmt.Sprintf("%s: %d after %d", id, seq, top))
				}
			}
			top = max(top, seq)
		}
		applied := map[int]bool{}
		for _, seq := range t.Applied {
			if applied[seq] {
				rep.appliedTwice++
			}
			applied[seq] = true
		}
		rep.skipped += t.Skipped
		for seq := 1; seq <= want; seq++ {
			c := ledgerCount[id][seq]
			if c > 1 {
				rep.ledgerTwice += c - 1
			}
			switch {
			case ran[seq] > 0:
				if c == 0 && !dead[id][seq] && !left[id][seq] {
					rep.ledgerMissing++ // ran and settled, but its reply did not commit with it
				}
			case left[id][seq] || dead[id][seq]:
			default:
				rep.lost++
			}
			delete(ledgerCount[id], seq)
		}
		for _, c := range ledgerCount[id] {
			rep.ledgerStray += c // a sequence in the ledger that was never sent
		}
		delete(ledgerCount, id)
	}
	for _, m := range ledgerCount {
		for _, c := range m {
			rep.ledgerStray += c
		}
	}
	return nil
}

// readSteps reads key and the Seq of the JSON payload of every row of table.
func readSteps(ctx context.Context, db *pgx.Conn, table string, fn func(key string, seq int)) error {
	rows, err := db.Query(ctx, "SELECT key, payload FROM "+pgx.Identifier{table}.Sanitize()+" ORDER BY id")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var body []byte
		if err := rows.Scan(&key, &body); err != nil {
			return err
		}
		var s Step
		if err := json.Unmarshal(body, &s); err != nil {
			return fmt.Errorf("%s: row of %s: %w", table, key, err)
		}
		fn(key, s.Seq)
	}
	return rows.Err()
}

func printPGReport(w io.Writer, rep *pgReport, cfg pgdemoConfig) {
	secs := rep.elapsed.Seconds()
	fmt.Fprintf(w, "\nreport after %.1fs of processing\n", secs)
	fmt.Fprintf(w, "  rows inserted     %6d  (%d objects, sequence numbers in order per object)\n", rep.inserted, cfg.objects)
	fmt.Fprintf(w, "  processed         %6d  rows settled (gone from the inbox), %.0f rows/s\n", rep.processed, float64(rep.processed)/secs)
	fmt.Fprintf(w, "  bridge acked      %6d", rep.acked)
	if unseen := rep.processed - rep.dead - rep.acked; unseen > 0 {
		fmt.Fprintf(w, "  — %d rows fewer: a claim the bridge reported rolled back had committed\n"+
			"                            (its backend died after running COMMIT, before the answer reached the bridge)", unseen)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  handler runs      %6d\n", rep.handlerRuns)
	fmt.Fprintf(w, "  duplicated        %6d  runs of a sequence that had run before", rep.duplicated)
	if rep.duplicated > 0 {
		fmt.Fprintf(w, ": rows the objects had run, delivered\n"+
			"                            again after their claim rolled back (%d rows reported rolled back) or a retry (%d)",
			rep.rolledBackRows, rep.retried)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  applied twice     %6d  (each tracker applies a sequence only above the last it applied;\n"+
		"                            %d runs were recognized as already applied and skipped)\n", rep.appliedTwice, rep.skipped)
	fmt.Fprintf(w, "  lost              %6d\n", rep.lost)
	fmt.Fprintf(w, "  out of order      %6d\n", rep.outOfOrder)
	for _, b := range rep.breaks {
		fmt.Fprintf(w, "                            %s\n", b)
	}
	fmt.Fprintf(w, "  left in inbox     %6d  dead-lettered %d, retried %d\n", rep.left, rep.dead, rep.retried)
	fmt.Fprintf(w, "  ledger            %6d  replies committed with their rows' settlement: %d twice, %d missing, %d stray\n",
		rep.ledgerRows, rep.ledgerTwice, rep.ledgerMissing, rep.ledgerStray)
	kills := "none (no claim was idle in a transaction when looked for)"
	if len(rep.killed) > 0 {
		pids := make([]string, len(rep.killed))
		for i, p := range rep.killed {
			pids[i] = strconv.Itoa(p)
		}
		kills = "pid " + strings.Join(pids, ", ")
	}
	fmt.Fprintf(w, "  backend killed    %s; claims rolled back %d (%d rows)\n", kills, rep.rollbacks, rep.rolledBackRows)
	fmt.Fprintf(w, "  worker restarted  %d× (graceful Stop and a new broker: %v)\n", rep.restarts, rep.restartTook.Round(time.Microsecond))
	if rep.failed() {
		fmt.Fprintln(w, "FAILED: rows lost or left, sequences out of order or applied twice, or the ledger is inconsistent")
	}
}

// redact drops the password from a URL for messages.
func redact(u string) string {
	if c, err := pgx.ParseConfig(u); err == nil {
		return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
	}
	return "the -db URL"
}
