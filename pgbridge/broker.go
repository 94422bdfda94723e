package pgbridge

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a Broker.
type Config struct {
	// Pool is the connection pool every claim, settlement and publish
	// uses. Each claimer holds one connection while it works on a claim.
	Pool *pgxpool.Pool
	// Registry holds the codecs of payload mode and of Send (nil: a
	// registry with JSON only).
	Registry *payload.Registry
	// Routes maps message type names (actor.TypeName) to the tables Routed
	// publishes them into.
	Routes map[string]Table
	// ListenNotify announces every insert with pg_notify on its table's
	// channel and wakes the subscriptions of that table — in this process
	// directly, in others through one dedicated listener connection per
	// broker. An autocommit insert notifies at most once per
	// NotifyCooldown per channel (and once more at the cooldown's end); an
	// insert in a transaction always carries its pg_notify, which Postgres
	// delivers at the commit (once per channel and transaction), so no
	// subscription is woken before the row is visible. Without
	// ListenNotify a row published in a caller's transaction may wait for
	// the subscriptions' poll (one published in a row-lock claim's
	// transaction wakes them after the claim commits).
	ListenNotify bool
	// NotifyCooldown: default 10 ms.
	NotifyCooldown time.Duration
	// Observer sees claims, settlements and failures (nil: none); package
	// pgbridge/pgmetrics has a Prometheus one.
	Observer Observer
	// Logger: default discards.
	Logger *slog.Logger
	// StatementTimeout bounds each claim and settlement statement
	// (default 30 s).
	StatementTimeout time.Duration
}

// Broker runs subscriptions and publishers on one pool. Life cycle: New,
// Subscribe, Start; then Stop (graceful: in-flight deliveries finish and
// settle) or Close (hard: in-flight rows are left to be claimed again).
// A Broker is safe for concurrent use.
type Broker struct {
	cfg    Config
	pool   *pgxpool.Pool
	reg    *payload.Registry
	routes map[string]Table
	obs    Observer
	log    *slog.Logger
	notify *notifier

	ctx    context.Context // cancelled by Close: hard stop
	cancel context.CancelFunc
	closed atomic.Bool // Stop or Close began: claim no more
	shut   atomic.Bool // Stop finished, or Close: publish no more

	mu       sync.Mutex
	subs     []*Subscription
	started  bool
	stopping chan struct{} // closed by Stop and Close: claim no more
	wg       sync.WaitGroup

	sqlCache sync.Map // table name (with its columns when two differ) → *insertSQLs
	stats    counters
}

// New makes a broker.
func New(cfg Config) (*Broker, error) {
	if cfg.Pool == nil {
		return nil, payload.NewError(payload.NotConfigured, "pgbridge.New", "no Pool")
	}
	if cfg.Registry == nil {
		cfg.Registry = payload.NewRegistry()
	}
	if !cfg.Registry.Frozen() {
		cfg.Registry.Freeze()
	}
	if cfg.NotifyCooldown <= 0 {
		cfg.NotifyCooldown = 10 * time.Millisecond
	}
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	b := &Broker{cfg: cfg, pool: cfg.Pool, reg: cfg.Registry, routes: cfg.Routes, obs: cfg.Observer,
		log: cfg.Logger, stopping: make(chan struct{})}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if cfg.ListenNotify {
		b.notify = newNotifier(b)
	}
	return b, nil
}

// Registry returns the broker's codec registry.
func (b *Broker) Registry() *payload.Registry { return b.reg }

// Start starts the subscriptions' claimers (and the listener under
// ListenNotify). Subscriptions added later start at once.
//
// It first has the server check every subscription's statements: a table
// or column a subscription names that does not exist fails Start with
// NotFound (the server unreachable: Unavailable), and nothing starts.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	if b.started {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Broker.Start", "already started")
	}
	for _, s := range b.subs {
		if err := s.check(); err != nil {
			return err
		}
	}
	b.started = true
	if b.notify != nil {
		b.wg.Add(1)
		go b.notify.listen()
	}
	for _, s := range b.subs {
		s.start()
	}
	return nil
}

// Stop stops claiming, lets every in-flight delivery finish and settle, and
// returns when all have; if ctx ends first it stops hard (Close) and returns
// ctx's error.
func (b *Broker) Stop(ctx context.Context) error {
	b.beginStop()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	defer b.shut.Store(true) // deliveries finishing during Stop still publish their replies
	select {
	case <-done:
		b.cancel()
		return nil
	case <-ctx.Done():
		b.hardStop()
		<-done
		return ctx.Err()
	}
}

// Close stops at once: handlers' contexts are cancelled and rows in work
// are not settled (they are claimed again: the row-lock transaction rolls
// back, the lease expires, the advisory lock ends with its connection).
func (b *Broker) Close() error {
	b.shut.Store(true)
	b.beginStop()
	b.hardStop()
	b.wg.Wait()
	return nil
}

// hardStop cancels handlers and store calls and ends every claim's round
// trip in flight (see claimer.arm).
func (b *Broker) hardStop() {
	b.cancel()
	b.mu.Lock()
	subs := b.subs
	b.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		cs := s.claimers
		s.mu.Unlock()
		for _, c := range cs {
			c.abort()
		}
	}
}

func (b *Broker) beginStop() {
	b.mu.Lock()
	if !b.closed.Swap(true) {
		close(b.stopping)
	}
	b.mu.Unlock()
}

// wakeTable wakes this process's subscriptions of a table.
func (b *Broker) wakeTable(name string) {
	b.mu.Lock()
	subs := b.subs
	b.mu.Unlock()
	for _, s := range subs {
		if s.Table.Name == name {
			s.wake()
		}
	}
}

func (b *Broker) wakeChannel(ch string) {
	b.mu.Lock()
	subs := b.subs
	b.mu.Unlock()
	for _, s := range subs {
		if ch == "" || s.channel == ch {
			s.wake()
		}
	}
}

// Stats are the broker's totals since New.
type Stats struct {
	Claimed        uint64 // rows claimed
	Acked          uint64
	Retried        uint64
	Dropped        uint64
	DeadLettered   uint64
	DecodeFailures uint64 // rows whose payload did not decode (settled by the decode policy)
	Decodes        uint64 // codec decode calls in payload mode (plain handlers)
	LeaseLost      uint64 // lease-form settlements or extensions that found the lease taken
	Rollbacks      uint64 // row-lock claims rolled back (ErrBatchRolledBack)
	Unknown        uint64 // row-lock claims whose commit's fate is unknown (ErrOutcomeUnknown)
	ClaimErrors    uint64 // claims that failed (Observer.ClaimFailed)
	Rescued        uint64 // lease-form rows whose lease ran out, made claimable again
	Published      uint64
	Duplicates     uint64 // messages not published: a row with their dedupe key was in the table
	Notifies       uint64 // pg_notify sent
	Wakeups        uint64 // notifications received by the listener
	NoRoute        uint64
	Reconnects     uint64 // listener reconnects
}

type counters struct {
	claimed, acked, retried, dropped, dead, decodeFailures, decodes, leaseLost, rollbacks, unknown, claimErrors,
	rescued, duplicates, published, notifies, wakeups, noRoute, reconnects atomic.Uint64
}

// Stats returns the broker's totals.
func (b *Broker) Stats() Stats {
	c := &b.stats
	return Stats{Claimed: c.claimed.Load(), Acked: c.acked.Load(), Retried: c.retried.Load(),
		Dropped: c.dropped.Load(), DeadLettered: c.dead.Load(), DecodeFailures: c.decodeFailures.Load(),
		Decodes: c.decodes.Load(), LeaseLost: c.leaseLost.Load(), Rollbacks: c.rollbacks.Load(), Unknown: c.unknown.Load(), ClaimErrors: c.claimErrors.Load(),
		Rescued:   c.rescued.Load(),
		Published: c.published.Load(), Duplicates: c.duplicates.Load(), Notifies: c.notifies.Load(), Wakeups: c.wakeups.Load(),
		NoRoute: c.noRoute.Load(), Reconnects: c.reconnects.Load()}
}

// Observer sees the bridge's events; methods must be fast and safe for
// concurrent use. Package metrics implements it.
type Observer interface {
	// Claimed: n rows claimed by a subscription.
	Claimed(sub string, n int)
	// Settled: one row settled with outcome after d from its claim.
	Settled(sub string, outcome OutcomeKind, d time.Duration)
	// DecodeFailed: a row's payload did not decode.
	DecodeFailed(sub string)
	// LeaseLost: a lease-form row's lease was taken over.
	LeaseLost(sub string)
	// RolledBack: a row-lock claim of n rows rolled back.
	RolledBack(sub string, n int)
	// ClaimFailed: a claim of sub failed (err): nothing was claimed, and
	// the subscription claims again after its poll interval.
	ClaimFailed(sub string, err error)
	// Woken: a notification woke the subscriptions of a channel.
	Woken(channel string)
}

type nopObserver struct{}

func (nopObserver) Claimed(string, int)                        {}
func (nopObserver) Settled(string, OutcomeKind, time.Duration) {}
func (nopObserver) DecodeFailed(string)                        {}
func (nopObserver) LeaseLost(string)                           {}
func (nopObserver) RolledBack(string, int)                     {}
func (nopObserver) ClaimFailed(string, error)                  {}
func (nopObserver) Woken(string)                               {}

// backlogCap is the most ready rows Backlog counts: past it the count is
// BacklogCapped (a count of a huge table costs as much as reading it).
const backlogCap = 1_000_000

// Backlog is how much a subscription has to do.
type Backlog struct {
	Subscription string
	// Ready is the number of rows claimable now (at most 1,000,000; Capped
	// when there are more). In an ordered subscription, only each key's
	// oldest row is claimable.
	Ready  int64
	Capped bool
	// OldestReady is how long the next row the subscription will claim has
	// been ready (since its run_at); 0 when none is.
	OldestReady time.Duration
}

// Backlog reports each subscription's backlog, with one statement per
// subscription (a count over the table's ready index, up to its cap).
func (b *Broker) Backlog(ctx context.Context) ([]Backlog, error) {
	b.mu.Lock()
	subs := slices.Clone(b.subs)
	b.mu.Unlock()
	out := make([]Backlog, 0, len(subs))
	for _, s := range subs {
		var n int64
		var age *float64
		if err := b.pool.QueryRow(ctx, s.sql.backlog).Scan(&n, &age); err != nil {
			return out, dbError("pgbridge.Backlog", err)
		}
		bl := Backlog{Subscription: s.Name, Ready: n, Capped: n >= backlogCap}
		if age != nil && *age > 0 {
			bl.OldestReady = time.Duration(*age * float64(time.Second))
		}
		out = append(out, bl)
	}
	return out, nil
}
