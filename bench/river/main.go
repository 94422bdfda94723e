// Command river compares the job throughput of River (riverqueue/river) with
// berth's pgbridge on the same Postgres server in the same run — no-op jobs,
// or jobs whose handler waits -work — and prints a markdown table.
//
// It is a separate module (bench/river/go.mod) so that River never becomes a
// dependency of github.com/berthrt/berth. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	o := DefaultOptions()
	fs := flag.NewFlagSet("river", flag.ExitOnError)
	fs.IntVar(&o.Rows, "n", o.Rows, "jobs / rows per measurement")
	db := fs.String("db", "", "URL of a database on an existing server (the role must be able to CREATE DATABASE); default: start a throwaway server with pgtest")
	durable := fs.Bool("fsync", true, "the throwaway server runs with Postgres's default durability (pgtest.StartDurable: fsync, full_page_writes, synchronous_commit on); false: fsync off (pgtest.Start)")
	fs.DurationVar(&o.Work, "work", o.Work, "how long each job's / row's handler waits (time.Sleep-like, ending with its context) before it succeeds; 0: no-op")
	fs.IntVar(&o.Keys, "keys", o.Keys, "distinct keys of the berth rows")
	repeat := fs.Int("repeat", 1, "measure each configuration this many times and report the median")
	riverList := fs.String("river", "", "River configurations, comma-separated MaxWorkers:FetchCooldown:FetchPollInterval (default: "+riverDefaults()+")")
	berthList := fs.String("berth", "", "berth configurations by label, comma-separated: <rowlock|lease|advisory>[-w<Workers>][-b<Batch>][-c<Concurrency>] or <form>-batch (Workers 2, Batch 1000), e.g. rowlock-w2-b1000-c200 (default: "+berthLabels(DefaultBerthConfigs())+"; also e.g.: "+berthLabels(ExtraBerthConfigs())+")")
	fs.BoolVar(&o.Vacuum, "vacuum", o.Vacuum, "VACUUM ANALYZE the table after the untimed insert")
	conns := fs.Int("conns", int(o.PoolConns), "pgxpool MaxConns of the measured client")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on one drain")
	skipRiver := fs.Bool("skip-river", false, "measure berth only")
	skipBerth := fs.Bool("skip-berth", false, "measure River only")
	fs.Parse(os.Args[1:])
	o.PoolConns = int32(*conns)

	rcs, err := parseRiver(*riverList)
	if err != nil {
		fatal(err)
	}
	bcs, err := pickBerth(*berthList)
	if err != nil {
		fatal(err)
	}
	if *skipRiver {
		rcs = nil
	}
	if *skipBerth {
		bcs = nil
	}

	ctx := context.Background()
	env, err := NewEnv(*db, *durable)
	if err != nil {
		fatal(err)
	}
	defer env.Close()
	load, _ := os.ReadFile("/proc/loadavg")
	work := "none (no-op)"
	if o.Work > 0 {
		work = o.Work.String() + " per job / row (both systems)"
	}
	fmt.Printf("Postgres %s, %s (%s); handler work %s; %d jobs / rows per run; GOMAXPROCS=%d, NumCPU=%d, loadavg %s\n\n",
		env.ServerVersion(ctx), env.Describe(), env.Durability(ctx), work, o.Rows,
		runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.TrimSpace(string(load)))

	// Every repetition runs every configuration once, so that a change of
	// the machine's load during the run hits all configurations alike.
	type job struct {
		name string
		run  func() (Result, error)
	}
	var jobs []job
	for _, rc := range rcs {
		jobs = append(jobs, job{"river " + rc.String(), func() (Result, error) { return RunRiver(ctx, env, o, rc) }})
	}
	for _, bc := range bcs {
		jobs = append(jobs, job{"berth " + bc.String(), func() (Result, error) { return RunBerth(ctx, env, o, bc) }})
	}
	runs := make([][]Result, len(jobs))
	for rep := 0; rep < max(*repeat, 1); rep++ {
		for i, j := range jobs {
			r, err := j.run()
			if err != nil {
				env.Close()
				fatal(fmt.Errorf("%s: %w", j.name, err))
			}
			fmt.Fprintf(os.Stderr, "%-16s %-23s %-62s %8.3fs %10.0f rows/s\n", r.System, r.Mode, r.Config, r.Elapsed.Seconds(), r.RowsPerSec())
			runs[i] = append(runs[i], r)
		}
	}
	var results []Result
	for _, rs := range runs {
		results = append(results, Median(rs))
	}
	fmt.Println(Table(results))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench/river:", err)
	os.Exit(1)
}

func riverDefaults() string {
	var s []string
	for _, c := range DefaultRiverConfigs() {
		s = append(s, fmt.Sprintf("%d:%s:%s", c.MaxWorkers, c.FetchCooldown, c.FetchPollInterval))
	}
	return strings.Join(s, ",")
}

func berthLabels(cs []BerthConfig) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Label)
	}
	return strings.Join(s, ",")
}

func parseRiver(list string) ([]RiverConfig, error) {
	if list == "" {
		return DefaultRiverConfigs(), nil
	}
	var out []RiverConfig
	for _, item := range strings.Split(list, ",") {
		f := strings.Split(strings.TrimSpace(item), ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("-river %q: want MaxWorkers:FetchCooldown:FetchPollInterval", item)
		}
		w, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("-river %q: %w", item, err)
		}
		cd, err := time.ParseDuration(f[1])
		if err != nil {
			return nil, fmt.Errorf("-river %q: %w", item, err)
		}
		pi, err := time.ParseDuration(f[2])
		if err != nil {
			return nil, fmt.Errorf("-river %q: %w", item, err)
		}
		out = append(out, RiverConfig{MaxWorkers: w, FetchCooldown: cd, FetchPollInterval: pi})
	}
	return out, nil
}

func pickBerth(list string) ([]BerthConfig, error) {
	if list == "" {
		return DefaultBerthConfigs(), nil
	}
	var out []BerthConfig
	for _, l := range strings.Split(list, ",") {
		c, err := ParseBerthLabel(strings.TrimSpace(l))
		if err != nil {
			return nil, fmt.Errorf("-berth: %w", err)
		}
		out = append(out, c)
	}
	return out, nil
}
