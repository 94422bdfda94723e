package migrate_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/berthrt/berth/internal/migrate"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.MainAll(m) }

var bg = context.Background()

// newPool returns a pool on a fresh database, closed at the end of the test.
func newPool(t *testing.T) (*pgxpool.Pool, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	pool, err := pgxpool.New(bg, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, db
}

// pools returns n pools on db, one per simulated process, each with a
// connection made.
func pools(t *testing.T, db *pgtest.DB, n int) []*pgxpool.Pool {
	t.Helper()
	ps := make([]*pgxpool.Pool, n)
	for i := range ps {
		p, err := pgxpool.New(bg, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if err := p.Ping(bg); err != nil { // connected before the race starts
			t.Fatal(err)
		}
		ps[i] = p
	}
	return ps
}

// atOnce runs f(0..n-1) in n goroutines released together and returns
// their errors.
func atOnce(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// steps returns n steps that each create a table prefix_vN: none is
// idempotent, so a step applied twice fails.
func steps(prefix string, n int) []migrate.Step {
	var ss []migrate.Step
	for v := 1; v <= n; v++ {
		ss = append(ss, migrate.Step{Version: v, Name: fmt.Sprintf("make_%s_v%d", prefix, v),
			SQL: fmt.Sprintf("CREATE TABLE %s_v%d (x int); CREATE INDEX ON %s_v%d (x)", prefix, v, prefix, v)})
	}
	return ss
}

func scoped(scope string, n int) migrate.Plan {
	return migrate.Plan{Op: "test", Table: "versions", Scope: scope, LockKey: migrate.Key("test " + scope), Steps: steps(scope, n)}
}

func unscoped(n int) migrate.Plan {
	return migrate.Plan{Op: "test", Table: "versions", LockKey: 42, Steps: steps("t", n)}
}

// recorded returns the versions recorded in the table "versions", as
// "scope:version" (or "version" without a scope column).
func recorded(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var hasScope bool
	if err := pool.QueryRow(bg, `SELECT EXISTS (SELECT FROM information_schema.columns
		WHERE table_name = 'versions' AND column_name = 'scope')`).Scan(&hasScope); err != nil {
		t.Fatal(err)
	}
	q := "SELECT version::text FROM versions ORDER BY version"
	if hasScope {
		q = "SELECT scope || ':' || version FROM versions ORDER BY scope, version"
	}
	rows, err := pool.Query(bg, q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantRecorded(t *testing.T, pool *pgxpool.Pool, want ...string) {
	t.Helper()
	if got := recorded(t, pool); !slices.Equal(got, want) {
		t.Fatalf("recorded versions %q, want %q", got, want)
	}
}

func exists(t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(bg, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// Apply applies the steps in order and records each with its version and
// name; without a scope the version table has pgstore's columns (version,
// name, applied_at), with one also scope.
func TestApplyAppliesTheStepsInOrderAndRecordsEach(t *testing.T) {
	for _, p := range []migrate.Plan{unscoped(2), scoped("a", 2)} {
		t.Run("scope="+p.Scope, func(t *testing.T) {
			pool, _ := newPool(t)
			// Step 2 needs step 1's table: applied out of order it fails.
			prefix := cmp.Or(p.Scope, "t")
			p.Steps[1].SQL = fmt.Sprintf("ALTER TABLE %s_v1 ADD COLUMN y int; CREATE TABLE %s_v2 (x int)", prefix, prefix)
			if err := migrate.Apply(bg, pool, p); err != nil {
				t.Fatal(err)
			}
			if p.Scope == "" {
				wantRecorded(t, pool, "1", "2")
			} else {
				wantRecorded(t, pool, "a:1", "a:2")
			}
			rows, err := pool.Query(bg, "SELECT name FROM versions ORDER BY version")
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || !slices.Equal(names, []string{p.Steps[0].Name, p.Steps[1].Name}) {
				t.Fatalf("recorded names %q, %v", names, err)
			}
			rows, err = pool.Query(bg, `SELECT column_name::text FROM information_schema.columns
				WHERE table_name = 'versions' ORDER BY ordinal_position`)
			if err != nil {
				t.Fatal(err)
			}
			cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
			want := []string{"version", "name", "applied_at"}
			if p.Scope != "" {
				want = []string{"scope", "version", "name", "applied_at"}
			}
			if err != nil || !slices.Equal(cols, want) {
				t.Fatalf("version table columns %q (%v), want %q", cols, err, want)
			}
		})
	}
}

// Apply is idempotent: run again it applies nothing (the steps, which are
// not idempotent, would fail), and a plan with a step more applies only it.
func TestApplyIsIdempotentAndAppliesOnlyTheMissingSteps(t *testing.T) {
	pool, _ := newPool(t)
	for range 3 {
		if err := migrate.Apply(bg, pool, scoped("a", 1)); err != nil {
			t.Fatal(err)
		}
	}
	wantRecorded(t, pool, "a:1")
	for range 2 {
		if err := migrate.Apply(bg, pool, scoped("a", 2)); err != nil {
			t.Fatal(err)
		}
	}
	wantRecorded(t, pool, "a:1", "a:2")
}

// Applies of one plan at once, from as many pools (processes), all
// succeed and apply each step once: the plan's advisory lock serializes
// them — whether the version table is yet to be made or already there.
func TestConcurrentAppliesOfOnePlanAllSucceedAndApplyEachStepOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first migrate.Plan // applied before, if it has steps
		p     migrate.Plan
		want  []string
	}{
		{"fresh/unscoped", migrate.Plan{}, unscoped(3), []string{"1", "2", "3"}},
		{"fresh/scoped", migrate.Plan{}, scoped("a", 3), []string{"a:1", "a:2", "a:3"}},
		{"version table exists/unscoped", unscoped(1), unscoped(3), []string{"1", "2", "3"}},
		{"version table exists/scoped", scoped("b", 1), scoped("a", 3), []string{"a:1", "a:2", "a:3", "b:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, db := newPool(t)
			if tc.first.Steps != nil {
				if err := migrate.Apply(bg, pool, tc.first); err != nil {
					t.Fatal(err)
				}
			}
			const n = 8
			ps := pools(t, db, n)
			for i, err := range atOnce(n, func(i int) error { return migrate.Apply(bg, ps[i], tc.p) }) {
				if err != nil {
					t.Fatalf("Apply %d: %v", i, err)
				}
			}
			wantRecorded(t, pool, tc.want...)
		})
	}
}

// The first Applies of different scopes of one version table, at once and
// under different lock keys, all succeed: the version table is made under
// its own lock (two CREATE TABLE IF NOT EXISTS at once collide on the
// catalog).
func TestConcurrentFirstAppliesOfDifferentScopesAllSucceed(t *testing.T) {
	pool, db := newPool(t)
	const n = 8
	ps := pools(t, db, n)
	scope := func(i int) string { return fmt.Sprintf("s%d", i) }
	for i, err := range atOnce(n, func(i int) error { return migrate.Apply(bg, ps[i], scoped(scope(i), 2)) }) {
		if err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
	}
	var want []string
	for i := range n {
		want = append(want, scope(i)+":1", scope(i)+":2")
	}
	wantRecorded(t, pool, want...)
}

// Scopes are recorded apart: each plan reads and records only its own
// scope's versions.
func TestScopesAreRecordedApart(t *testing.T) {
	pool, _ := newPool(t)
	if err := migrate.Apply(bg, pool, scoped("a", 2)); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Apply(bg, pool, scoped("b", 1)); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Apply(bg, pool, scoped("a", 2)); err != nil {
		t.Fatal(err)
	}
	wantRecorded(t, pool, "a:1", "a:2", "b:1")
}

// A version table that records a version above the plan's last step is
// refused with kind NotConfigured and a *NewerSchemaError, and nothing is
// applied — not even the plan's steps the database lacks.
func TestANewerRecordedVersionIsRefusedAndNothingApplied(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       migrate.Plan
		newer   string
		missing string
		want    []string
	}{
		{"unscoped", unscoped(2), "INSERT INTO versions (version, name) VALUES (3, 'x'), (4, 'y')", "t_v2", []string{"1", "3", "4"}},
		{"scoped", scoped("a", 2), "INSERT INTO versions (scope, version, name) VALUES ('a', 3, 'x')", "a_v2", []string{"a:1", "a:3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, _ := newPool(t)
			one := tc.p
			one.Steps = one.Steps[:1]
			if err := migrate.Apply(bg, pool, one); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(bg, tc.newer); err != nil {
				t.Fatal(err)
			}
			err := migrate.Apply(bg, pool, tc.p)
			if !errors.Is(err, payload.NotConfigured) {
				t.Fatalf("Apply on a newer schema: %v, want NotConfigured", err)
			}
			var newer *migrate.NewerSchemaError
			if !errors.As(err, &newer) || newer.Want != 2 || newer.Have != len(tc.want)+1 || newer.Scope != tc.p.Scope {
				t.Fatalf("Apply on a newer schema: %#v (%v), want a NewerSchemaError", newer, err)
			}
			if exists(t, pool, tc.missing) {
				t.Fatalf("Apply on a newer schema made %s", tc.missing)
			}
			wantRecorded(t, pool, tc.want...)
		})
	}
}

// An Apply whose context is done applies nothing, not even the version
// table.
func TestADoneContextAppliesNothing(t *testing.T) {
	pool, _ := newPool(t)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := migrate.Apply(ctx, pool, scoped("a", 1)); !errors.Is(err, context.Canceled) || payload.KindOf(err) == 0 {
		t.Fatalf("Apply with a done context: %v, want context.Canceled with a kind", err)
	}
	if exists(t, pool, "versions") || exists(t, pool, "a_v1") {
		t.Fatal("an Apply with a done context made a table")
	}
}

// A step that fails applies nothing: the steps before it roll back with
// it and no version is recorded. The error names the step and carries a
// kind (the default: InternalFailure for a statement the server refused).
func TestAFailingStepAppliesNothing(t *testing.T) {
	pool, _ := newPool(t)
	p := scoped("a", 2)
	p.Steps[1].SQL = "CREATE TABLE a_v1 (x int)" // step 1 made it
	err := migrate.Apply(bg, pool, p)
	if !errors.Is(err, payload.InternalFailure) || !strings.Contains(err.Error(), "migration 0002_make_a_v2") {
		t.Fatalf("Apply with a failing step: %v, want InternalFailure naming the step", err)
	}
	if exists(t, pool, "a_v1") || exists(t, pool, "versions") {
		t.Fatal("a failed Apply left a table")
	}
}

// Plan.Wrap makes the error of a failure.
func TestPlanWrapMakesTheError(t *testing.T) {
	pool, _ := newPool(t)
	p := scoped("a", 1)
	p.Steps[0].SQL = "SELEC 1"
	sentinel := errors.New("wrapped")
	p.Wrap = func(err error) error { return fmt.Errorf("%w: %w", sentinel, err) }
	if err := migrate.Apply(bg, pool, p); !errors.Is(err, sentinel) {
		t.Fatalf("Apply: %v, want Plan.Wrap's error", err)
	}
}

// When Stale reports that the scope's records no longer describe the
// database, they are forgotten and every step applies again; otherwise
// the records stand.
func TestStaleRecordsAreForgottenAndEveryStepAppliesAgain(t *testing.T) {
	pool, _ := newPool(t)
	p := scoped("a", 2)
	for i := range p.Steps {
		p.Steps[i].SQL = fmt.Sprintf("CREATE TABLE IF NOT EXISTS a_v%d (x int)", i+1)
	}
	stale := 0
	p.Stale = func(ctx context.Context, tx pgx.Tx) (bool, error) {
		stale++
		var gone bool
		err := tx.QueryRow(ctx, "SELECT to_regclass('a_v1') IS NULL OR to_regclass('a_v2') IS NULL").Scan(&gone)
		return gone, err
	}
	if err := migrate.Apply(bg, pool, p); err != nil {
		t.Fatal(err)
	}
	if stale != 0 {
		t.Fatalf("Stale ran %d times on a scope with no records", stale)
	}
	if _, err := pool.Exec(bg, "DROP TABLE a_v1"); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Apply(bg, pool, p); err != nil {
		t.Fatal(err)
	}
	if !exists(t, pool, "a_v1") {
		t.Fatal("a dropped table was not made again")
	}
	wantRecorded(t, pool, "a:1", "a:2")
	if err := migrate.Apply(bg, pool, p); err != nil || stale != 2 {
		t.Fatalf("Apply: %v; Stale ran %d times, want 2", err, stale)
	}
	wantRecorded(t, pool, "a:1", "a:2")
}

// Apply in a transaction (a pgx.Tx as db) applies in a savepoint and
// commits with it.
func TestApplyInATransaction(t *testing.T) {
	pool, _ := newPool(t)
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	if err := migrate.Apply(bg, tx, scoped("a", 1)); err != nil {
		t.Fatal(err)
	}
	if exists(t, pool, "a_v1") {
		t.Fatal("the table is visible before the transaction commits")
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	wantRecorded(t, pool, "a:1")
}

// A plan whose steps are not numbered 1, 2, 3… or that names no version
// table is refused with kind InvalidOperation before it touches the
// database.
func TestAMalformedPlanIsRefused(t *testing.T) {
	p := scoped("a", 3)
	p.Steps = slices.Delete(p.Steps, 1, 2) // 1, 3
	if err := migrate.Apply(bg, nil, p); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Apply with steps 1, 3: %v, want InvalidOperation", err)
	}
	p = scoped("a", 1)
	p.Table = ""
	if err := migrate.Apply(bg, nil, p); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Apply with no version table: %v, want InvalidOperation", err)
	}
}
