// Command berth runs berth's demos and its node.
//
//	go run ./cmd/berth demo [flags]            the live-relocation demo, in one process
//	go run ./cmd/berth demo -procs 3 [flags]   the same across node processes, on Postgres
//	go run ./cmd/berth node -name n1          one host per process (see package node)
//	go run ./cmd/berth pgdemo [flags]          Postgres inbox tables through objects
//	go run ./cmd/berth certs -dir DIR n1 n2    a development CA and node certificates (see certs.go)
//	go run ./cmd/berth admin -addr A members   a node's admin API from the command line (see admin.go)
//
// The demo starts several in-process hosts sharing an in-memory Location Store,
// activates thousands of counter objects across them, drives steady load
// from several senders that number their messages per object, then drains
// one host and rebalances objects live between the others while the load
// continues. It shows a progress line while it runs and ends with a report:
// messages accepted, handled, lost, duplicated and out of order (checked
// object by object), relocations done, pause p50/p99, throughput.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/account"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/metrics"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/inproc"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pgdemo" {
		os.Exit(pgdemoMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(nodeMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "certs" {
		os.Exit(certsMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		os.Exit(adminMain(context.Background(), os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	if len(os.Args) < 2 || os.Args[1] != "demo" {
		fmt.Fprintln(os.Stderr, "usage: berth demo|node|pgdemo|certs|admin [flags]   (berth demo -h, berth node -h, berth pgdemo -h, berth certs -h, berth admin -h for the flags)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	cfg := demoConfig{}
	fs.IntVar(&cfg.hosts, "hosts", 3, "hosts in the process (one of them is drained)")
	fs.IntVar(&cfg.objects, "objects", 5000, "counter objects")
	fs.IntVar(&cfg.senders, "senders", 4, "sending goroutines on each host that is not drained")
	fs.DurationVar(&cfg.duration, "duration", 9*time.Second, "how long the load runs")
	fs.IntVar(&cfg.rebalance, "rebalance", 1000, "objects moved between the remaining hosts after the drain")
	fs.IntVar(&cfg.rate, "rate", 50000, "messages per second, all senders together (0: as fast as they can)")
	fs.StringVar(&cfg.metricsAddr, "metrics", "", "serve Prometheus metrics on this address (e.g. :9090)")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no progress line")
	fs.IntVar(&cfg.accounts, "accounts", 1000, "persistent accounts in the durable-state phase (0: skip it)")
	fs.DurationVar(&cfg.crashFor, "crash-for", 3*time.Second, "how long the durable-state phase's deposits run (a host crashes a third of the way in)")
	procs := fs.Int("procs", 0, "run the hosts as this many `berth node` processes on loopback, with a Postgres Location Store (0: hosts in this process, in memory)")
	db := fs.String("db", "", "with -procs: the Postgres URL (default: start a throwaway server)")
	_ = fs.Parse(os.Args[2:])
	if *procs > 0 {
		pc := procsConfig{procs: *procs, objects: cfg.objects, senders: cfg.senders, rate: cfg.rate, duration: cfg.duration, db: *db, quiet: cfg.quiet,
			accounts: min(cfg.accounts, 500)}
		if !flagSet(fs, "duration") {
			pc.duration = 40 * time.Second // room for the killed node's lease to run out
		}
		if !flagSet(fs, "objects") {
			pc.objects = 2000
		}
		prep, err := runProcs(context.Background(), pc, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		if prep.failed() {
			os.Exit(1)
		}
		return
	}
	rep, err := run(context.Background(), cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if rep.lost+rep.duplicated+rep.outOfOrder > 0 || rep.durable.failed() {
		os.Exit(1)
	}
}

// paced calls send until stop is closed or send returns false, perSecond
// times a second (a burst per millisecond tick, so that the load is
// steady), or as fast as it can when perSecond is 0.
func paced(stop <-chan struct{}, perSecond int, send func() bool) {
	var tick <-chan time.Time
	perTick, sentThisTick := 0, 0
	if perSecond > 0 {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		tick = t.C
		perTick = max(1, perSecond/1000)
	}
	for {
		if tick != nil && sentThisTick >= perTick {
			select {
			case <-stop:
				return
			case <-tick:
				sentThisTick = 0
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		sentThisTick++
		if !send() {
			return
		}
	}
}

// progress calls line every 250 ms, until stop is closed, with the time
// since start, the count of accepted messages and their rate since the
// last call. The returned channel is closed when it has stopped.
func progress(stop <-chan struct{}, start time.Time, accepted *atomic.Int64, line func(elapsed time.Duration, n int64, rate float64)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				n := accepted.Load()
				line(now.Sub(start), n, float64(n-last)/now.Sub(lastAt).Seconds())
				last, lastAt = n, now
			}
		}
	}()
	return done
}

// perSender is each of n senders' share of rate messages a second (at
// least 1), or 0 (unpaced) when rate is 0.
func perSender(rate, n int) int {
	if rate <= 0 {
		return 0
	}
	return max(1, rate/n)
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type demoConfig struct {
	hosts, objects, senders, rebalance int
	rate                               int // messages/s over all senders; 0: unpaced
	duration                           time.Duration
	metricsAddr                        string
	quiet                              bool
	accounts                           int           // persistent accounts in the crash phase (0: none)
	crashFor                           time.Duration // how long the crash phase's deposits run
}

type report struct {
	accepted, handled, lost, duplicated, outOfOrder int
	breaks                                          []string // examples of order breaks, by object
	relocations                                     int
	pauses                                          []time.Duration
	elapsed                                         time.Duration
	durable                                         durableReport
}

func run(ctx context.Context, cfg demoConfig, w io.Writer) (report, error) {
	var rep report
	if cfg.hosts < 2 {
		return rep, errors.New("-hosts must be at least 2")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The in-process cluster: one transport, one Location Store, one
	// membership, shared by every host.
	tnet := inproc.NewNetwork(inproc.Options{})
	store := relocation.NewMemoryStore(nil)
	members := membership.NewMemory(membership.Options{})
	defer members.Close()
	byName := map[string]*actor.Host{}
	var obs actor.Observer
	if cfg.metricsAddr != "" {
		obs = metrics.New(prometheus.NewRegistry())
	}
	hosts := make([]*actor.Host, cfg.hosts)
	for i := range hosts {
		c := actor.Config{Name: "host-" + strconv.Itoa(i+1), Transport: tnet, Store: store, Membership: members,
			Logger: quiet, Observer: obs}
		if i == 0 {
			c.MetricsAddr = cfg.metricsAddr
		}
		h, err := actor.NewHost(c)
		if err != nil {
			return rep, err
		}
		h.Register(counter.Kind(), account.Kind())
		if err := h.Start(); err != nil {
			return rep, err
		}
		defer h.Close()
		hosts[i] = h
		byName[h.Name()] = h
	}
	if addr := hosts[0].MetricsAddr(); addr != "" {
		fmt.Fprintf(w, "metrics on http://%s/metrics\n", addr)
	}
	drained := hosts[len(hosts)-1]
	staying := hosts[:len(hosts)-1]
	ref := func(i int) actor.Ref { return actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)} }

	load := "as fast as they can"
	if cfg.rate > 0 {
		load = strconv.Itoa(cfg.rate) + " messages/s"
	}
	fmt.Fprintf(w, "berth demo: %d hosts, %d objects, %d senders per host (%s); draining %s, then rebalancing %d objects\n",
		cfg.hosts, cfg.objects, cfg.senders, load, drained.Name(), cfg.rebalance)
	for i := 0; i < cfg.objects; i++ { // activate the objects across every host
		if _, err := actor.Ask[counter.Read, counter.Counter](ctx, hosts[i%len(hosts)], ref(i), counter.Read{}); err != nil {
			return rep, err
		}
	}

	// Load: every sender numbers its messages per object.
	type sender struct {
		name string
		host *actor.Host
		sent []int // per object: the last sequence number accepted
	}
	var senders []*sender
	for _, h := range staying {
		for s := 0; s < cfg.senders; s++ {
			senders = append(senders, &sender{name: h.Name() + "/" + strconv.Itoa(s), host: h, sent: make([]int, cfg.objects)})
		}
	}
	var accepted atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, len(senders)+1)
	var wg sync.WaitGroup
	for si, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(si), 1))
			paced(stop, perSender(cfg.rate, len(senders)), func() bool {
				i := rng.IntN(cfg.objects)
				if err := actor.Tell(ctx, s.host, ref(i), counter.Add{Sender: s.name, Seq: s.sent[i] + 1}); err != nil {
					errc <- fmt.Errorf("%s: %w", s.name, err)
					return false
				}
				s.sent[i]++
				accepted.Add(1)
				return true
			})
		}()
	}

	start := time.Now()
	var moves atomic.Int64
	phase := atomic.Value{}
	phase.Store("steady load")
	progressDone := progress(stop, start, &accepted, func(elapsed time.Duration, n int64, rate float64) {
		if !cfg.quiet {
			fmt.Fprintf(w, "\r%5.1fs  %-26s messages %9d  %7.0f/s  relocations %6d   ",
				elapsed.Seconds(), phase.Load().(string), n, rate, drainedMoves(hosts))
		}
	})

	third := cfg.duration / 3
	time.Sleep(third)
	phase.Store("draining " + drained.Name())
	drainStart := time.Now()
	before := drained.Stats().Relocations
	if err := drained.Drain(ctx); err != nil {
		close(stop)
		return rep, fmt.Errorf("drain: %w", err)
	}
	drainTook := time.Since(drainStart)
	drainedN := drained.Stats().Relocations - before

	phase.Store("rebalancing")
	deadline := start.Add(cfg.duration)
	// Rebalance: moves by 16 workers, each object picked at random and sent
	// to the other staying host, until -rebalance moves or the deadline.
	var picks, taken atomic.Int64
	var rwg sync.WaitGroup
	for wkr := 0; wkr < 16; wkr++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(42, uint64(wkr)))
			for picks.Add(1) <= int64(4*cfg.rebalance) && time.Now().Before(deadline) {
				i := rng.IntN(cfg.objects)
				row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)})
				if err != nil {
					continue
				}
				src := byName[row.Host]
				dst := staying[rng.IntN(len(staying))]
				if src == nil || src == dst || src == drained {
					continue
				}
				if taken.Add(1) > int64(cfg.rebalance) {
					return
				}
				if err := src.Relocate(ctx, ref(i), dst.Name()); err == nil {
					moves.Add(1)
				} else {
					taken.Add(-1) // refused or aborted: the slot is free again
				}
			}
		}()
	}
	rwg.Wait()
	phase.Store("steady load")
	if d := time.Until(deadline); d > 0 {
		time.Sleep(d)
	}
	close(stop)
	wg.Wait()
	<-progressDone
	rep.elapsed = time.Since(start)
	select {
	case err := <-errc:
		return rep, err
	default:
	}
	if !cfg.quiet {
		fmt.Fprintln(w)
	}

	// Check every object, asked through every sending host (after that
	// host's own messages).
	for i := 0; i < cfg.objects; i++ {
		var c counter.Counter
		for _, h := range staying {
			var err error
			if c, err = actor.Ask[counter.Read, counter.Counter](ctx, h, ref(i), counter.Read{}); err != nil {
				return rep, fmt.Errorf("reading object %d: %w", i, err)
			}
		}
		rep.outOfOrder += c.OutOfOrder
		for _, b := range c.Breaks {
			rep.breaks = append(rep.breaks, "object "+strconv.Itoa(i)+" "+b)
		}
		for _, s := range senders {
			want, got := s.sent[i], c.Count[s.name]
			rep.accepted += want
			rep.handled += got
			if got < want {
				rep.lost += want - got
			} else {
				rep.duplicated += got - want
			}
		}
	}
	rep.relocations = int(moves.Load()) + int(drainedN)
	for _, h := range hosts {
		rep.pauses = append(rep.pauses, h.Pauses()...)
	}
	slices.Sort(rep.pauses)

	fmt.Fprintf(w, "\nreport after %.1fs\n", rep.elapsed.Seconds())
	fmt.Fprintf(w, "  messages accepted   %d (%.0f/s)\n", rep.accepted, float64(rep.accepted)/rep.elapsed.Seconds())
	fmt.Fprintf(w, "  messages handled    %d\n", rep.handled)
	fmt.Fprintf(w, "  lost                %d\n", rep.lost)
	fmt.Fprintf(w, "  duplicated          %d\n", rep.duplicated)
	fmt.Fprintf(w, "  out of order        %d\n", rep.outOfOrder)
	fmt.Fprintf(w, "  relocations         %d (drain of %s: %d objects in %v, %.0f objects/s; rebalance: %d)\n",
		rep.relocations, drained.Name(), drainedN, drainTook.Round(time.Millisecond), float64(drainedN)/drainTook.Seconds(), moves.Load())
	if n := len(rep.pauses); n > 0 {
		fmt.Fprintf(w, "  pause (seal → open) p50 %v  p99 %v  max %v\n",
			rep.pauses[n/2].Round(time.Microsecond), rep.pauses[n*99/100].Round(time.Microsecond), rep.pauses[n-1].Round(time.Microsecond))
	}
	if cfg.accounts > 0 {
		d, err := crashPhase(ctx, cfg, tnet, store, members, staying, w)
		rep.durable = d
		if err != nil {
			return rep, fmt.Errorf("durable-state phase: %w", err)
		}
	}
	return rep, nil
}

// drainedMoves counts the moves the hosts completed as sources or targets,
// halved (each move counts on both sides).
func drainedMoves(hosts []*actor.Host) int {
	n := int64(0)
	for _, h := range hosts {
		n += h.Stats().Relocations
	}
	return int(n / 2)
}
