package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestRenewalsNeverWaitForALeasePoolConnection: with OpenPools' pools, a
// host's renewals (Store.RenewLease, Membership.Renew) run on the renewal
// pool, so they are answered while every connection of the lease pool is
// held — as the membership's reads and sweeps and the lease checks of
// suspected peers hold them while the database is slow. The lease pool's
// calls (Store.Lease) still run there. The bound on each call is a
// failure bound only: a renewal that waited for a lease pool connection
// would wait until the test releases them, after the bound.
func TestRenewalsNeverWaitForALeasePoolConnection(t *testing.T) {
	ctx := context.Background()
	pools := openPools(t)
	s, err := pgstore.Open(ctx, pools.Work, pgstore.Options{LeasePool: pools.Leases, RenewPool: pools.Renewals})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pgstore.OpenMembership(ctx, pools.Leases, pgstore.MembershipOptions{RenewPool: pools.Renewals})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Join(ctx, membership.Member{Name: "h", Address: "10.0.0.1:7000", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	var held []*pgxpool.Conn
	for range pgstore.LeasePoolConns {
		c, err := pools.Leases.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	release := func() {
		for _, c := range held {
			c.Release()
		}
		held = nil
	}
	defer release() // before the pools close, which waits for them
	bound := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 20*time.Second) }
	c1, cancel1 := bound()
	defer cancel1()
	if _, err := s.RenewLease(c1, "h", 1, time.Minute); err != nil {
		t.Fatalf("RenewLease with every lease pool connection held: %v", err)
	}
	c2, cancel2 := bound()
	defer cancel2()
	if _, err := m.Renew(c2, "h", 1); err != nil {
		t.Fatalf("Membership.Renew with every lease pool connection held: %v", err)
	}
	// The lease checks are the lease pool's: with its connections held,
	// one cannot be answered (whatever the machine's speed).
	c3, cancel3 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel3()
	if _, _, err := s.Lease(c3, "h"); err == nil {
		t.Fatal("Store.Lease answered with every lease pool connection held: it does not run on the lease pool")
	}
	release()
	if _, _, err := s.Lease(ctx, "h"); err != nil {
		t.Fatalf("Store.Lease: %v", err)
	}
}

// TestTheRenewalPoolPingsOnlyAConnectionFoundBroken: the renewal pool does
// not ping a healthy connection before a renewal, however long it was
// idle — a ping is a round trip, which on a slow database doubles the
// renewal — but does ping one whose server closed it (a restart), so the
// pool takes another instead of failing the renewal.
func TestTheRenewalPoolPingsOnlyAConnectionFoundBroken(t *testing.T) {
	ctx := context.Background()
	pools := openPools(t)
	should := pools.Renewals.Config().ShouldPing
	c, err := pools.Renewals.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if should(ctx, pgxpool.ShouldPingParams{Conn: c.Conn(), IdleDuration: time.Hour}) {
		t.Fatal("a healthy connection idle for an hour is pinged")
	}
	pid := c.Conn().PgConn().PID()
	if _, err := pools.Work.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute) // a failure bound: the server's close arrives at once
	for !should(ctx, pgxpool.ShouldPingParams{Conn: c.Conn(), IdleDuration: time.Millisecond}) {
		if time.Now().After(deadline) {
			t.Fatal("a connection whose server closed it is not pinged")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openPools opens OpenPools' pools on a throwaway database, closed when
// the test ends (after its deferred calls: connections it holds are
// released first).
func openPools(t *testing.T) *pgstore.Pools {
	t.Helper()
	pools, err := pgstore.OpenPools(context.Background(), pgtest.New(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	return pools
}

// OpenPoolsWith's OnStatement is told of each statement, with its pool,
// its time and its error: a renewal's on the renewal pool, a statement
// that fails with its error.
func TestEachStatementIsTimedWithItsPool(t *testing.T) {
	type seen struct {
		pool string
		took time.Duration
		err  error
	}
	var mu sync.Mutex
	var all []seen
	ctx := context.Background()
	pools, err := pgstore.OpenPoolsWith(ctx, pgtest.New(t).URL, pgstore.PoolsOptions{OnStatement: func(pool string, took time.Duration, err error) {
		mu.Lock()
		all = append(all, seen{pool, took, err})
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer pools.Close()
	store, err := pgstore.Open(ctx, pools.Work, pgstore.Options{LeasePool: pools.Leases, RenewPool: pools.Renewals})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.RenewLease(ctx, "h", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Leases.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 did not fail")
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	failed := map[string]int{}
	for _, s := range all {
		count[s.pool]++
		if s.err != nil {
			failed[s.pool]++
		}
		if s.took <= 0 {
			t.Errorf("a statement on %s took %v", s.pool, s.took)
		}
	}
	if count[pgstore.PoolWork] == 0 || count[pgstore.PoolRenewals] == 0 || failed[pgstore.PoolLeases] != 1 || failed[pgstore.PoolRenewals] != 0 {
		t.Fatalf("statements %v, failed %v; want some on the work and renewal pools, one failed on the lease pool", count, failed)
	}
}
