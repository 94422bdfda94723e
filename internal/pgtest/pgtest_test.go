package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { MainAll(m) }

func TestFreshDatabasePerTest(t *testing.T) {
	a := New(t)
	b := New(t)
	if a.URL == b.URL {
		t.Fatalf("two tests share database %s", a.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, a.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

func TestRestartKeepsData(t *testing.T) {
	d := New(t)
	if d.Server == nil {
		t.Skip("skipped: BERTH_TEST_DATABASE_URL names an external server, which this test does not restart")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := d.Server.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a connection survived an immediate restart")
	}
	conn.Close(ctx)
	conn, err = pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var x int
	if err := conn.QueryRow(ctx, "SELECT x FROM t").Scan(&x); err != nil || x != 7 {
		t.Fatalf("after restart: x = %d, %v", x, err)
	}
}

// TestOrphanedServerIsReaped: a server whose owner process is gone (a test
// binary that panicked) is stopped and removed by the next Start.
func TestOrphanedServerIsReaped(t *testing.T) {
	if _, err := FindBin(); err != nil {
		if Required() && os.Getenv("BERTH_TEST_DATABASE_URL") == "" {
			t.Fatal(err)
		}
		t.Skipf("skipped: %v", err)
	}
	orphan, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer orphan.Stop()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan.Dir(), "owner.pid"), []byte(strconv.Itoa(dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer next.Stop()
	if _, err := os.Stat(orphan.Dir()); !os.IsNotExist(err) {
		t.Fatalf("the orphan's directory is still there: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, orphan.URL("postgres")); err == nil {
		conn.Close(ctx)
		t.Fatal("the orphaned server still accepts connections")
	}
}
