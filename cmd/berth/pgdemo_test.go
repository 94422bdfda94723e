package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The pgdemo, small, on a fresh database: every row processed once,
// nothing lost or out of order, a backend killed (its claim's rows run
// again and are recognized), the worker restarted, the ledger each sequence
// once — and no goroutine left behind.
func TestPgdemo(t *testing.T) {
	db := pgtest.New(t)
	var out bytes.Buffer
	const n = 3000
	rep, err := runPG(context.Background(), pgdemoConfig{db: db.URL, n: n, objects: 60, workers: 3, batch: 16,
		stallTimeout: 20 * time.Second}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if rep.failed() {
		t.Fatalf("the run failed")
	}
	if rep.inserted != n || rep.processed != n || rep.ledgerRows != n || rep.lost != 0 || rep.left != 0 || rep.dead != 0 ||
		rep.outOfOrder != 0 || rep.appliedTwice != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.restarts != 1 {
		t.Fatalf("worker restarted %d times, want 1", rep.restarts)
	}
	if len(rep.killed) == 0 || rep.rollbacks == 0 || rep.rolledBackRows == 0 {
		t.Fatalf("killed %v: %d claims (%d rows) rolled back; want a backend killed and its claim rolled back",
			rep.killed, rep.rollbacks, rep.rolledBackRows)
	}
	// Every run beyond one per row is a row delivered again after its
	// claim rolled back, or retried (none should be: the replies publish
	// through a broker that is not stopping). A claim the bridge reports
	// rolled back may in fact have committed (the backend died after
	// running COMMIT, before its answer arrived): its rows are not run
	// again, and the bridge never counts them acked.
	if rep.retried != 0 || rep.duplicated > rep.rolledBackRows || rep.handlerRuns != n+rep.duplicated {
		t.Fatalf("%d handler runs, %d duplicated, %d rows rolled back, %d retried", rep.handlerRuns, rep.duplicated,
			rep.rolledBackRows, rep.retried)
	}
	if committed := rep.rolledBackRows - rep.duplicated; rep.acked+committed != n {
		t.Fatalf("bridge acked %d, %d rows reported rolled back but not run again; want %d in all", rep.acked, committed, n)
	}
	for _, want := range []string{"killed backend", "worker restarted", "lost                   0", "out of order           0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	testutil.CheckNoGoroutines(t)
}

// The command's exit code: 0 for a clean run on -db.
func TestPgdemoMainExitCode(t *testing.T) {
	db := pgtest.New(t)
	var out, errb bytes.Buffer
	if code := pgdemoMain([]string{"-db", db.URL, "-n", "400", "-objects", "20", "-workers", "2", "-quiet"}, &out, &errb); code != 0 {
		t.Fatalf("exit code %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "processed            400") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// Without Postgres binaries and without -db, it says what to install and
// exits non-zero.
func TestPgdemoNoPostgres(t *testing.T) {
	old := startPostgres
	startPostgres = func() (*pgtest.Server, error) { return nil, pgtest.ErrNoPostgres }
	defer func() { startPostgres = old }()
	var out, errb bytes.Buffer
	if code := pgdemoMain([]string{"-n", "10"}, &out, &errb); code == 0 {
		t.Fatal("exit code 0 without Postgres")
	}
	for _, want := range []string{"apt-get install postgresql", "-db postgres://"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, errb.String())
		}
	}
}

func TestPgReportFailed(t *testing.T) {
	for _, r := range []pgReport{{lost: 1}, {left: 1}, {outOfOrder: 1}, {appliedTwice: 1}, {ledgerTwice: 1},
		{ledgerMissing: 1}, {ledgerStray: 1}} {
		if !r.failed() {
			t.Errorf("%+v does not fail the run", r)
		}
	}
	if (pgReport{duplicated: 32, rolledBackRows: 32}).failed() {
		t.Error("recognized redeliveries fail the run")
	}
}
