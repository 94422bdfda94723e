package pgstore

import (
	"context"

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
	wcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	lcfg := wcfg.Copy()
	lcfg.MaxConns, lcfg.MinConns = LeasePoolConns, 0
	rcfg := wcfg.Copy()
	rcfg.MaxConns, rcfg.MinConns = RenewPoolConns, RenewPoolConns
	rcfg.ShouldPing = pingIfBroken
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
