package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	pgmigrate "github.com/berthrt/berth/internal/migrate"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// recordedSteps returns the rows of pgbridge_schema_version as
// "scope:version", in order.
func recordedSteps(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(bg, "SELECT scope || ':' || version FROM pgbridge_schema_version ORDER BY scope, version")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// allSteps returns "scope:1" … "scope:N" for each scope, N being the
// schema's version.
func allSteps(scopes ...string) []string {
	var out []string
	for _, s := range scopes {
		for v := 1; v <= inboxSchemaVersion(); v++ {
			out = append(out, s+":"+strconv.Itoa(v))
		}
	}
	slices.Sort(out)
	return out
}

func wantSteps(t *testing.T, pool *pgxpool.Pool, want []string) {
	t.Helper()
	if got := recordedSteps(t, pool); !slices.Equal(got, want) {
		t.Fatalf("pgbridge_schema_version records %q, want %q", got, want)
	}
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(bg, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// processPools returns n pools on db, one per simulated process, each
// with a connection made, closed at the end of the test.
func processPools(t *testing.T, db *pgtest.DB, n int) []*pgxpool.Pool {
	t.Helper()
	ps := make([]*pgxpool.Pool, n)
	for i := range ps {
		p, err := pgxpool.New(bg, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if err := p.Ping(bg); err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	return ps
}

// migrateAtOnce runs Migrate(ps[i], table(i)) for every pool at once and
// fails the test on an error.
func migrateAtOnce(t *testing.T, ps []*pgxpool.Pool, table func(i int) Table) {
	t.Helper()
	errs := make([]error, len(ps))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ps {
		wg.Go(func() {
			<-start
			errs[i] = Migrate(bg, ps[i], table(i))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Migrate %d: %v", i, err)
		}
	}
}

// Migrates of one table at once, each from its own pool (processes
// starting together), all succeed and apply each step once: the table's
// advisory lock serializes them. Without it their CREATE TABLE / CREATE
// INDEX IF NOT EXISTS collide on the catalog (duplicate key in pg_type or
// pg_class) — whether or not the version table is yet to be made.
func TestConcurrentMigratesOfOneTableAllSucceedAndApplyEachStepOnce(t *testing.T) {
	for _, versionTableExists := range []bool{false, true} {
		t.Run(fmt.Sprintf("version table exists=%v", versionTableExists), func(t *testing.T) {
			pool, db := newPool(t)
			want := allSteps("inbox")
			if versionTableExists {
				migrate(t, pool, Table{Name: "other"})
				want = allSteps("inbox", "other")
			}
			ps := processPools(t, db, 8)
			migrateAtOnce(t, ps, func(int) Table { return Table{Name: "inbox", DeadLetter: "inbox_dead"} })
			wantSteps(t, pool, want)
			if !tableExists(t, pool, "inbox") || !tableExists(t, pool, "inbox_dead") {
				t.Fatal("the inbox or its dead-letter table is missing")
			}
		})
	}
}

// Migrating two tables records two scopes, one per table, each with the
// schema's steps; Migrates of different tables at once all succeed.
func TestMigratingDifferentTablesRecordsAScopeEach(t *testing.T) {
	pool, db := newPool(t)
	migrate(t, pool, Table{Name: "inbox"})
	migrate(t, pool, Table{Name: "outbox", DeadLetter: "outbox_dead"})
	wantSteps(t, pool, allSteps("inbox", "outbox"))

	ps := processPools(t, db, 6)
	name := func(i int) string { return fmt.Sprintf("t%d", i) }
	migrateAtOnce(t, ps, func(i int) Table { return Table{Name: name(i)} })
	scopes := []string{"inbox", "outbox"}
	for i := range ps {
		scopes = append(scopes, name(i))
	}
	wantSteps(t, pool, allSteps(scopes...))
}

// Migrate is idempotent: run again it applies nothing, records nothing
// more (nor again: the records keep their applied_at) and keeps the rows —
// also for a schema-qualified table.
func TestMigrateIsIdempotent(t *testing.T) {
	for _, tb := range []Table{{Name: "inbox", DeadLetter: "inbox_dead"}, {Name: "s.inbox", DeadLetter: "s.inbox_dead"}} {
		t.Run(tb.Name, func(t *testing.T) {
			pool, _ := newPool(t)
			if _, err := pool.Exec(bg, "CREATE SCHEMA s"); err != nil {
				t.Fatal(err)
			}
			migrate(t, pool, tb)
			if _, err := pool.Exec(bg, "INSERT INTO "+ident(tb.Name)+" (key) VALUES ('a')"); err != nil {
				t.Fatal(err)
			}
			applied := func() (at []time.Time) {
				rows, err := pool.Query(bg, "SELECT applied_at FROM pgbridge_schema_version ORDER BY version")
				if err != nil {
					t.Fatal(err)
				}
				at, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
				if err != nil {
					t.Fatal(err)
				}
				return at
			}
			first := applied()
			for range 3 {
				migrate(t, pool, tb)
			}
			wantSteps(t, pool, allSteps(tb.Name))
			if again := applied(); !slices.Equal(again, first) {
				t.Fatalf("the steps were recorded again: applied at %v, then %v", first, again)
			}
			if n := count(t, pool, tb.Name); n != 1 {
				t.Fatalf("%d rows after Migrate ran again, want 1", n)
			}
		})
	}
}

// A table made by the unversioned Migrate of earlier releases (InboxDDL
// run as is) is adopted: Migrate succeeds, keeps its rows and records the
// schema's steps.
func TestMigrateAdoptsATableTheUnversionedDDLMade(t *testing.T) {
	pool, _ := newPool(t)
	if _, err := pool.Exec(bg, InboxDDL("inbox", "inbox_dead")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, "INSERT INTO inbox (key) VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	migrate(t, pool, Table{Name: "inbox", DeadLetter: "inbox_dead"})
	wantSteps(t, pool, allSteps("inbox"))
	if n := count(t, pool, "inbox"); n != 1 {
		t.Fatalf("%d rows after Migrate adopted the table, want 1", n)
	}
}

// A table whose recorded version is above the schema's (a newer binary
// migrated it) is refused with kind NotConfigured and a
// *pgmigrate.NewerSchemaError, and nothing is applied: here the dead-letter
// table Migrate would otherwise make.
func TestMigrateRefusesATableANewerBinaryMigrated(t *testing.T) {
	pool, _ := newPool(t)
	migrate(t, pool, Table{Name: "inbox"})
	newer := inboxSchemaVersion() + 1
	if _, err := pool.Exec(bg, "INSERT INTO pgbridge_schema_version (scope, version, name) VALUES ('inbox', $1, 'future')", newer); err != nil {
		t.Fatal(err)
	}
	err := Migrate(bg, pool, Table{Name: "inbox", DeadLetter: "inbox_dead"})
	if !errors.Is(err, payload.NotConfigured) {
		t.Fatalf("Migrate of a newer table: %v, want NotConfigured", err)
	}
	var ne *pgmigrate.NewerSchemaError
	if !errors.As(err, &ne) || ne.Scope != "inbox" || ne.Have != newer || ne.Want != inboxSchemaVersion() {
		t.Fatalf("Migrate of a newer table: %v, want a NewerSchemaError of inbox", err)
	}
	if tableExists(t, pool, "inbox_dead") {
		t.Fatal("Migrate of a newer table made the dead-letter table")
	}
	// The other tables are not affected.
	migrate(t, pool, Table{Name: "outbox"})
}

// A table dropped since it was migrated is made again, and a dead-letter
// table named only in a later Migrate is made: the records of a table
// whose inbox or dead-letter table is missing are forgotten.
func TestMigrateMakesAMissingTableAgain(t *testing.T) {
	pool, _ := newPool(t)
	migrate(t, pool, Table{Name: "inbox"})
	migrate(t, pool, Table{Name: "inbox", DeadLetter: "inbox_dead"})
	if !tableExists(t, pool, "inbox_dead") {
		t.Fatal("a dead-letter table named in a later Migrate was not made")
	}
	if _, err := pool.Exec(bg, "DROP TABLE inbox"); err != nil {
		t.Fatal(err)
	}
	migrate(t, pool, Table{Name: "inbox"})
	if !tableExists(t, pool, "inbox") {
		t.Fatal("a dropped table was not made again")
	}
	if _, err := pool.Exec(bg, "DROP TABLE inbox, inbox_dead"); err != nil {
		t.Fatal(err)
	}
	migrate(t, pool, Table{Name: "inbox", DeadLetter: "inbox_dead"})
	if !tableExists(t, pool, "inbox") || !tableExists(t, pool, "inbox_dead") {
		t.Fatal("dropped tables were not made again")
	}
	wantSteps(t, pool, allSteps("inbox"))
}

// A Migrate whose context is done applies nothing.
func TestMigrateWithADoneContextAppliesNothing(t *testing.T) {
	pool, _ := newPool(t)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := Migrate(ctx, pool, Table{Name: "inbox"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Migrate with a done context: %v, want context.Canceled", err)
	}
	if tableExists(t, pool, "inbox") || tableExists(t, pool, "pgbridge_schema_version") {
		t.Fatal("a Migrate with a done context made a table")
	}
}

// Migrate takes a *pgx.Conn, and a pgx.Tx (its steps then commit with the
// transaction).
func TestMigrateTakesAConnOrATransaction(t *testing.T) {
	pool, db := newPool(t)
	conn, err := pgx.Connect(bg, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	if err := Migrate(bg, conn, Table{Name: "inbox"}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	if err := Migrate(bg, tx, Table{Name: "outbox"}); err != nil {
		t.Fatal(err)
	}
	if tableExists(t, pool, "outbox") {
		t.Fatal("the table is visible before the transaction commits")
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	wantSteps(t, pool, allSteps("inbox", "outbox"))
}

// execOnly is an Execer that cannot begin a transaction.
type execOnly struct{}

func (execOnly) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("execOnly: not called")
}

// An Execer that cannot begin a transaction, and an empty table name, are
// refused with kind InvalidOperation.
func TestMigrateRefusesAnExecerThatCannotBegin(t *testing.T) {
	if err := Migrate(bg, execOnly{}, Table{Name: "inbox"}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Migrate with an Execer that cannot begin: %v, want InvalidOperation", err)
	}
	if err := Migrate(bg, execOnly{}, Table{}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Migrate with no table name: %v, want InvalidOperation", err)
	}
}

// Migrates of different tables do not wait for each other: while a
// transaction holds table a's migration lock, a Migrate of b goes through
// and one of a waits (here until its deadline).
func TestMigratesOfDifferentTablesDoNotWaitForEachOther(t *testing.T) {
	pool, _ := newPool(t)
	migrate(t, pool, Table{Name: "other"}) // the version table exists
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	if _, err := tx.Exec(bg, "SELECT pg_advisory_xact_lock($1)", migrateLockKey("a")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := Migrate(ctx, pool, Table{Name: "b"}); err != nil {
		t.Fatalf("Migrate of b while a's lock is held: %v", err)
	}
	ctx, cancel = context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	if err := Migrate(ctx, pool, Table{Name: "a"}); !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("Migrate of a while its lock is held: %v, want DeadlineExceeded", err)
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	migrate(t, pool, Table{Name: "a"})
	wantSteps(t, pool, allSteps("a", "b", "other"))
}
