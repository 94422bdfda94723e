package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	dbSeq atomic.Int64

	shared struct {
		once   sync.Once
		srv    *Server // nil with an external URL
		admin  string  // URL of the admin database
		err    error
		inMain bool
	}
)

// Main runs a package's tests and then stops the throwaway server, if one
// was started. Call it from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	shared.inMain = true
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	os.Exit(code)
}

// MainAll is Main for a package whose every test and example needs
// Postgres: without Postgres binaries and BERTH_TEST_DATABASE_URL the
// package is skipped with one line (it fails under BERTH_REQUIRE_PG=1).
// Examples can then take a database from NewDatabase.
func MainAll(m *testing.M) {
	if !Available() {
		if Required() {
			fmt.Fprintf(os.Stderr, "pgtest: %v (BERTH_REQUIRE_PG=1)\n", ErrNoPostgres)
			os.Exit(1)
		}
		fmt.Printf("skipped: %v\n", ErrNoPostgres)
		os.Exit(0)
	}
	Main(m)
}

// Available reports whether tests can have a Postgres: BERTH_TEST_DATABASE_URL
// is set, or server binaries are installed.
func Available() bool {
	if os.Getenv("BERTH_TEST_DATABASE_URL") != "" {
		return true
	}
	_, err := FindBin()
	return err == nil
}

// NewDatabase is New without a testing.TB (for examples): a fresh database
// on the shared server, and a function that drops it.
func NewDatabase() (url string, drop func(), err error) {
	if !shared.inMain {
		return "", nil, fmt.Errorf("pgtest: call pgtest.Main(m) or MainAll(m) from the package's TestMain")
	}
	shared.once.Do(setup)
	if shared.err != nil {
		return "", nil, shared.err
	}
	name := uniqueName("berth_x")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := CreateDatabase(ctx, shared.admin, name)
	if err != nil {
		return "", nil, err
	}
	return u, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		DropDatabase(ctx, shared.admin, name)
	}, nil
}

// Required reports whether BERTH_REQUIRE_PG=1: a missing Postgres fails the
// tests instead of skipping them.
func Required() bool { return os.Getenv("BERTH_REQUIRE_PG") == "1" }

func setup() {
	if u := os.Getenv("BERTH_TEST_DATABASE_URL"); u != "" {
		shared.admin = u
		return
	}
	if durableWanted() {
		shared.srv, shared.err = StartDurable()
	} else {
		shared.srv, shared.err = Start()
	}
	if shared.err == nil {
		shared.admin = shared.srv.URL("postgres")
	}
}

// DB is a fresh database for one test.
type DB struct {
	URL    string  // connection URL of the test's database
	Server *Server // the throwaway server; nil when BERTH_TEST_DATABASE_URL names one
}

// New returns a fresh database for t, dropped when t ends. It skips t when
// no Postgres is available (fails it under BERTH_REQUIRE_PG=1).
func New(t testing.TB) *DB {
	t.Helper()
	if !shared.inMain {
		t.Fatal("pgtest: call pgtest.Main(m) from the package's TestMain")
	}
	shared.once.Do(setup)
	if shared.err != nil {
		if Required() || shared.err != ErrNoPostgres {
			t.Fatalf("pgtest: %v", shared.err)
		}
		t.Skipf("skipped: %v", shared.err)
	}
	name := uniqueName("berth_t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := CreateDatabase(ctx, shared.admin, name)
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DropDatabase(ctx, shared.admin, name); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return &DB{URL: u, Server: shared.srv}
}

// durableWanted reports whether the shared server should run with
// default durability: the test binary runs benchmarks (-test.bench), or
// BERTH_PGTEST_DURABLE=1.
func durableWanted() bool {
	if os.Getenv("BERTH_PGTEST_DURABLE") == "1" {
		return true
	}
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}
