package main

// berth demo -procs N: the demo across OS processes.
//
// It starts N `berth node` processes on loopback, all on one Postgres
// database (a throwaway server, or -db), and joins them itself as a client
// host that owns no objects: its senders number their messages per
// object. A third of the way through it stops one node with SIGTERM (the
// node drains: its objects move to the others); from then on movers
// relocate random objects between the nodes left, and half way through it
// kills another node with SIGKILL, in the middle of moves from and to it.
// The objects that node held (or was taking over past the point of no
// return: their move ended DataLost) lose their state and the messages in
// it (they start afresh elsewhere once its lease ran out); the report
// counts them apart. Every other object must show every accepted message
// once, in order.
//
// The hosts' connections are mutual TLS: the demo makes a development CA
// (internal/devca) in a temporary directory, removed at the end, with a
// certificate for each node (its -tls-* files) and one for the client.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/account"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

type procsConfig struct {
	procs, objects, senders int
	rate                    int // messages/s over all senders; 0: unpaced
	duration                time.Duration
	db                      string // Postgres URL; "": a throwaway server
	binary                  string // the berth binary the nodes run; "": this executable
	quiet                   bool
	accounts                int // persistent accounts, deposits to them in closed loops (0: none)
}

type procsReport struct {
	accepted, refused, handled, lost, duplicated, outOfOrder int
	breaks                                                   []string
	// The objects the SIGKILLed node held when it died, and their
	// messages: accepted, and handled by their new activations.
	killedNode                    string
	killedObjects                 int
	killedAccepted, killedHandled int
	drainedNode                   string
	drainExit, killExit           string
	relocations                   int // moves reported by the nodes that stopped gracefully
	rebalanced                    int // moves the movers asked for that completed
	pauses                        []time.Duration
	// Failover: for each object the killed node held, the time from the
	// SIGKILL to its first answer from another node (sorted), how many
	// gave none within failoverLimit, and when the client's membership
	// reported the node gone.
	failover       []time.Duration
	failoverMissed int
	detected       time.Duration
	// Persistent accounts: deposits answered, and those missing from the
	// accounts at the end, applied twice or past a missing one; the
	// accounts the killed node held.
	depositsAcked                      int64
	depositsLost, depositsTwice, holes int
	accountsOnKilled                   int
	elapsed                            time.Duration
	nodeLogs                           map[string]*strings.Builder
}

func (r *procsReport) failed() bool {
	return r.lost+r.duplicated+r.outOfOrder+r.depositsLost+r.depositsTwice+r.holes > 0 || r.accepted == 0
}

// nodeProc is one berth node process.
type nodeProc struct {
	name, addr string
	http       string // its -http address, if it serves one
	admin      string // its -admin address, if it serves one
	cmd        *exec.Cmd
	log        *strings.Builder // its standard error
	logMu      *sync.Mutex
	done       chan struct{} // closed when it exited
	stats      []string      // its "stats" lines on standard output
	statsMu    sync.Mutex
}

// demoCA is the development CA of the multi-process demo: a node's
// certificate and key are files in dir, which berth node reads (-tls-*
// flags); an in-process host's are issued in memory.
type demoCA struct {
	dir string
	ca  *devca.CA
}

// newDemoCA makes a development CA in dir (made if missing) and writes a
// certificate and key for each of the node names there.
func newDemoCA(dir string, nodes []string) (*demoCA, error) {
	ca, err := devca.New("berth demo CA")
	if err != nil {
		return nil, err
	}
	if err := devca.WriteFiles(dir, ca, nodes); err != nil {
		return nil, err
	}
	return &demoCA{dir: dir, ca: ca}, nil
}

// nodeFlags returns the berth node flags of node name's TLS files (written
// by newDemoCA).
func (d *demoCA) nodeFlags(name string) []string {
	return []string{
		"-tls-cert", filepath.Join(d.dir, name+".pem"),
		"-tls-key", filepath.Join(d.dir, name+"-key.pem"),
		"-tls-ca", filepath.Join(d.dir, "ca.pem"),
	}
}

// hostTLS issues a certificate for member name and returns it with the
// CA's pool, for an in-process host's tcp.Options.
func (d *demoCA) hostTLS(name string) (*tcp.TLS, error) {
	cert, err := d.ca.IssueTLS(name)
	if err != nil {
		return nil, err
	}
	return &tcp.TLS{Certificate: cert, CA: d.ca.Pool()}, nil
}

// startNode starts a berth node process named name on loopback, on
// database db, with the TLS files of ca and the flags extra, and waits
// until it is serving.
func startNode(ctx context.Context, binary, name, db string, ca *demoCA, extra ...string) (*nodeProc, error) {
	return startNodeCommand(ctx, []string{binary, "node"}, name, db, ca, extra...)
}

// startNodeCommand is startNode for a node that command runs (a program
// and its first arguments): berth node, or a program of package node.
func startNodeCommand(ctx context.Context, command []string, name, db string, ca *demoCA, extra ...string) (*nodeProc, error) {
	n := &nodeProc{name: name, log: &strings.Builder{}, logMu: &sync.Mutex{}, done: make(chan struct{})}
	// The database URL goes in the environment, not on the command line:
	// any local user can read a process's arguments.
	args := append(append(command[1:len(command):len(command)], "-name", name, "-listen", "127.0.0.1:0"), ca.nodeFlags(name)...)
	n.cmd = exec.Command(command[0], append(args, extra...)...)
	n.cmd.Env = append(os.Environ(), "BERTH_DB="+db)
	n.cmd.Stderr = lockedWriter{n.logMu, n.log}
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if f := strings.Fields(line); len(f) == 2 && f[0] == "http" {
				n.http = f[1] // before ready: read after it
			} else if len(f) == 2 && f[0] == "admin" {
				n.admin = f[1] // before ready: read after it
			} else if len(f) == 3 && f[0] == "ready" {
				ready <- f[2]
			} else if strings.HasPrefix(line, "stats ") {
				n.statsMu.Lock()
				n.stats = append(n.stats, line)
				n.statsMu.Unlock()
			}
		}
		_ = n.cmd.Wait()
		close(n.done)
	}()
	select {
	case n.addr = <-ready:
		return n, nil
	case <-n.done:
		return nil, fmt.Errorf("node %s exited before it was ready: %s", name, n.stderr())
	case <-time.After(60 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
		return nil, fmt.Errorf("node %s not ready after 60 s: %s", name, n.stderr())
	case <-ctx.Done():
		_ = n.cmd.Process.Kill()
		<-n.done
		return nil, ctx.Err()
	}
}

func (n *nodeProc) stderr() string {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	return n.log.String()
}

// signal sends s and waits up to d for the node to exit; it returns how it
// exited.
func (n *nodeProc) signal(s syscall.Signal, d time.Duration) string {
	_ = n.cmd.Process.Signal(s)
	select {
	case <-n.done:
	case <-time.After(d):
		_ = n.cmd.Process.Kill()
		<-n.done
		return "did not exit in " + d.String() + "; killed"
	}
	return n.cmd.ProcessState.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func runProcs(ctx context.Context, cfg procsConfig, w io.Writer) (rep procsReport, err error) {
	if cfg.procs < 3 {
		return rep, errors.New("-procs must be at least 3 (one is drained, one is killed)")
	}
	if cfg.binary == "" {
		if cfg.binary, err = os.Executable(); err != nil {
			return rep, err
		}
	}
	if cfg.db == "" {
		srv, err := startPostgres()
		if err != nil {
			if errors.Is(err, pgtest.ErrNoPostgres) {
				return rep, errors.New(strings.TrimSpace(strings.Replace(noPostgres, "pgdemo", "demo -procs", 1)))
			}
			return rep, fmt.Errorf("starting a throwaway Postgres: %w", err)
		}
		defer srv.Stop()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cfg.db, err = pgtest.CreateDatabase(cctx, srv.URL("postgres"), "berth_demo")
		cancel()
		if err != nil {
			return rep, fmt.Errorf("creating the database: %w", err)
		}
		fmt.Fprintf(w, "throwaway Postgres in %s (stopped at the end)\n", srv.Dir())
	}

	// The CA of the hosts' certificates.
	names := make([]string, cfg.procs)
	for i := range names {
		names[i] = "node-" + strconv.Itoa(i+1)
	}
	caDir, err := os.MkdirTemp("", "berth-demo-ca-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(caDir)
	ca, err := newDemoCA(caDir, names)
	if err != nil {
		return rep, fmt.Errorf("making the demo's CA: %w", err)
	}
	fmt.Fprintf(w, "development CA and the hosts' certificates in %s (removed at the end)\n", caDir)

	// The nodes.
	nodes := make([]*nodeProc, cfg.procs)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				_ = n.cmd.Process.Kill()
				<-n.done
			}
		}
	}()
	for i := range nodes {
		if nodes[i], err = startNode(ctx, cfg.binary, names[i], cfg.db, ca); err != nil {
			return rep, err
		}
	}
	rep.nodeLogs = map[string]*strings.Builder{}
	for _, n := range nodes {
		rep.nodeLogs[n.name] = n.log
	}
	drained, killed := nodes[len(nodes)-1], nodes[len(nodes)-2]
	rep.drainedNode, rep.killedNode = drained.name, killed.name

	// The client host: joins the cluster, owns no objects.
	// The client asks for moves (Relocate) besides sending messages: that
	// takes a node's certificate, though it hosts nothing (a gateway's
	// certificate, berth certs -gateway, allows messages and asks only).
	clientTLS, err := ca.hostTLS("client")
	if err != nil {
		return rep, err
	}
	client, store, closeClient, err := startGateway(ctx, cfg.db, "client", tcp.Options{TLS: clientTLS}, cfg.procs)
	if err != nil {
		return rep, err
	}
	defer closeClient()

	ref := func(i int) actor.Ref { return actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)} }
	load := "as fast as they can"
	if cfg.rate > 0 {
		load = strconv.Itoa(cfg.rate) + " messages/s"
	}
	fmt.Fprintf(w, "berth demo: %d node processes, %d objects, %d senders in a client host (%s); SIGTERM %s at 1/3, SIGKILL %s at 1/2\n",
		cfg.procs, cfg.objects, cfg.senders, load, drained.name, killed.name)
	for i := 0; i < cfg.objects; i++ { // activate the objects (placed by the cluster)
		if _, err := actor.Ask[counter.Read, counter.Counter](ctx, client, ref(i), counter.Read{}); err != nil {
			return rep, fmt.Errorf("activating object %d: %w", i, err)
		}
	}

	for i := 0; i < cfg.accounts; i++ { // activate the accounts (placed by the cluster)
		if _, err := actor.Ask[account.Read, account.Account](ctx, client, accountRef(i), account.Read{}); err != nil {
			return rep, fmt.Errorf("activating account %d: %w", i, err)
		}
	}
	var deposits *depositLoad
	if cfg.accounts > 0 {
		deposits = startDeposits(ctx, cfg.accounts, []string{"client/d0", "client/d1", "client/d2", "client/d3"},
			func(int) *actor.Host { return client })
		defer func() {
			if deposits != nil {
				deposits.stop()
			}
		}()
	}

	type sender struct {
		name string
		sent []int // per object: the last sequence number accepted
	}
	senders := make([]*sender, cfg.senders)
	for s := range senders {
		senders[s] = &sender{name: "client/" + strconv.Itoa(s), sent: make([]int, cfg.objects)}
	}
	var accepted, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for si, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(si), 2))
			paced(stop, perSender(cfg.rate, len(senders)), func() bool {
				i := rng.IntN(cfg.objects)
				if err := actor.Tell(ctx, client, ref(i), counter.Add{Sender: s.name, Seq: s.sent[i] + 1}); err != nil {
					// Not accepted, and the sender knows: an object of the
					// killed node until its lease ran out, say.
					refused.Add(1)
					return true
				}
				s.sent[i]++
				accepted.Add(1)
				return true
			})
		}()
	}

	start := time.Now()
	var phase atomic.Value
	phase.Store("steady load")
	progressDone := progress(stop, start, &accepted, func(elapsed time.Duration, n int64, rate float64) {
		if !cfg.quiet {
			fmt.Fprintf(w, "\r%5.1fs  %-22s accepted %9d  %7.0f/s  refused %6d   ",
				elapsed.Seconds(), phase.Load().(string), n, rate, refused.Load())
		}
	})
	sleepUntil := func(t time.Time) {
		if d := time.Until(t); d > 0 {
			time.Sleep(d)
		}
	}

	// A third in: SIGTERM one node; it drains to the others.
	sleepUntil(start.Add(cfg.duration / 3))
	phase.Store("SIGTERM " + drained.name)
	rep.drainExit = drained.signal(syscall.SIGTERM, 2*time.Minute)

	// Then movers relocate random objects between the nodes left (asked
	// through the client: the owner moves it), so that the SIGKILL lands in
	// the middle of moves, the killed node their source or their target.
	var moved atomic.Int64
	var killing atomic.Bool // the SIGKILL is under way or done
	var lostMu sync.Mutex
	// Objects whose move ended DataLost (the target died past the point of
	// no return), or whose move to the killed node was under way when the
	// kill came and failed (its outcome may be that): their state may have
	// died with the killed node.
	lostInMove := map[int]bool{}
	moverStop := make(chan struct{})
	var mwg sync.WaitGroup
	var left []string
	for _, n := range nodes {
		if n != drained {
			left = append(left, n.name)
		}
	}
	for m := range 4 {
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			rng := rand.New(rand.NewPCG(uint64(m), 3))
			paced(moverStop, 50, func() bool {
				i := rng.IntN(cfg.objects)
				dst := left[rng.IntN(len(left))]
				beforeKill := !killing.Load()
				mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := client.Relocate(mctx, ref(i), dst)
				cancel()
				switch {
				case err == nil:
					moved.Add(1)
				case errors.Is(err, payload.DataLost), dst == killed.name && beforeKill && killing.Load():
					lostMu.Lock()
					lostInMove[i] = true
					lostMu.Unlock()
				} // else refused, aborted (the object resumed where it was), or in progress
				return true
			})
		}()
	}

	// Half way: SIGKILL another. Note which objects it held.
	sleepUntil(start.Add(cfg.duration / 2))
	phase.Store("SIGKILL " + killed.name)
	held := map[int]bool{}
	for i := 0; i < cfg.objects; i++ {
		row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)})
		if err == nil && row.Host == killed.name {
			held[i] = true
		}
	}
	killing.Store(true)
	killedAt := time.Now()
	rep.killExit = killed.signal(syscall.SIGKILL, 10*time.Second)
	// Objects it was taking over while it died are held too: read again.
	for i := 0; i < cfg.objects; i++ {
		row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)})
		if err == nil && row.Host == killed.name {
			held[i] = true
		}
	}
	rep.killedObjects = len(held)
	for i := 0; i < cfg.accounts; i++ {
		if row, err := store.Get(ctx, relocation.Object{Kind: account.Name, ID: strconv.Itoa(i)}); err == nil && row.Host == killed.name {
			rep.accountsOnKilled++
		}
	}
	probesDone := probeFailover(ctx, client, killed.name, held, ref, killedAt, &rep)
	phase.Store("after the kill")
	sleepUntil(start.Add(cfg.duration))
	close(moverStop)
	mwg.Wait()
	for i := range lostInMove { // moves to the killed node past the point of no return
		held[i] = true
	}
	rep.killedObjects = len(held)
	rep.rebalanced = int(moved.Load())
	<-probesDone
	close(stop)
	wg.Wait()
	<-progressDone
	rep.elapsed = time.Since(start)
	rep.refused = int(refused.Load())
	if !cfg.quiet {
		fmt.Fprintln(w)
	}

	// Read every object through the client (after its own messages).
	for i := 0; i < cfg.objects; i++ {
		var c counter.Counter
		var err error
		for try := 0; ; try++ {
			c, err = actor.Ask[counter.Read, counter.Counter](ctx, client, ref(i), counter.Read{})
			if err == nil || try == 50 {
				break
			}
			time.Sleep(200 * time.Millisecond) // an object of the killed node waits for its lease to run out
		}
		if err != nil {
			return rep, fmt.Errorf("reading object %d: %w", i, err)
		}
		for _, s := range senders {
			want, got := s.sent[i], c.Count[s.name]
			if held[i] {
				rep.killedAccepted += want
				rep.killedHandled += got
				continue
			}
			rep.accepted += want
			rep.handled += got
			if got < want {
				rep.lost += want - got
			} else {
				rep.duplicated += got - want
			}
		}
		if !held[i] {
			rep.outOfOrder += c.OutOfOrder
			for _, b := range c.Breaks {
				rep.breaks = append(rep.breaks, "object "+strconv.Itoa(i)+" "+b)
			}
		}
	}

	if deposits != nil {
		deposits.stop()
		rep.depositsAcked = deposits.acked.Load()
		rep.depositsLost, rep.depositsTwice, rep.holes, err = deposits.check(cfg.accounts, func(i int) (account.Account, error) {
			var a account.Account
			var err error
			for try := 0; try < 50; try++ {
				if a, err = actor.Ask[account.Read, account.Account](ctx, client, accountRef(i), account.Read{}); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond) // an account of the killed node waits for its lease to run out
			}
			return a, err
		})
		deposits = nil
		if err != nil {
			return rep, err
		}
	}

	// Stop the remaining nodes gracefully; each reports its moves and
	// pauses as it stops (the drained node reported when it stopped).
	for _, n := range nodes {
		if n != killed && n != drained {
			n.signal(syscall.SIGTERM, 2*time.Minute)
		}
	}
	for _, n := range nodes {
		n.statsMu.Lock()
		for _, line := range n.stats {
			moves, pauses := parseStats(line)
			rep.relocations += moves
			rep.pauses = append(rep.pauses, pauses...)
		}
		n.statsMu.Unlock()
	}
	slices.Sort(rep.pauses)

	fmt.Fprintf(w, "\nreport after %.1fs\n", rep.elapsed.Seconds())
	fmt.Fprintf(w, "  messages accepted   %d (%.0f/s), refused %d (the sender got an error)\n",
		rep.accepted+rep.killedAccepted, float64(rep.accepted+rep.killedAccepted)/rep.elapsed.Seconds(), rep.refused)
	fmt.Fprintf(w, "  objects that %s did not hold when it was killed:\n", killed.name)
	fmt.Fprintf(w, "    accepted %d, handled %d, lost %d, duplicated %d, out of order %d\n",
		rep.accepted, rep.handled, rep.lost, rep.duplicated, rep.outOfOrder)
	fmt.Fprintf(w, "  the %d objects %s held when it was killed (their state died with it; they started afresh elsewhere):\n",
		rep.killedObjects, killed.name)
	fmt.Fprintf(w, "    accepted %d, handled after the restart %d, lost with the process %d\n",
		rep.killedAccepted, rep.killedHandled, max(rep.killedAccepted-rep.killedHandled, 0))
	fmt.Fprintf(w, "  %s (SIGTERM): %s; %s (SIGKILL): %s\n", drained.name, rep.drainExit, killed.name, rep.killExit)
	fmt.Fprintf(w, "  relocations         %d (reported by the nodes that stopped gracefully; %d rebalancing moves asked through the client completed)\n", rep.relocations, rep.rebalanced)
	if n := len(rep.pauses); n > 0 {
		fmt.Fprintf(w, "  pause (seal → open) p50 %v  p99 %v  max %v\n",
			rep.pauses[n/2].Round(time.Microsecond), rep.pauses[n*99/100].Round(time.Microsecond), rep.pauses[n-1].Round(time.Microsecond))
	}
	if cfg.accounts > 0 {
		fmt.Fprintf(w, "  persistent accounts %d (%d on %s when it was killed): deposits answered %d; lost %d, applied twice %d, holes %d\n",
			cfg.accounts, rep.accountsOnKilled, killed.name, rep.depositsAcked, rep.depositsLost, rep.depositsTwice, rep.holes)
	}
	if n := len(rep.failover); n > 0 {
		fmt.Fprintf(w, "  failover of %s's objects (SIGKILL → first answer elsewhere, %d objects): p50 %v  p99 %v  max %v; %d gave none within %v; the membership reported %s gone after %v\n",
			killed.name, n, rep.failover[n/2].Round(time.Millisecond), rep.failover[n*99/100].Round(time.Millisecond), rep.failover[n-1].Round(time.Millisecond),
			rep.failoverMissed, failoverLimit, killed.name, rep.detected.Round(time.Millisecond))
	}
	return rep, nil
}

// failoverLimit bounds how long a failover probe asks one object.
const failoverLimit = 2 * time.Minute

// A failover probe's Ask waits at most probeAsk, and the next one starts
// probeEvery after it failed.
const (
	probeAsk   = 200 * time.Millisecond
	probeEvery = 20 * time.Millisecond
)

// probeFailover asks each object of held (the SIGKILLed node's), all at
// once, again and again (each Ask bounded by probeAsk, probeEvery apart),
// until it answers from another node, and records in rep the time from
// killedAt to that answer; and when the client's membership reported the
// node gone. The channel closes when every probe has ended. The probe's
// own resolution is about probeAsk + probeEvery: an Ask under way when the
// object comes back may wait out its bound first.
func probeFailover(ctx context.Context, client *actor.Host, killed string, held map[int]bool, ref func(int) actor.Ref, killedAt time.Time, rep *procsReport) <-chan struct{} {
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // detection: the membership's word
		defer wg.Done()
		for time.Since(killedAt) < failoverLimit && slices.Contains(client.Peers(), killed) {
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		rep.detected = time.Since(killedAt)
		mu.Unlock()
	}()
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				actx, cancel := context.WithTimeout(ctx, probeAsk)
				_, err := actor.Ask[counter.Read, counter.Counter](actx, client, ref(i), counter.Read{})
				cancel()
				took := time.Since(killedAt)
				if err == nil || took > failoverLimit {
					mu.Lock()
					if err == nil {
						rep.failover = append(rep.failover, took)
					} else {
						rep.failoverMissed++
					}
					mu.Unlock()
					return
				}
				time.Sleep(probeEvery)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		slices.Sort(rep.failover)
		close(done)
	}()
	return done
}

// startGateway joins a gateway host called name to the cluster on
// database db (it hosts no object; it has the counter kind's message
// types) on a transport/tcp transport with opts (which set TLS or
// Insecure; Listen defaults to a free port on loopback), and waits until
// it knows nodes nodes. It has the message types of kinds too. close
// closes it and its database resources.
func startGateway(ctx context.Context, db, name string, opts tcp.Options, nodes int, kinds ...actor.Registrable) (client *actor.Host, store *pgstore.Store, close func(), err error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll() // not close: an error return has set it to nil
		}
	}()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, pool.Close)
	if store, err = pgstore.Open(ctx, pool, pgstore.Options{}); err != nil {
		return nil, nil, nil, err
	}
	members, err := pgstore.OpenMembership(ctx, pool, pgstore.MembershipOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, members.Close)
	client, err = actor.NewHost(actor.Config{Name: name, Transport: tcp.New(opts),
		Store: store, Membership: members, Logger: slog.New(slog.DiscardHandler), Gateway: true})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := client.Register(append([]actor.Registrable{counter.Kind(), account.Kind()}, kinds...)...); err != nil { // its message types; it hosts no object
		return nil, nil, nil, err
	}
	if err := client.Start(); err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, func() { client.Close() })
	for deadline := time.Now().Add(30 * time.Second); len(client.Peers()) < nodes; {
		if time.Now().After(deadline) {
			return nil, nil, nil, fmt.Errorf("the client knows %v after 30 s, want %d nodes", client.Peers(), nodes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return client, store, closeAll, nil
}

// parseStats reads a node's "stats moves=N pauses-us=a,b,c" line.
func parseStats(line string) (moves int, pauses []time.Duration) {
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "moves":
			moves, _ = strconv.Atoi(v)
		case "pauses-us":
			for _, p := range strings.Split(v, ",") {
				if us, err := strconv.ParseInt(p, 10, 64); err == nil {
					pauses = append(pauses, time.Duration(us)*time.Microsecond)
				}
			}
		}
	}
	return moves, pauses
}

// accountRef names persistent account i.
func accountRef(i int) actor.Ref { return actor.Ref{Kind: account.Name, ID: strconv.Itoa(i)} }
