package pgstore_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/relocation/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.MainAll(m) }

// newPool returns a pool on a fresh database, closed when t ends.
func newPool(t *testing.T) (*pgxpool.Pool, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, db
}

// newStore opens a Store with a manual clock on a fresh database.
func newStore(t *testing.T) *pgstore.Store {
	t.Helper()
	pool, _ := newPool(t)
	s, err := pgstore.Open(context.Background(), pool, pgstore.Options{ManualClock: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoreConformance runs relocation/storetest over the Postgres store,
// with its manual clock, so the lease-expiry checks run too.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) relocation.Store { return newStore(t) },
		Advance: func(t *testing.T, s relocation.Store, d time.Duration) {
			s.(*pgstore.Store).Advance(d)
		},
	})
}

var bg = context.Background()

// Every write needs the writer's live lease: Commit, Preserve and Delete
// by an owner whose lease ran out are ErrLeaseExpired and write nothing,
// while a stale expectation is still a conflict (the CAS is judged first).
func TestWritesByAnOwnerPastItsLeaseAreErrLeaseExpired(t *testing.T) {
	s := newStore(t)
	obj := relocation.Object{Kind: "k", ID: "1"}
	if _, err := s.RenewLease(bg, "A", 1, 0); err != nil {
		t.Fatal(err)
	}
	r, err := s.Reserve(bg, obj, "A")
	if err != nil {
		t.Fatal(err)
	}
	s.Advance(relocation.LeaseTTL)
	if _, err := s.Commit(bg, obj, r.Ownership); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("Commit past the owner's lease = %v, want ErrLeaseExpired", err)
	}
	if _, err := s.Preserve(bg, obj, r.Ownership, nil); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("Preserve past the owner's lease = %v, want ErrLeaseExpired", err)
	}
	if err := s.Delete(bg, obj, r.Ownership); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("Delete past the owner's lease = %v, want ErrLeaseExpired", err)
	}
	stale := r.Ownership
	stale.Version++
	var ce *relocation.ConflictError
	if _, err := s.Commit(bg, obj, stale); !errors.As(err, &ce) {
		t.Fatalf("Commit with a stale expectation past the lease = %v, want a conflict", err)
	}
	if got, err := s.Get(bg, obj); err != nil || got.Ownership != r.Ownership || got.State != r.State {
		t.Fatalf("row after refused writes = %+v, %v; want %+v", got, err, r)
	}
	// The renewed owner writes again.
	if _, err := s.RenewLease(bg, "A", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(bg, obj, r.Ownership); err != nil {
		t.Fatalf("Commit after renewal = %v", err)
	}
}

// Generations above math.MaxInt64 do not fit the bigint columns: refused
// with a typed error rather than stored wrapped.
func TestGenerationAboveMaxInt64IsRefused(t *testing.T) {
	s := newStore(t)
	if _, err := s.RenewLease(bg, "A", 1<<63, 0); !errors.Is(err, pgstore.ErrGenerationRange) || !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("RenewLease(1<<63) = %v, want ErrGenerationRange", err)
	}
	if _, ok, _ := s.Lease(bg, "A"); ok {
		t.Fatal("a refused RenewLease made a lease")
	}
}

// restartPool is newPool without the pool's liveness ping, so that after a
// server restart its dead connections are handed out and fail, as they
// would under load.
func restartPool(t *testing.T) (*pgxpool.Pool, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	if db.Server == nil {
		t.Skip("skipped: BERTH_TEST_DATABASE_URL names an external server, which this test does not restart")
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, db
}

// A Postgres restart mid-use: the calls that hit the cut connections fail
// with kind Unavailable (retryable), and the same Store works again once
// the server is back, with the data committed before the restart.
func TestRestartGivesUnavailableThenTheSameStoreWorks(t *testing.T) {
	pool, db := restartPool(t)
	s, err := pgstore.Open(bg, pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obj := relocation.Object{Kind: "k", ID: "restart"}
	if _, err := s.RenewLease(bg, "A", 1, 0); err != nil {
		t.Fatal(err)
	}
	r, err := s.Reserve(bg, obj, "A")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Server.Restart(); err != nil {
		t.Fatal(err)
	}
	// The pool's idle connection is dead: the first call fails.
	_, err = s.Get(bg, obj)
	if err == nil {
		t.Fatal("Get over a connection the restart cut succeeded")
	}
	if !errors.Is(err, payload.Unavailable) {
		t.Fatalf("Get after a restart = %v, want kind Unavailable", err)
	}
	var got relocation.Row
	testutil.WaitFor(t, "the store to work again", func() bool {
		got, err = s.Get(bg, obj)
		if err != nil && !errors.Is(err, payload.Unavailable) {
			t.Fatalf("Get while the server comes back = %v, want kind Unavailable", err)
		}
		return err == nil
	})
	if got.Ownership != r.Ownership || got.State != r.State {
		t.Fatalf("row after the restart = %+v, want %+v", got, r)
	}
	// A's renewer runs again, as a host's would: a restart that took
	// longer than the lease (a loaded machine) must not fail the Commit
	// for a lease nobody renewed meanwhile.
	if _, err := s.RenewLease(bg, "A", 1, 0); err != nil {
		t.Fatalf("RenewLease after the restart = %v", err)
	}
	if _, err := s.Commit(bg, obj, r.Ownership); err != nil {
		t.Fatalf("Commit after the restart = %v", err)
	}
}

// A server that refuses connections is kind Unavailable too.
func TestConnectionRefusedIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	dead, err := pgxpool.New(bg, "postgres://postgres@"+addr+"/x?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	if _, err := pgstore.Open(bg, dead, pgstore.Options{}); !errors.Is(err, payload.Unavailable) {
		t.Fatalf("Open on a refused connection = %v, want kind Unavailable", err)
	}
}

// A host whose client stalls inside its lease renewal — after the
// statement that locks its lease row — holds nothing up: the renewal runs
// whole on the server (one batch), so the host's next run (a restart
// under the same name) takes its lease at once, and the stalled call, let
// go, does not take it back.
func TestAHostStalledInsideItsLeaseRenewalDoesNotHoldItsRow(t *testing.T) {
	ctx := context.Background()
	pool, db := newPool(t)
	tr := newStallTracer("FROM pgstore_leases WHERE host = $1 FOR UPDATE")
	oldRun, err := pgstore.Open(ctx, stallingPool(t, db.URL, tr), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	newRun, err := pgstore.Open(ctx, pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	if _, err := oldRun.RenewLease(ctx, "h", 1, ttl); err != nil {
		t.Fatal(err)
	}
	var stalledLease relocation.Lease // written before the call's error is sent
	renewed := tr.during(t, func() error {
		var err error
		stalledLease, err = oldRun.RenewLease(ctx, "h", 1, ttl)
		return err
	})
	var l relocation.Lease
	testutil.WaitForWithin(t, "the next run of the host to take its lease", time.Minute, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		l, err = newRun.RenewLease(cctx, "h", 2, ttl)
		return err == nil
	})
	if l.Gen != 2 {
		t.Fatalf("the next run's lease is of generation %d; want 2", l.Gen)
	}
	tr.letGo()
	switch err := <-renewed; {
	case err == nil && stalledLease.Gen != 1:
		t.Fatalf("the stalled renewal returned a lease of generation %d; want 1 (it ran before the next run's)", stalledLease.Gen)
	case err != nil && payload.KindOf(err) != payload.Unavailable:
		t.Errorf("the stalled renewal's error %v is of kind %v; want none or Unavailable (a stall its caller retries)", err, payload.KindOf(err))
	}
	if cur, ok, err := newRun.Lease(ctx, "h"); err != nil || !ok || cur.Gen != 2 {
		t.Fatalf("after the stalled renewal was let go the lease is %+v (found %v, %v); want the next run's, generation 2", cur, ok, err)
	}
	if _, err := oldRun.RenewLease(ctx, "h", 1, ttl); !errors.Is(err, payload.Rejected) {
		t.Fatalf("the old run's next renewal: %v; want Rejected (a newer run holds the lease)", err)
	}
}
