// Package pgtest gives tests (and the pgdemo command) a real Postgres: the
// server named by BERTH_TEST_DATABASE_URL, or a throwaway one it starts
// itself with initdb and pg_ctl in a temporary directory, listening on a
// free loopback port and on a socket in that directory.
//
// Invariants:
//   - A throwaway server is started at most once per process (per package
//     test run) and stopped by Main (or Server.Stop) at the end; its
//     directory is removed.
//   - Every test gets a fresh database, dropped when the test ends.
//   - Without Postgres binaries and without BERTH_TEST_DATABASE_URL, tests
//     skip with one clear line — unless BERTH_REQUIRE_PG=1, where they fail.
//   - As root, the server binaries run as the postgres user (initdb refuses
//     to run as root).
//
// The throwaway server of tests runs with fsync off: a commit is written
// to the operating system before it returns (so it survives the server's
// crash or Restart), but not flushed to disk — durability across a power
// cut is not what tests check. Benchmarks measure with default durability:
// a test binary run with -test.bench gets a server with fsync on
// (StartDurable), as does BERTH_PGTEST_DURABLE=1.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres reports that no Postgres server binaries were found.
var ErrNoPostgres = errors.New("pgtest: no Postgres: initdb not found on PATH or in /usr/lib/postgresql/*/bin " +
	"(install Debian's postgresql package, or set BERTH_TEST_DATABASE_URL)")

// Server is a throwaway Postgres server in a temporary directory.
type Server struct {
	durable bool   // fsync and full-page writes on (Postgres's defaults)
	dir     string // the temporary directory (data, socket, log)
	bin     string // directory of initdb, pg_ctl and postgres
	port    int
	asPG    bool // run binaries as the postgres user
	mu      sync.Mutex
	alive   bool
}

// FindBin returns the directory holding initdb, pg_ctl and postgres.
func FindBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return pgVersion(matches[i]) > pgVersion(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	return "", ErrNoPostgres
}

func pgVersion(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// Start initializes and starts a throwaway server. Stop it with Stop.
func Start() (*Server, error) { return start(false) }

// StartDurable is Start with Postgres's default durability: fsync and
// full-page writes on, so a commit waits for its flush to disk (what a
// benchmark of a path through Postgres measures).
func StartDurable() (*Server, error) { return start(true) }

func start(durable bool) (*Server, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	reapOrphans(bin)
	dir, err := os.MkdirTemp("", "berth-pg-")
	if err != nil {
		return nil, err
	}
	// The owner's pid, for reapOrphans: a test binary that panics or times
	// out exits without stopping its server.
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, asPG: os.Geteuid() == 0, durable: durable}
	if s.asPG {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	for try := 0; ; try++ {
		s.port, err = freePort()
		if err == nil {
			err = s.start()
		}
		if err == nil {
			return s, nil
		}
		if try == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// reapOrphans stops and removes the throwaway servers of processes that
// exited without stopping them (a panic, a test timeout, a kill).
func reapOrphans(bin string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "berth-pg-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue // not ours, or still being set up
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its owner is alive
		}
		o := &Server{dir: dir, bin: bin, asPG: os.Geteuid() == 0}
		o.run("pg_ctl", "-D", o.data(), "-m", "immediate", "-w", "stop")
		os.RemoveAll(dir)
	}
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.asPG {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func (s *Server) start() error {
	durability := "-c fsync=off -c full_page_writes=off "
	if s.durable {
		durability = "-c fsync=on -c full_page_writes=on -c synchronous_commit=on "
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 "+durability+
		"-c max_connections=200 -c shared_buffers=256MB", s.port, s.dir)
	out, err := s.run("pg_ctl", "-D", s.data(), "-o", opts, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, tail(log, 2000))
	}
	s.mu.Lock()
	s.alive = true
	s.mu.Unlock()
	return nil
}

// Stop stops the server at once and removes its directory.
func (s *Server) Stop() {
	s.mu.Lock()
	alive := s.alive
	s.alive = false
	s.mu.Unlock()
	if alive {
		s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
	}
	os.RemoveAll(s.dir)
}

// Restart stops the server at once (as a crash would: connections are cut,
// nothing is flushed) and starts it again on the same port.
func (s *Server) Restart() error { return s.RestartAfter(nil) }

// RestartAfter is Restart that calls stopped (if not nil) once the server
// has stopped — its postmaster and every backend gone, so that nothing
// commits from then until it is started again — and before it starts.
func (s *Server) RestartAfter(stopped func()) error {
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	if stopped != nil {
		stopped()
	}
	return s.start()
}

// URL returns the connection URL of database db on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Dir is the server's temporary directory (data, socket and log).
func (s *Server) Dir() string { return s.dir }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// CreateDatabase creates a fresh database through the server at adminURL
// and returns its URL.
func CreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase drops a database, ending its sessions.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// uniqueName returns a database name unique in this process run.
func uniqueName(prefix string) string {
	n := dbSeq.Add(1)
	return strings.ToLower(fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6, n))
}
