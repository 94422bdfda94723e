package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgbridge"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// Options are the knobs of one benchmark run.
type Options struct {
	Rows       int           // jobs / rows per measurement
	Keys       int           // distinct keys of the berth rows (advisory form: one row per key at a time)
	Timeout    time.Duration // bound on one drain
	Vacuum     bool          // VACUUM ANALYZE the table after the (untimed) insert
	PoolConns  int32         // pgxpool MaxConns of the measured client (both systems)
	InsertSize int           // jobs per InsertManyFast / CopyFrom call
	Work       time.Duration // how long each job / row's handler waits before it succeeds (0: returns at once)
}

// DefaultOptions are the defaults of the command and of the Go benchmarks.
func DefaultOptions() Options {
	return Options{Rows: 50_000, Keys: 1000, Timeout: 5 * time.Minute, Vacuum: true, PoolConns: 20, InsertSize: 5000}
}

// The modes a result is labelled with: how the system takes its jobs.
const (
	ModePerRow     = "one transaction per row" // berth, Batch 1: each row claimed and settled on its own
	ModeBatchClaim = "batched claim"           // berth, Batch > 1: up to Batch rows a claim, settled with array statements
	ModeBatchFetch = "batched fetch"           // River: its producer fetches many jobs in one statement, its completer completes them in batches
)

// Result is one measured drain.
type Result struct {
	System  string
	Mode    string
	Config  string
	Rows    int
	Elapsed time.Duration
}

// RowsPerSec is the measured throughput.
func (r Result) RowsPerSec() float64 { return float64(r.Rows) / r.Elapsed.Seconds() }

// RiverConfig is one River client configuration.
type RiverConfig struct {
	MaxWorkers        int
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
}

func (c RiverConfig) String() string {
	return fmt.Sprintf("MaxWorkers=%d FetchCooldown=%s FetchPollInterval=%s", c.MaxWorkers, c.FetchCooldown, c.FetchPollInterval)
}

// DefaultRiverConfigs are the River settings tried by default: the first is
// the brief's (100 workers), the others River's own `river bench` settings
// (FetchCooldown 2 ms, FetchPollInterval 20 ms, MaxWorkers 2000) and their
// neighbours.
func DefaultRiverConfigs() []RiverConfig {
	return []RiverConfig{
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: 20 * time.Millisecond},
		{MaxWorkers: 500, FetchCooldown: time.Millisecond, FetchPollInterval: 20 * time.Millisecond},
		{MaxWorkers: 1000, FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond},
		{MaxWorkers: 2000, FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond},
	}
}

// BerthConfig is one pgbridge subscription configuration.
type BerthConfig struct {
	Label       string
	Form        pgbridge.Form
	Workers     int
	Batch       int
	Concurrency int // Subscription.Concurrency (0: its default, min(Batch, pgbridge.DefaultConcurrency))
}

// String describes the configuration, with the Concurrency it runs with.
func (c BerthConfig) String() string {
	return fmt.Sprintf("%s Workers=%d Batch=%d Concurrency=%d", c.Form, c.Workers, c.Batch, c.concurrency())
}

// concurrency is the Subscription.Concurrency the configuration runs with.
func (c BerthConfig) concurrency() int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return min(max(c.Batch, 1), pgbridge.DefaultConcurrency)
}

// Mode is ModePerRow for Batch 1, ModeBatchClaim for larger batches.
func (c BerthConfig) Mode() string {
	if c.Batch > 1 {
		return ModeBatchClaim
	}
	return ModePerRow
}

// ParseBerthLabel reads a berth configuration label: the form (rowlock,
// lease or advisory), then, each optional and separated by "-", w<N>
// (Workers, default 1), b<N> (Batch, default 1), c<N> (Concurrency, default
// min(Batch, pgbridge.DefaultConcurrency)), or "batch" (Workers 2, Batch 1000) — for example
// rowlock-w8, lease-batch, rowlock-w2-b1000-c200.
func ParseBerthLabel(label string) (BerthConfig, error) {
	c := BerthConfig{Label: label, Workers: 1, Batch: 1}
	parts := strings.Split(label, "-")
	switch parts[0] {
	case "rowlock":
		c.Form = pgbridge.RowLock
	case "lease":
		c.Form = pgbridge.Lease
	case "advisory":
		c.Form = pgbridge.Advisory
	default:
		return c, fmt.Errorf("berth configuration %q: the form is rowlock, lease or advisory", label)
	}
	for _, p := range parts[1:] {
		if p == "batch" {
			c.Workers, c.Batch = 2, 1000
			continue
		}
		var dst *int
		switch {
		case strings.HasPrefix(p, "w"):
			dst = &c.Workers
		case strings.HasPrefix(p, "b"):
			dst = &c.Batch
		case strings.HasPrefix(p, "c"):
			dst = &c.Concurrency
		default:
			return c, fmt.Errorf("berth configuration %q: %q is not w<N>, b<N>, c<N> or batch", label, p)
		}
		n, err := strconv.Atoi(p[1:])
		if err != nil || n < 1 {
			return c, fmt.Errorf("berth configuration %q: %q needs a positive number", label, p)
		}
		*dst = n
	}
	return c, nil
}

// DefaultBerthConfigs are the pgbridge settings measured by default.
func DefaultBerthConfigs() []BerthConfig {
	return mustBerth("rowlock-w4", "rowlock-w8", "rowlock-batch", "lease-batch", "advisory-w8", "advisory-batch")
}

// ExtraBerthConfigs are examples of further pgbridge settings, measured
// only when named in -berth (smaller batches, fewer workers, more rows of a
// claim at once); any label ParseBerthLabel reads may be named.
func ExtraBerthConfigs() []BerthConfig {
	return mustBerth("rowlock-w2", "rowlock-w16", "rowlock-w4-b10", "rowlock-w4-b100", "rowlock-w1-b1000",
		"rowlock-w2-b1000-c200", "lease-w8", "lease-w4-b100", "lease-w2-b1000-c200", "advisory-w4-b100")
}

func mustBerth(labels ...string) []BerthConfig {
	out := make([]BerthConfig, len(labels))
	for i, l := range labels {
		c, err := ParseBerthLabel(l)
		if err != nil {
			panic(err)
		}
		out[i] = c
	}
	return out
}

// Env is the Postgres server the measurements run on: each measurement gets
// a fresh database on it, dropped afterwards.
type Env struct {
	AdminURL string
	srv      *pgtest.Server
	durable  bool
	seq      int
}

// NewEnv uses the server of adminURL (a database on it the role can CREATE
// DATABASE from), or, when adminURL is "", starts a throwaway one: with
// Postgres's default durability (pgtest.StartDurable: fsync,
// full_page_writes and synchronous_commit on) if durable, else with fsync
// off (pgtest.Start, the library's test server).
func NewEnv(adminURL string, durable bool) (*Env, error) {
	if adminURL != "" {
		return &Env{AdminURL: adminURL}, nil
	}
	start := pgtest.Start
	if durable {
		start = pgtest.StartDurable
	}
	srv, err := start()
	if err != nil {
		return nil, err
	}
	return &Env{AdminURL: srv.URL("postgres"), srv: srv, durable: durable}, nil
}

// Close stops the throwaway server, if one was started.
func (e *Env) Close() {
	if e.srv != nil {
		e.srv.Stop()
	}
}

// Describe names the server.
func (e *Env) Describe() string {
	switch {
	case e.srv != nil && e.durable:
		return "throwaway durable server (pgtest.StartDurable) in " + e.srv.Dir()
	case e.srv != nil:
		return "throwaway fast server (pgtest.Start, -fsync=false) in " + e.srv.Dir()
	}
	return "server of -db"
}

// Durability reports the server's fsync, full_page_writes and
// synchronous_commit settings, as the server shows them.
func (e *Env) Durability(ctx context.Context) string {
	conn, err := pgx.Connect(ctx, e.AdminURL)
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var s []string
	for _, name := range []string{"fsync", "full_page_writes", "synchronous_commit"} {
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			v = "?"
		}
		s = append(s, name+"="+v)
	}
	return strings.Join(s, " ")
}

// ServerVersion is the server's version string.
func (e *Env) ServerVersion(ctx context.Context) string {
	conn, err := pgx.Connect(ctx, e.AdminURL)
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	return v
}

// database creates a fresh database and returns its URL and a drop func.
func (e *Env) database(ctx context.Context, prefix string) (string, func(), error) {
	e.seq++
	name := fmt.Sprintf("bench_%s_%d_%d", prefix, time.Now().UnixNano()%1e9, e.seq)
	u, err := pgtest.CreateDatabase(ctx, e.AdminURL, name)
	if err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	return u, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pgtest.DropDatabase(dctx, e.AdminURL, name)
	}, nil
}

func newPool(ctx context.Context, url string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	return pgxpool.NewWithConfig(ctx, cfg)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// --- River -----------------------------------------------------------------

// NoopArgs is River's no-op job.
type NoopArgs struct {
	N int `json:"n"`
}

// Kind names the job kind.
func (NoopArgs) Kind() string { return "noop" }

// NoopWorker works a NoopArgs job by waiting Wait (Options.Work; 0: not at
// all) and succeeding.
type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
	Wait time.Duration
}

// Work waits w.Wait, or until ctx ends (then it fails with ctx's error).
func (w NoopWorker) Work(ctx context.Context, _ *river.Job[NoopArgs]) error {
	return wait(ctx, w.Wait)
}

// wait is the handler work of both systems: it sleeps d, or returns ctx's
// error if ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RunRiver migrates River's schema into a fresh database, inserts o.Rows
// jobs (untimed) and times a client draining them; completion is counted on
// the client's subscription to completed events (emitted after the
// completer has written the completed state).
func RunRiver(ctx context.Context, env *Env, o Options, rc RiverConfig) (Result, error) {
	res := Result{System: "River v0.51.2", Mode: ModeBatchFetch, Config: rc.String(), Rows: o.Rows}
	url, drop, err := env.database(ctx, "river")
	if err != nil {
		return res, err
	}
	defer drop()
	pool, err := newPool(ctx, url, o.PoolConns)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return res, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, fmt.Errorf("rivermigrate: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, NoopWorker{Wait: o.Work})

	// Insert with a client that works no queues (untimed).
	ins, err := river.NewClient(driver, &river.Config{Workers: workers, Logger: quiet})
	if err != nil {
		return res, err
	}
	params := make([]river.InsertManyParams, 0, o.InsertSize)
	for i := 0; i < o.Rows; {
		params = params[:0]
		for ; i < o.Rows && len(params) < o.InsertSize; i++ {
			params = append(params, river.InsertManyParams{Args: NoopArgs{N: i}})
		}
		if _, err := ins.InsertManyFast(ctx, params); err != nil {
			return res, fmt.Errorf("InsertManyFast: %w", err)
		}
	}
	if o.Vacuum {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
			return res, err
		}
	}

	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     rc.FetchCooldown,
		FetchPollInterval: rc.FetchPollInterval,
		Logger:            quiet,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: rc.MaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return res, err
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: o.Rows + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancelSub()

	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	if err := client.Start(dctx); err != nil {
		return res, err
	}
	done, bad := 0, 0
	for done < o.Rows && err == nil {
		select {
		case ev := <-events:
			if ev == nil {
				err = errors.New("river: subscription closed")
			} else if ev.Kind == river.EventKindJobCompleted {
				done++
			} else {
				bad++
			}
		case <-dctx.Done():
			err = fmt.Errorf("river: %d of %d jobs completed: %w", done, o.Rows, dctx.Err())
		}
	}
	res.Elapsed = time.Since(start)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if serr := client.Stop(sctx); serr != nil && err == nil {
		err = fmt.Errorf("river: stop: %w", serr)
	}
	if err != nil {
		return res, err
	}
	if bad > 0 {
		return res, fmt.Errorf("river: %d jobs failed or were cancelled", bad)
	}
	var completed int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = $1", string(rivertype.JobStateCompleted)).Scan(&completed); err != nil {
		return res, err
	}
	if completed != o.Rows {
		return res, fmt.Errorf("river: %d rows completed in river_job, want %d", completed, o.Rows)
	}
	return res, nil
}

// --- berth pgbridge ------------------------------------------------------------

// Job is the berth no-op message (its handler waits Options.Work).
type Job struct {
	N int
}

// RunBerth migrates an inbox table into a fresh database, inserts o.Rows
// rows of Job (untimed; the same columns and bytes Send writes, through
// COPY) and times a broker with one subscription draining them; completion
// is counted by the subscription's OnSettled (called after each row's
// settlement committed).
func RunBerth(ctx context.Context, env *Env, o Options, bc BerthConfig) (Result, error) {
	res := Result{System: "berth pgbridge", Mode: bc.Mode(), Config: bc.String(), Rows: o.Rows}
	url, drop, err := env.database(ctx, "berth")
	if err != nil {
		return res, err
	}
	defer drop()
	pool, err := newPool(ctx, url, o.PoolConns)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	tb := pgbridge.Table{Name: "inbox"}
	if err := pgbridge.Migrate(ctx, pool, tb); err != nil {
		return res, err
	}
	b, err := pgbridge.New(pgbridge.Config{Pool: pool})
	if err != nil {
		return res, err
	}
	defer b.Close()
	if err := insertBerth(ctx, b, pool, o); err != nil {
		return res, err
	}
	if o.Vacuum {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE inbox"); err != nil {
			return res, err
		}
	}

	var settled, failed atomic.Int64
	finished := make(chan struct{})
	n := int64(o.Rows)
	sub := &pgbridge.Subscription{
		Table: tb, Form: bc.Form, Workers: bc.Workers, Batch: bc.Batch, Concurrency: bc.Concurrency,
		PollInterval: 10 * time.Millisecond,
		OnSettled: func(d *pgbridge.Delivery, oc pgbridge.Outcome, err error) {
			if err != nil || oc.Kind != pgbridge.KindAck {
				failed.Add(1)
				return
			}
			if settled.Add(1) == n {
				close(finished)
			}
		},
	}
	work := o.Work
	err = b.Subscribe(sub, pgbridge.Messages(func(ctx context.Context, d *pgbridge.Delivery, m Job) pgbridge.Outcome {
		if wait(ctx, work) != nil {
			return pgbridge.Retry // counted as failed by OnSettled
		}
		return pgbridge.Ack
	}))
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := b.Start(); err != nil {
		return res, err
	}
	select {
	case <-finished:
	case <-time.After(o.Timeout):
		err = fmt.Errorf("berth: %d of %d rows settled (%d failed) after %s", settled.Load(), o.Rows, failed.Load(), o.Timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	res.Elapsed = time.Since(start)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if serr := b.Stop(sctx); serr != nil && err == nil {
		err = fmt.Errorf("berth: stop: %w", serr)
	}
	if err != nil {
		return res, err
	}
	if f := failed.Load(); f > 0 {
		return res, fmt.Errorf("berth: %d settlements failed or were not Ack", f)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM inbox").Scan(&left); err != nil {
		return res, err
	}
	st := b.Stats()
	if left != 0 || st.Acked != uint64(o.Rows) || st.Claimed != uint64(o.Rows) {
		return res, fmt.Errorf("berth: %d rows left, stats %+v", left, st)
	}
	return res, nil
}

// insertBerth writes o.Rows rows as Send[Job] through a Repository would
// (key, type, content_type, payload encoded by the broker's registry), in
// COPY batches.
func insertBerth(ctx context.Context, b *pgbridge.Broker, pool *pgxpool.Pool, o Options) error {
	ce, err := payload.SendCodecFor[Job](b.Registry())
	if err != nil {
		return err
	}
	typ, ct := actor.TypeName[Job](), ce.ContentType()
	keys := max(o.Keys, 1)
	rows := make([][]any, 0, o.InsertSize)
	for i := 0; i < o.Rows; {
		rows = rows[:0]
		for ; i < o.Rows && len(rows) < o.InsertSize; i++ {
			body, err := ce.Codec().Encode(nil, &Job{N: i})
			if err != nil {
				return err
			}
			rows = append(rows, []any{"k" + strconv.Itoa(i%keys), typ, ct, body})
		}
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{"inbox"}, []string{"key", "type", "content_type", "payload"},
			pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
	}
	return nil
}

// --- report ------------------------------------------------------------------

// Median returns the result with the median elapsed time.
func Median(rs []Result) Result {
	s := append([]Result(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].Elapsed < s[j].Elapsed })
	return s[len(s)/2]
}

// Table renders results as a markdown table, with the ratio of each
// throughput to the best River result.
func Table(rs []Result) string {
	best := 0.0
	for _, r := range rs {
		if strings.HasPrefix(r.System, "River") && r.RowsPerSec() > best {
			best = r.RowsPerSec()
		}
	}
	var sb strings.Builder
	sb.WriteString("| system | mode | configuration | rows | seconds | rows/s | vs River best |\n")
	sb.WriteString("|---|---|---|--:|--:|--:|--:|\n")
	for _, r := range rs {
		ratio := "n/a"
		if best > 0 {
			ratio = fmt.Sprintf("%.2f×", r.RowsPerSec()/best)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %d | %.3f | %.0f | %s |\n", r.System, r.Mode, r.Config, r.Rows, r.Elapsed.Seconds(), r.RowsPerSec(), ratio)
	}
	return sb.String()
}
