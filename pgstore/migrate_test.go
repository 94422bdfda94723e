package pgstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/berthrt/berth/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// versions returns the versions recorded in pgstore_schema_version.
func versions(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT version FROM pgstore_schema_version ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

func wantAllVersions(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	vs := versions(t, pool)
	if len(vs) != pgstore.SchemaVersion() {
		t.Fatalf("recorded versions %v, want 1..%d once each", vs, pgstore.SchemaVersion())
	}
	for i, v := range vs {
		if v != i+1 {
			t.Fatalf("recorded versions %v, want 1..%d once each", vs, pgstore.SchemaVersion())
		}
	}
}

// Migrate is idempotent: running it again applies nothing and keeps the
// data.
func TestMigrateIsIdempotent(t *testing.T) {
	pool, _ := newPool(t)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.Open(ctx, pool, pgstore.Options{}) // migrates again
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewLease(ctx, "A", 1, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := pgstore.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}
	wantAllVersions(t, pool)
	if _, ok, err := s.Lease(ctx, "A"); err != nil || !ok {
		t.Fatalf("the lease after Migrate ran again: ok %v, %v", ok, err)
	}
}

// Concurrent Migrates (several processes starting at once, each with its
// own pool) all succeed and apply each migration once: the advisory lock
// serializes them.
func TestConcurrentMigratesApplyEachMigrationOnce(t *testing.T) {
	pool, db := newPool(t)
	const n = 8
	pools := make([]*pgxpool.Pool, n)
	for i := range pools {
		p, err := pgxpool.New(context.Background(), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pools[i] = p
	}
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = pgstore.Migrate(context.Background(), pools[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Migrate %d: %v", i, err)
		}
	}
	wantAllVersions(t, pool)
}

// A Migrate whose context is done applies nothing.
func TestMigrateWithADoneContextAppliesNothing(t *testing.T) {
	pool, _ := newPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pgstore.Migrate(ctx, pool); err == nil {
		t.Fatal("Migrate with a cancelled context succeeded")
	}
	var exists bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass('pgstore_schema_version') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("a cancelled Migrate made the version table")
	}
}
