package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
)

// go test -run '^$' -bench . -benchtime 1x -timeout 30m [-args -rows 50000 -work 1ms -fsync=false -db URL]
var (
	benchDB    = flag.String("db", "", "URL of a database on an existing server (default: BERTH_TEST_DATABASE_URL, else a throwaway server)")
	benchRows  = flag.Int("rows", DefaultOptions().Rows, "jobs / rows per drain")
	benchWork  = flag.Duration("work", 0, "how long each job's / row's handler waits before it succeeds (0: no-op)")
	benchFsync = flag.Bool("fsync", true, "the throwaway server runs with Postgres's default durability (pgtest.StartDurable); false: fsync off (pgtest.Start)")
)

// benchOptions are the options of the benchmarks' drains.
func benchOptions() Options {
	o := DefaultOptions()
	o.Rows, o.Work = *benchRows, *benchWork
	return o
}

var shared struct {
	once sync.Once
	env  *Env
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared.env != nil {
		shared.env.Close()
	}
	os.Exit(code)
}

// env returns the server every benchmark of the run shares.
func env(b *testing.B) *Env {
	b.Helper()
	shared.once.Do(func() {
		u := *benchDB
		if u == "" {
			u = os.Getenv("BERTH_TEST_DATABASE_URL")
		}
		shared.env, shared.err = NewEnv(u, *benchFsync)
	})
	if errors.Is(shared.err, pgtest.ErrNoPostgres) {
		b.Skipf("skipped: %v", shared.err)
	}
	if shared.err != nil {
		b.Fatal(shared.err)
	}
	return shared.env
}

// report sets ns/op to the mean drain time (the untimed setup excluded)
// and adds rows/s.
func report(b *testing.B, total time.Duration, rows int) {
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
}

func label(s string) string { return strings.NewReplacer(" ", "_", "=", "").Replace(s) }

// BenchmarkRiver drains -rows River jobs (each waiting -work) per op with
// each default River configuration.
func BenchmarkRiver(b *testing.B) {
	o := benchOptions()
	for _, rc := range DefaultRiverConfigs() {
		b.Run(label(rc.String()), func(b *testing.B) {
			e := env(b)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				r, err := RunRiver(context.Background(), e, o, rc)
				if err != nil {
					b.Fatal(err)
				}
				total += r.Elapsed
			}
			report(b, total, o.Rows)
		})
	}
}

// BenchmarkBerth drains -rows pgbridge rows (each waiting -work) per op
// with each default subscription configuration.
func BenchmarkBerth(b *testing.B) {
	o := benchOptions()
	for _, bc := range DefaultBerthConfigs() {
		b.Run(bc.Label, func(b *testing.B) {
			e := env(b)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				r, err := RunBerth(context.Background(), e, o, bc)
				if err != nil {
					b.Fatal(err)
				}
				total += r.Elapsed
			}
			report(b, total, o.Rows)
		})
	}
}
