package tests

// The child side of the tests across OS processes. The test binary runs
// itself as a child process when BERTH_TESTS_CHILD names a role (see
// TestMain); the parent (procs_test.go) drives it with one-line commands
// on its standard input, and it answers each with one line on standard
// output, "ok ..." or "err ...". Its log goes to standard error. When its
// standard input ends (the parent is gone) it exits at once.
//
// Roles:
//
//	node     a berth host on transport/tcp (TLS, the tests' CA) and pgstore (database
//	         BERTH_CHILD_DB, name BERTH_CHILD_NAME; BERTH_CHILD_GATEWAY=1:
//	         a gateway, hosting nothing; BERTH_CHILD_INSECURE=1: without
//	         TLS; BERTH_CHILD_VERSION: its application version), with the
//	         seqlog, tally and bench kinds.
//	         BERTH_CHILD_KILL_AT="send Prepare" (or "recv Cutover",
//	         ...) SIGKILLs the process when it is about to send, or has just
//	         received, that relocation record.
//	         It hosts the persistent pjournal kind too, its states in
//	         pgstore; the command pausewrite SIGSTOPs it inside its next
//	         state write (pausingStates).
//	         BERTH_CHILD_CPUPROFILE=<file> (any role) writes a CPU profile
//	         of the child, to profile a benchmark's other side ("%n" in
//	         it: the role and name); BERTH_CHILD_TRACE=<file> an execution
//	         trace.
//	rawecho  a raw protoactor-go actor system with remote, and an actor
//	         named "echo" that answers every BytesValue with one: the
//	         baseline of the benchmarks across processes.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
	"github.com/jackc/pgx/v5/pgxpool"
)

const childEnv = "BERTH_TESTS_CHILD"

// seqlog is the state of the objects of the tests across processes: per
// sender, every sequence number the object ran, in the order it ran them.
type seqlog struct {
	Seen map[string][]int `json:"seen"`
}

type readSeqlog struct{}

func seqlogKind() *actor.Kind[seqlog] {
	k := actor.NewKind("seqlog", func(*actor.Context, string) (*seqlog, error) {
		return &seqlog{Seen: map[string][]int{}}, nil
	})
	actor.Handle(k, func(_ *actor.Context, l *seqlog, m numbered) error {
		l.Seen[m.Sender] = append(l.Seen[m.Sender], m.Seq)
		return nil
	})
	actor.HandleRequest(k, func(_ *actor.Context, l *seqlog, m numberedAsk) (int, error) {
		l.Seen[m.Sender] = append(l.Seen[m.Sender], m.Seq)
		return m.Seq, nil
	})
	actor.HandleRequest(k, func(_ *actor.Context, l *seqlog, _ readSeqlog) (seqlog, error) { return *l, nil })
	k.PreserveStateJSON()
	return k
}

func seqlogRef(i int) actor.Ref { return actor.Ref{Kind: "seqlog", ID: strconv.Itoa(i)} }

// senderReport is what a child's senders did, per sender name: for each
// object, the last sequence number they used (Sent) and the numbers of
// the Asks that failed (Uncertain: they may or may not have run). A Tell
// that failed did not use its number.
type senderReport struct {
	Sent       []int         `json:"sent"`
	Uncertain  map[int][]int `json:"uncertain,omitempty"`
	Tells      int           `json:"tells"`
	Asks       int           `json:"asks"`
	TellErrors int           `json:"tellErrors"`
	AskErrors  int           `json:"askErrors"`
	Errors     []string      `json:"errors,omitempty"` // the first few
	// Marked is Sent as the sender found it at its first send after the
	// last mark command (nil: none).
	Marked []int `json:"marked,omitempty"`
	// AskUS are the answered Asks' round trips in microseconds, by the
	// number of mark commands before each was sent (a phase of the run).
	AskUS map[int][]int `json:"askUS,omitempty"`
}

// moverReport is what a child's movers did.
type moverReport struct {
	Moved, Aborted, Busy int
	Errors               []string // unexpected ones, the first few
	Aborts               []string // the errors of the first few aborted moves
}

func childMain(role string) int {
	if path := os.Getenv("BERTH_CHILD_CPUPROFILE"); path != "" { // to profile a benchmark's other side
		f, err := os.Create(strings.ReplaceAll(path, "%n", role+"-"+os.Getenv("BERTH_CHILD_NAME")))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if path := os.Getenv("BERTH_CHILD_TRACE"); path != "" { // an execution trace, likewise
		f, err := os.Create(strings.ReplaceAll(path, "%n", role+"-"+os.Getenv("BERTH_CHILD_NAME")))
		if err == nil && trace.Start(f) == nil {
			defer func() { trace.Stop(); f.Close() }()
		}
	}
	switch role {
	case "node":
		return childNode()
	case "rawecho":
		return childRawEcho()
	case "rawtcp":
		return childRawTCP()
	}
	fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
	return 2
}

// killer wraps a transport: it SIGKILLs this process when the relocation
// record it watches for is about to be sent or was just received — or,
// with pause, SIGSTOPs it the first time (a slow process, not a dead one:
// the test resumes it).
type killer struct {
	inner  transport.Attacher
	dir    string // "send" or "recv"
	record string // the record's type name, as "Prepare"
	pause  bool
	once   sync.Once
}

func recordName(it transport.Item) string {
	if it.Kind != transport.Record {
		return ""
	}
	_, rec, err := relocation.DecodeRecord(it.Data)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", rec), "*relocation.")
}

func (k *killer) die() {
	if k.pause {
		k.once.Do(func() {
			fmt.Fprintf(os.Stderr, "PAUSE AT %s %s\n", k.dir, k.record)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		})
		return
	}
	fmt.Fprintf(os.Stderr, "KILL AT %s %s\n", k.dir, k.record)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func (k *killer) Attach(name string, h transport.Handler) (transport.Transport, error) {
	return k.AttachRun(name, 0, h)
}

// AttachRun implements transport.RunAttacher (if the inner attacher does).
func (k *killer) AttachRun(name string, run uint64, h transport.Handler) (transport.Transport, error) {
	var t transport.Transport
	var err error
	if ra, ok := k.inner.(transport.RunAttacher); ok {
		t, err = ra.AttachRun(name, run, killerHandler{h, k})
	} else {
		t, err = k.inner.Attach(name, killerHandler{h, k})
	}
	if err != nil {
		return nil, err
	}
	return killerTransport{t, k}, nil
}

type killerTransport struct {
	transport.Transport
	k *killer
}

func (t killerTransport) Send(to string, it transport.Item) error {
	if t.k.dir == "send" && recordName(it) == t.k.record {
		t.k.die()
	}
	return t.Transport.Send(to, it)
}

// The host publishes its address and learns its peers' through the
// transport's Directory.
func (t killerTransport) Addr() string { return t.Transport.(transport.Directory).Addr() }
func (t killerTransport) AddPeer(name, addr string) error {
	return t.Transport.(transport.Directory).AddPeer(name, addr)
}
func (t killerTransport) AddPeerRun(name, addr string, run uint64) error {
	if rd, ok := t.Transport.(transport.RunDirectory); ok {
		return rd.AddPeerRun(name, addr, run)
	}
	return t.AddPeer(name, addr)
}
func (t killerTransport) RemovePeer(name string) { t.Transport.(transport.Directory).RemovePeer(name) }

type killerHandler struct {
	transport.Handler
	k *killer
}

func (h killerHandler) Deliver(from string, it transport.Item) {
	if h.k.dir == "recv" && recordName(it) == h.k.record {
		h.k.die()
	}
	h.Handler.Deliver(from, it)
}

func childNode() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	name, db := os.Getenv("BERTH_CHILD_NAME"), os.Getenv("BERTH_CHILD_DB")
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// As berth node: the leases and the membership on a pool of their own,
	// which store work after an outage or a takeover cannot hold up, and
	// the renewals on one of theirs.
	pools, err := pgstore.OpenPools(octx, db)
	if err != nil {
		log.Error("open the database", "err", err)
		return 1
	}
	defer pools.Close()
	pool, leasePool := pools.Work, pools.Leases
	store, err := pgstore.Open(octx, pool, pgstore.Options{LeasePool: leasePool, RenewPool: pools.Renewals})
	if err != nil {
		log.Error("open the store", "err", err)
		return 1
	}
	members, err := pgstore.OpenMembership(octx, leasePool, pgstore.MembershipOptions{Logger: log, RenewPool: pools.Renewals})
	if err != nil {
		log.Error("open the membership", "err", err)
		return 1
	}
	defer members.Close()
	// BERTH_CHILD_MAX_PENDING (a number of items) sets the links' hard
	// bound, tcp.Options.MaxPendingItems (and HighItems under it).
	topts := tcp.Options{Listen: "127.0.0.1:0", Logger: log}
	if n, _ := strconv.Atoi(os.Getenv("BERTH_CHILD_MAX_PENDING")); n > 0 {
		topts.MaxPendingItems, topts.HighItems = n, n/2
	}
	tlsAtt := newTLSAttacher(topts)
	var att transport.Attacher = tlsAtt
	tcpOf := func() *tcp.Transport { return tlsAtt.Transport(name) }
	if os.Getenv("BERTH_CHILD_INSECURE") == "1" {
		plain := tcp.New(tcp.Options{Listen: "127.0.0.1:0", Logger: log, Insecure: true})
		att, tcpOf = plain, func() *tcp.Transport { return plain.Transport(name) }
	}
	if at := os.Getenv("BERTH_CHILD_KILL_AT"); at != "" {
		dir, rec, _ := strings.Cut(at, " ")
		att = &killer{inner: att, dir: dir, record: rec}
	}
	if at := os.Getenv("BERTH_CHILD_PAUSE_AT"); at != "" {
		dir, rec, _ := strings.Cut(at, " ")
		att = &killer{inner: att, dir: dir, record: rec, pause: true}
	}
	// BERTH_CHILD_GAP_TIMEOUT (a duration) sets Config.GapTimeout: a test
	// makes it shorter than a pause it inflicts, so that a timer standing in
	// for a failure would show.
	gapTimeout, _ := time.ParseDuration(os.Getenv("BERTH_CHILD_GAP_TIMEOUT"))
	// BERTH_CHILD_PEER_INBOUND (a number of messages) sets
	// Config.PeerInbound's Items.
	var peerInbound mailbox.Limits
	if n, _ := strconv.Atoi(os.Getenv("BERTH_CHILD_PEER_INBOUND")); n > 0 {
		peerInbound = mailbox.Limits{Items: n, Bytes: 64 << 20}
	}
	h, err := actor.NewHost(actor.Config{Name: name, Transport: att, Store: store, Membership: members, AppVersion: os.Getenv("BERTH_CHILD_VERSION"),
		Logger: log, Gateway: os.Getenv("BERTH_CHILD_GATEWAY") == "1", GapTimeout: gapTimeout, PeerInbound: peerInbound,
		StateStore: &pausingStates{StateStore: store, rows: store}})
	if err != nil {
		log.Error("new host", "err", err)
		return 1
	}
	h.Register(seqlogKind())
	h.Register(tallyKind())
	h.Register(benchKind())
	h.Register(pjournalKind())
	if err := h.Start(); err != nil {
		log.Error("start", "err", err)
		return 1
	}
	defer h.Close()
	fmt.Printf("ready %s %s\n", name, h.Addr())

	c := &childCtl{h: h, store: store, tcp: tcpOf}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return 0 // the parent is gone
			}
			reply, exit := c.do(line)
			fmt.Println(reply)
			if exit {
				return 0
			}
		case <-h.Done():
			fmt.Fprintf(os.Stderr, "host closed: %v\n", h.Err())
			// Whether a pool made a renewal wait: the failure report
			// shows it.
			for _, p := range []struct {
				name string
				pool *pgxpool.Pool
			}{{"lease", leasePool}, {"renewal", pools.Renewals}} {
				ls := p.pool.Stat()
				fmt.Fprintf(os.Stderr, "%s pool: %d of %d connections acquired, %d acquires waited for one (%v waiting in all), %d acquires in all\n",
					p.name, ls.AcquiredConns(), ls.MaxConns(), ls.EmptyAcquireCount(), ls.EmptyAcquireWaitTime(), ls.AcquireCount())
			}
			switch {
			case h.Err() == nil:
				return 0
			case errors.Is(h.Err(), actor.ErrLeaseLost):
				return 3
			}
			return 1
		}
	}
}

// childCtl runs a node child's commands.
type childCtl struct {
	h     *actor.Host
	store relocation.Store
	tcp   func() *tcp.Transport // the host's transport

	load       chan struct{} // closed to stop the senders
	mark       atomic.Int64  // mark commands so far: each sender notes its Sent at its next send (Marked)
	loadWG     sync.WaitGroup
	senders    map[string]*senderReport
	movers     chan struct{}
	moversWG   sync.WaitGroup
	moverMu    sync.Mutex
	moverStats moverReport

	hangWG  sync.WaitGroup // the Asks of hang
	hangMu  sync.Mutex
	hangRes []hangResult // guarded by hangMu
}

// hangResult is how one Ask of the hang command ended.
type hangResult struct {
	Object     string `json:"object"`
	Start      int64  `json:"start"`    // unix ns
	End        int64  `json:"end"`      // unix ns
	Deadline   int64  `json:"deadline"` // unix ns
	Err        string `json:"err,omitempty"`
	Kind       string `json:"kind,omitempty"`
	PeerFailed bool   `json:"peerFailed"` // errors.Is(err, actor.ErrPeerFailed)
}

// hang asks hangAsk of tally objects <prefix>from..<prefix>to-1, each
// with a deadline d from now, on goroutines of their own.
func (c *childCtl) hang(from, to int, prefix string, d time.Duration) {
	for i := from; i < to; i++ {
		c.hangWG.Add(1)
		go func() {
			defer c.hangWG.Done()
			ref := actor.Ref{Kind: "tally", ID: prefix + strconv.Itoa(i)}
			start := time.Now()
			ctx, cancel := context.WithDeadline(context.Background(), start.Add(d))
			defer cancel()
			_, err := actor.Ask[hangAsk, int](ctx, c.h, ref, hangAsk{})
			r := hangResult{Object: ref.ID, Start: start.UnixNano(), End: time.Now().UnixNano(), Deadline: start.Add(d).UnixNano()}
			if err != nil {
				r.Err, r.Kind, r.PeerFailed = err.Error(), payload.KindOf(err).String(), errors.Is(err, actor.ErrPeerFailed)
			}
			c.hangMu.Lock()
			c.hangRes = append(c.hangRes, r)
			c.hangMu.Unlock()
		}()
	}
}

func jsonLine(prefix string, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "err " + err.Error()
	}
	return prefix + " " + string(b)
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// do runs one command; exit: the child should exit after replying.
func (c *childCtl) do(line string) (reply string, exit bool) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "err empty command", false
	}
	ctx := context.Background()
	switch f[0] {
	case "ready": // ready → ok, or err <why the host is not ready> (Host.Ready)
		if err := c.h.Ready(); err != nil {
			return "err " + err.Error(), false
		}
		return "ok", false
	case "peers": // peers → ok <n> <names, comma-separated>
		p := c.h.Peers()
		return "ok " + strconv.Itoa(len(p)) + " " + strings.Join(p, ","), false
	case "load": // load <objects> <senders> <askEvery> <seed> <rate per sender, 0: unpaced>
		c.startLoad(atoi(f[1]), atoi(f[2]), atoi(f[3]), uint64(atoi(f[4])), atoi(f[5]))
		return "ok", false
	case "mark": // mark: each sender of load notes what it has sent (senderReport.Marked) at its next send
		c.mark.Add(1)
		return "ok", false
	case "unload": // unload → ok <json map[sender]senderReport>
		close(c.load)
		c.loadWG.Wait()
		return jsonLine("ok", c.senders), false
	case "movers": // movers <n> <objects> <targets,csv> <seed> <per mover per second>
		c.startMovers(atoi(f[1]), atoi(f[2]), strings.Split(f[3], ","), uint64(atoi(f[4])), atoi(f[5]))
		return "ok", false
	case "unmove": // unmove → ok <json moverReport>
		close(c.movers)
		c.moversWG.Wait()
		return jsonLine("ok", c.moverStats), false
	case "tell": // tell <id> <sender> <seq>
		if err := actor.Tell(ctx, c.h, seqlogRef(atoi(f[1])), numbered{Sender: f[2], Seq: atoi(f[3])}); err != nil {
			return "err " + err.Error(), false
		}
		return "ok", false
	case "read": // read <id> → ok <json seqlog>
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := actor.Ask[readSeqlog, seqlog](actx, c.h, seqlogRef(atoi(f[1])), readSeqlog{})
		if err != nil {
			return "err " + err.Error(), false
		}
		return jsonLine("ok", l), false
	case "readall": // readall <objects> <seconds> → ok <json []readResult>: every object read at once, each retried until it answers or the time is up
		return jsonLine("ok", c.readAll(atoi(f[1]), time.Duration(atoi(f[2]))*time.Second)), false
	case "activate": // activate <n> <prefix> <pad bytes>: tally objects <prefix>0..<prefix>n-1 activate here (64 at a time), each with a message from a sender named by pad bytes (its state)
		if err := c.activate(atoi(f[1]), f[2], atoi(f[3])); err != nil {
			return "err " + err.Error(), false
		}
		return "ok", false
	case "owner": // owner <kind> <id> → ok <host>
		row, err := c.store.Get(ctx, relocation.Object{Kind: f[1], ID: f[2]})
		if err != nil {
			return "err " + err.Error(), false
		}
		return "ok " + row.Host, false
	case "relocate": // relocate <kind> <id> <target> → ok | err <kind> <text>
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.h.Relocate(rctx, actor.Ref{Kind: f[1], ID: f[2]}, f[3]); err != nil {
			return "err " + payload.KindOf(err).String() + " " + err.Error(), false
		}
		return "ok", false
	case "drain": // drain → ok <ms> <pauses, as for pauses>; the host stopped, the child exits after replying
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		err := c.h.Drain(dctx)
		pprof.StopCPUProfile() // a profile of the drain (cpuprofile) ends with it: the child exits
		if err != nil {
			return "err " + err.Error(), false
		}
		return "ok " + strconv.FormatInt(time.Since(start).Milliseconds(), 10) + " " + pausesCSV(c.h), true
	case "hang": // hang <from> <to> <prefix> <seconds>: asks hangAsk of tally objects <prefix><from>..<prefix><to-1>, each with that deadline, on goroutines of their own
		c.hang(atoi(f[1]), atoi(f[2]), f[3], time.Duration(atoi(f[4]))*time.Second)
		return "ok", false
	case "hanging": // hanging → ok <n>: hangAsk handlers running here
		return "ok " + strconv.FormatInt(hangingNow.Load(), 10), false
	case "hangs": // hangs → ok <json []hangResult> once every Ask of hang ended
		c.hangWG.Wait()
		c.hangMu.Lock()
		defer c.hangMu.Unlock()
		return jsonLine("ok", c.hangRes), false
	case "tcpstats": // tcpstats → ok <json tcp.Stats> of the host's transport
		b, _ := json.Marshal(c.tcp().Stats())
		return "ok " + string(b), false
	case "stats": // stats → ok <json actor.Stats>
		return jsonLine("ok", c.h.Stats()), false
	case "events": // events → ok <json []actor.Event>: the host's event log
		return jsonLine("ok", c.h.Events(0)), false
	case "cpuprofile": // cpuprofile <file> | cpuprofile stop → ok: a CPU profile of the child from now until stop
		if f[1] == "stop" {
			pprof.StopCPUProfile()
			return "ok", false
		}
		pf, err := os.Create(f[1])
		if err != nil {
			return "err " + err.Error(), false
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return "err " + err.Error(), false
		}
		return "ok", false
	case "pauses": // pauses → ok <µs,µs,...> (and forgets them)
		return "ok " + pausesCSV(c.h), false
	case "owners": // owners <prefix> <n> → ok <json map[host]count> of tally objects <prefix>0..<prefix>n-1, by the store ("": no row)
		owners := map[string]int{}
		for i := range atoi(f[2]) {
			row, err := c.store.Get(ctx, relocation.Object{Kind: "tally", ID: f[1] + strconv.Itoa(i)})
			if errors.Is(err, relocation.ErrNoRow) {
				owners[""]++
				continue
			}
			if err != nil {
				return "err " + err.Error(), false
			}
			owners[row.Host]++
		}
		return jsonLine("ok", owners), false
	case "stop": // stop: graceful; the child exits after replying
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := c.h.Stop(sctx); err != nil {
			return "err " + err.Error(), true
		}
		return "ok", true
	}
	if reply, ok := persistDo(ctx, c.h, f); ok {
		return reply, false
	}
	return "err unknown command " + strconv.Quote(line), false
}

// pausesCSV returns the host's move pauses (Host.Pauses) in µs, separated
// by commas.
func pausesCSV(h *actor.Host) string {
	p := h.Pauses()
	us := make([]string, len(p))
	for i, d := range p {
		us[i] = strconv.FormatInt(d.Microseconds(), 10)
	}
	return strings.Join(us, ",")
}

// activate activates n tally objects here, with a state of about pad
// bytes each.
func (c *childCtl) activate(n int, prefix string, pad int) error {
	sender := strings.Repeat("x", max(pad, 1))
	var g errgroup.Group
	g.SetLimit(64)
	for i := range n {
		g.Go(func() error {
			ref := actor.Ref{Kind: "tally", ID: prefix + strconv.Itoa(i)}
			_, err := actor.Ask[numberedAsk, int](context.Background(), c.h, ref, numberedAsk{Sender: sender, Seq: 1})
			return err
		})
	}
	return g.Wait()
}

// readResult is one object's reading by readall.
type readResult struct {
	Log   seqlog        `json:"log"`
	Err   string        `json:"err,omitempty"` // the last error, when it never answered
	Tries int           `json:"tries"`
	Took  time.Duration `json:"took"`
}

// readAll reads seqlog objects 0..objects-1 concurrently, each retried
// until it answers or d is up.
func (c *childCtl) readAll(objects int, d time.Duration) []readResult {
	res := make([]readResult, objects)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for {
				res[i].Tries++
				actx, cancel := context.WithDeadline(context.Background(), deadline)
				l, err := actor.Ask[readSeqlog, seqlog](actx, c.h, seqlogRef(i), readSeqlog{})
				cancel()
				if err == nil {
					res[i] = readResult{Log: l, Tries: res[i].Tries, Took: time.Since(start)}
					return
				}
				res[i].Err = err.Error()
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return res
}

// startLoad starts senders named <host>/<s> sending numbered messages to
// random seqlog objects 0..objects-1, every askEvery-th an Ask.
func (c *childCtl) startLoad(objects, senders, askEvery int, seed uint64, rate int) {
	c.load = make(chan struct{})
	c.senders = map[string]*senderReport{}
	for s := range senders {
		name := c.h.Name() + "/" + strconv.Itoa(s)
		r := &senderReport{Sent: make([]int, objects), Uncertain: map[int][]int{}, AskUS: map[int][]int{}}
		c.senders[name] = r
		c.loadWG.Add(1)
		go func() {
			defer c.loadWG.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(s)))
			var tick <-chan time.Time
			if rate > 0 {
				t := time.NewTicker(time.Second / time.Duration(rate))
				defer t.Stop()
				tick = t.C
			}
			fail := func(what string, i, seq int, err error) {
				if len(r.Errors) < 5 {
					r.Errors = append(r.Errors, fmt.Sprintf("%s #%d to object %d: %v", what, seq, i, err))
				}
			}
			marked := int64(0)
			for {
				select {
				case <-c.load:
					return
				default:
				}
				if m := c.mark.Load(); m != marked {
					marked, r.Marked = m, slices.Clone(r.Sent)
				}
				if tick != nil {
					select {
					case <-c.load:
						return
					case <-tick:
					}
				}
				i := rng.IntN(objects)
				ask := askEvery > 0 && rng.IntN(askEvery) == 0
				began := time.Now()
				if r.sendOne(c.h, name, i, ask, 20*time.Second, fail) && ask {
					r.AskUS[int(marked)] = append(r.AskUS[int(marked)], int(time.Since(began).Microseconds()))
				}
			}
		}()
	}
}

// sendOne sends sender name's next numbered message to seqlog object i
// through h — an Ask answered within askTimeout if ask, else a Tell — and
// records it in r: an Ask's number is used whatever happened (uncertain
// if it failed), a refused Tell's is not. fail hears of each failure. It
// reports whether the message was accepted (a Tell taken, an Ask answered
// with its number).
func (r *senderReport) sendOne(h *actor.Host, name string, i int, ask bool, askTimeout time.Duration, fail func(what string, i, seq int, err error)) bool {
	seq := r.Sent[i] + 1
	if ask {
		ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
		got, err := actor.Ask[numberedAsk, int](ctx, h, seqlogRef(i), numberedAsk{Sender: name, Seq: seq})
		cancel()
		r.Sent[i] = seq // used, whatever happened
		if err != nil || got != seq {
			r.AskErrors++
			r.Uncertain[i] = append(r.Uncertain[i], seq)
			if err == nil {
				err = fmt.Errorf("answered %d", got)
			}
			fail("Ask", i, seq, err)
			return false
		}
		r.Asks++
		return true
	}
	if err := actor.Tell(context.Background(), h, seqlogRef(i), numbered{Sender: name, Seq: seq}); err != nil {
		r.TellErrors++ // refused: the number stays unused
		fail("Tell", i, seq, err)
		return false
	}
	r.Sent[i] = seq
	r.Tells++
	return true
}

// startMovers starts n movers relocating random seqlog objects to random
// targets, each at most perSecond moves a second.
func (c *childCtl) startMovers(n, objects int, targets []string, seed uint64, perSecond int) {
	c.movers = make(chan struct{})
	c.moverStats = moverReport{}
	for m := range n {
		c.moversWG.Add(1)
		go func() {
			defer c.moversWG.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(m)))
			t := time.NewTicker(time.Second / time.Duration(max(perSecond, 1)))
			defer t.Stop()
			for {
				select {
				case <-c.movers:
					return
				case <-t.C:
				}
				i, dst := rng.IntN(objects), targets[rng.IntN(len(targets))]
				mctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := c.h.Relocate(mctx, seqlogRef(i), dst)
				cancel()
				c.moverMu.Lock()
				switch {
				case err == nil:
					c.moverStats.Moved++
				case errors.Is(err, actor.ErrMoveInProgress), errors.Is(err, actor.ErrAlreadyThere), errors.Is(err, actor.ErrNotActive),
					errors.Is(err, actor.ErrShuttingDown), errors.Is(err, actor.ErrNotLocal):
					c.moverStats.Busy++
				case errors.Is(err, payload.Unavailable):
					c.moverStats.Aborted++ // aborted: the object resumed where it was
					if len(c.moverStats.Aborts) < 5 {
						c.moverStats.Aborts = append(c.moverStats.Aborts, fmt.Sprintf("%s Relocate %d to %s: %v", time.Now().Format("15:04:05.000"), i, dst, err))
					}
				default:
					if len(c.moverStats.Errors) < 5 {
						c.moverStats.Errors = append(c.moverStats.Errors, fmt.Sprintf("Relocate %d to %s: %v", i, dst, err))
					}
				}
				c.moverMu.Unlock()
			}
		}()
	}
}

// childRawEcho runs protoactor-go alone: an actor "echo" on an actor
// system with remote on loopback, answering every BytesValue.
func childRawEcho() int {
	sys, _ := rawSystem()
	if err := rawEcho(sys); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ready echo %s\n", sys.Address())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent is gone
	return 0
}

// The persistent side of the node child (persist_procs_test.go): the
// pjournal kind, its commands and a state store that can pause the
// process inside a write.

// pjState is a pjournal object's durable state: per sender, the last
// sequence number it applied. A message with the next number applies; one
// already applied (a retry whose first delivery landed) applies nothing
// and writes nothing; one past the next is a hole: an applied message was
// lost (it is recorded, and applied, so that the check sees it).
type pjState struct {
	Last    map[string]int `json:"last"`
	Applied int            `json:"applied"`
	Holes   []string       `json:"holes,omitempty"`
}

// pjAppend is a sender's numbered message to a pjournal object.
type pjAppend struct {
	Sender string
	Seq    int
}

// pjReply answers a pjAppend: the sender's last applied number, and
// whether this message applied (Fresh) or was a retry of an applied one.
type pjReply struct {
	Last  int
	Fresh bool
}

// pjRead asks a pjournal object for its state.
type pjRead struct{}

func pjournalKind() *actor.Kind[pjState] {
	k := actor.NewKind("pjournal", func(*actor.Context, string) (*pjState, error) {
		return &pjState{Last: map[string]int{}}, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, j *pjState, m pjAppend) (pjReply, error) {
		last := j.Last[m.Sender]
		switch {
		case m.Seq <= last:
			ctx.StateUnchanged() // a retry of an applied message
			return pjReply{Last: last}, nil
		case m.Seq > last+1:
			j.Holes = append(j.Holes, fmt.Sprintf("%s: %d after %d", m.Sender, m.Seq, last))
		}
		j.Last[m.Sender] = m.Seq
		j.Applied++
		return pjReply{Last: m.Seq, Fresh: true}, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, j *pjState, _ pjRead) (pjState, error) {
		ctx.StateUnchanged()
		return *j, nil
	})
	k.PersistStateJSON()
	return k
}

func pjRef(i int) actor.Ref { return actor.Ref{Kind: "pjournal", ID: strconv.Itoa(i)} }

// pauseNextWrite, set by the command pausewrite, makes the next state
// write of this (child) process of at least pauseMin states (or, pauseBy
// passed, of any) stop the process (SIGSTOP) before the write reaches the
// store.
var (
	pauseNextWrite atomic.Bool
	pauseMin       atomic.Int64
	pauseBy        atomic.Int64 // Unix ns
)

// pausingStates is the node child's state store: pgstore's, except that
// the write after pausewrite stops the process first. Resumed (SIGCONT),
// that write goes on to the store with the ownership it was made with, as
// a write already on its way would — on a context of its own, the host's
// having run out during the pause — and the child logs what the store
// answered: a paused node's zombie write, which must be fenced.
type pausingStates struct {
	relocation.StateStore
	rows relocation.Store // the Location Store beside it, for the log
}

// describe returns, for the log, each object's location row and stored
// state's owner generation.
func (s *pausingStates) describe(ctx context.Context, writes []relocation.StateWrite) string {
	out := make([]string, len(writes))
	for i, w := range writes {
		row, err := s.rows.Get(ctx, w.Object)
		st, lerr := s.StateStore.LoadState(ctx, w.Object)
		out[i] = fmt.Sprintf("%s{row %s %s owner %d, state owner %d}", w.Object.ID, row.State, row.Host, row.OwnerGen, st.OwnerGen)
		if err != nil || lerr != nil {
			out[i] = fmt.Sprintf("%s{%v %v}", w.Object.ID, err, lerr)
		}
	}
	return strings.Join(out, " ")
}

func (s *pausingStates) WriteStates(ctx context.Context, writes []relocation.StateWrite) ([]int, error) {
	if !pauseNextWrite.Load() || int64(len(writes)) < pauseMin.Load() && time.Now().UnixNano() < pauseBy.Load() ||
		!pauseNextWrite.CompareAndSwap(true, false) {
		return s.StateStore.WriteStates(ctx, writes)
	}
	objs := make([]string, len(writes))
	for i, w := range writes {
		objs[i] = w.Object.Kind + "/" + w.Object.ID + "@" + strconv.FormatUint(w.Owner.OwnerGen, 10)
	}
	// A stop the process sends itself takes hold asynchronously: this
	// goroutine could run on for a moment, and write before the stop. It
	// goes on only once the process was continued.
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	fmt.Fprintf(os.Stderr, "PAUSE IN WriteStates %s\n", strings.Join(objs, " "))
	stopped := time.Now()
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
	fmt.Fprintf(os.Stderr, "CONTINUED after %v stopped\n", time.Since(stopped).Round(time.Millisecond))
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	before := s.describe(wctx, writes)
	fenced, err := s.StateStore.WriteStates(wctx, writes)
	fmt.Fprintf(os.Stderr, "RESUMED WriteStates %d writes: fenced %v, err %v; before: %s; after: %s\n", len(writes), fenced, err, before, s.describe(wctx, writes))
	return fenced, err
}

// persistDo runs the persistent commands; ok: f was one of them.
func persistDo(ctx context.Context, h *actor.Host, f []string) (reply string, ok bool) {
	switch f[0] {
	case "jread": // jread <id> → ok <json pjState>: asked here (a new object activates here)
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		j, err := actor.Ask[pjRead, pjState](actx, h, pjRef(atoi(f[1])), pjRead{})
		if err != nil {
			return "err " + err.Error(), true
		}
		return jsonLine("ok", j), true
	case "pausewrite": // pausewrite <min states> <ms> → ok: the next state write of at least min states (of any, past ms) stops the process (pausingStates)
		pauseMin.Store(int64(atoi(f[1])))
		pauseBy.Store(time.Now().Add(time.Duration(atoi(f[2])) * time.Millisecond).UnixNano())
		pauseNextWrite.Store(true)
		return "ok", true
	}
	return "", false
}
