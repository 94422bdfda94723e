package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pingIfBroken is the renewal pool's ShouldPing: it pings a connection
// before a renewal uses it only if a read of what is already there (no
// round trip: pgconn's CheckConn) finds it broken — after a database
// restart, the server closed it — so that the ping fails and the pool
// takes another. pgxpool's default pings every connection idle for a
// second: on a database whose round trip is 5 s, that doubled a renewal,
// made it outlast its bound, and the connection it closed took round
// trips more to open again. (pgx prefers Ping to CheckConn except on a
// high latency connection, which is the case this pool is for.)
func pingIfBroken(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.Conn.PgConn().CheckConn() != nil //nolint:staticcheck // see above: no round trip on a slow database
}

// LeasePoolConns is the size of the lease pool OpenPools opens.
const LeasePoolConns = 3

// RenewPoolConns is the size of the renewal pool OpenPools opens, all of
// them opened at once and kept: three connections for each of a host's
// two leases (the Location Store's and the membership's), which renew on
// schedules of their own. A host sends one renewal at a time, and on a
// database whose round trip is longer than the lease up to three of each
// lease's beside each other, so that they land once per spacing; a
// connection opened then would take round trips more to open.
const RenewPoolConns = 6

// Pools are the three pools a host on Postgres uses (OpenPools). Their
// fields go to Options and MembershipOptions:
//
//	store, _ := pgstore.Open(ctx, p.Work, pgstore.Options{LeasePool: p.Leases, RenewPool: p.Renewals})
//	members, _ := pgstore.OpenMembership(ctx, p.Leases, pgstore.MembershipOptions{RenewPool: p.Renewals})
type Pools struct {
	// Work runs the store's other calls and the objects' state (pgxpool's
	// defaults, as the URL says).
	Work *pgxpool.Pool
	// Leases runs the peers' lease checks (Store.Lease) and the
	// membership's calls other than renewals: its watch's reads, its
	// sweeps, joins and state changes (LeasePoolConns connections).
	Leases *pgxpool.Pool
	// Renewals runs the host's renewals only (RenewPoolConns connections,
	// opened at once and kept open).
	Renewals *pgxpool.Pool
}

// Close closes the three pools.
func (p *Pools) Close() {
	p.Renewals.Close()
	p.Leases.Close()
	p.Work.Close()
}

// OpenPools opens the pools a host on Postgres needs on database url; the
// caller closes them (Pools.Close). On an error none is open.
//
// A host's renewals must never wait for a connection behind other calls.
// After a crash every object of the dead host is taken over with a store
// read and durable writes, and after an outage every held message is
// looked up and every waiting state written at once: that is the work
// pool's. While the database is slow, each of the membership's reads and
// sweeps and each lease check of a suspected peer holds a lease pool
// connection for a round trip, and there are more of them than
// connections. A renewal that waits past the lease ends the host's run
// (its peers see it fail) though nothing is wrong with it: on a database
// answering in 2 s, a renewal that waited 2 s more for a lease pool
// connection landed 4 s after the one before it, past a 3.5 s lease. The
// renewals have a pool of their own, which nothing else uses.
func OpenPools(ctx context.Context, url string) (*Pools, error) {
	return OpenPoolsWith(ctx, url, PoolsOptions{})
}

// The pools' names, as PoolsOptions.OnStatement names them.
const (
	PoolWork     = "work"
	PoolLeases   = "leases"
	PoolRenewals = "renewals"
)

// PoolsOptions are the options of OpenPoolsWith.
type PoolsOptions struct {
	// OnStatement, when set, is called as each statement (a Query,
	// QueryRow or Exec; a batch, such as a renewal, as one) of the pools
	// ends: pool is PoolWork, PoolLeases
	// or PoolRenewals, took its time from the call to its end (the wait
	// for a connection not included), err its error. It runs on the
	// caller's goroutine and must be fast (a histogram's Observe).
	OnStatement func(pool string, took time.Duration, err error)
}

// OpenPoolsWith is OpenPools with opts.
func OpenPoolsWith(ctx context.Context, url string, opts PoolsOptions) (*Pools, error) {
	wcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	lcfg := wcfg.Copy()
	lcfg.MaxConns, lcfg.MinConns = LeasePoolConns, 0
	rcfg := wcfg.Copy()
	rcfg.MaxConns, rcfg.MinConns = RenewPoolConns, RenewPoolConns
	rcfg.ShouldPing = pingIfBroken
	if opts.OnStatement != nil {
		wcfg.ConnConfig.Tracer = statementTimer{PoolWork, opts.OnStatement}
		lcfg.ConnConfig.Tracer = statementTimer{PoolLeases, opts.OnStatement}
		rcfg.ConnConfig.Tracer = statementTimer{PoolRenewals, opts.OnStatement}
	}
	p := &Pools{}
	if p.Work, err = pgxpool.NewWithConfig(ctx, wcfg); err != nil {
		return nil, err
	}
	if p.Leases, err = pgxpool.NewWithConfig(ctx, lcfg); err != nil {
		p.Work.Close()
		return nil, err
	}
	if p.Renewals, err = pgxpool.NewWithConfig(ctx, rcfg); err != nil {
		p.Leases.Close()
		p.Work.Close()
		return nil, err
	}
	return p, nil
}

// statementTimer is a pgx.QueryTracer and BatchTracer that times each
// statement (a batch as one) of one pool for PoolsOptions.OnStatement.
type statementTimer struct {
	pool string
	on   func(pool string, took time.Duration, err error)
}

// statementStart is the context key of a statement's start.
type statementStart struct{}

// TraceQueryStart notes when the statement began (pgx.QueryTracer).
func (s statementTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, statementStart{}, time.Now())
}

// TraceQueryEnd reports the statement's time and error (pgx.QueryTracer).
func (s statementTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if began, ok := ctx.Value(statementStart{}).(time.Time); ok {
		s.on(s.pool, time.Since(began), data.Err)
	}
}

// TraceBatchStart notes when a batch began (pgx.BatchTracer): a batch is
// timed as one statement.
func (s statementTimer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, statementStart{}, time.Now())
}

// TraceBatchQuery does nothing: the batch is timed as a whole.
func (s statementTimer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd reports the batch's time and error (pgx.BatchTracer).
func (s statementTimer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if began, ok := ctx.Value(statementStart{}).(time.Time); ok {
		s.on(s.pool, time.Since(began), data.Err)
	}
}
