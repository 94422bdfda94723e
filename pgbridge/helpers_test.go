package pgbridge

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.MainAll(m) }

var bg = context.Background()

// newPool returns a pool on a fresh database, closed at the end of the test.
func newPool(t testing.TB) (*pgxpool.Pool, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	// Registered first, so it runs last: after every broker, host and
	// pool of the test closed, none of their goroutines is left.
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, db
}

// newBroker makes a broker on pool, closed (hard) at the end of the test.
func newBroker(t testing.TB, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func migrate(t testing.TB, pool *pgxpool.Pool, tb Table) {
	t.Helper()
	if err := Migrate(bg, pool, tb); err != nil {
		t.Fatal(err)
	}
}

func count(t testing.TB, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(bg, "SELECT count(*) FROM "+ident(table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.WaitForWithin(t, what, 60*time.Second, cond)
}

// subscribe adds a subscription to b and starts b.
func subscribe(t testing.TB, b *Broker, s *Subscription, h Handler) {
	t.Helper()
	if err := b.Subscribe(s, h); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
}

// testLog is a logger that writes to the test's log (shown when it fails).
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
