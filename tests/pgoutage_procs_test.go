package tests

// A Postgres outage across OS processes: three node children and a gateway
// in this process, on one Postgres of this test's own (so that stopping it
// disturbs no other test), under steady numbered traffic. The Postgres
// server is stopped (pg_ctl -m fast: its sessions are cut, new connections
// refused) for N seconds and started again, or made slow (every round trip
// to it delayed) for a while. The nodes pause (jeopardy) and resume; none
// exits, nothing accepted is lost, run twice or reordered, and nothing
// moves (docs/operations.md, "Jeopardy").

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

// pgOutageLong reports whether the long variants run: -long, or
// BERTH_LONG set (and not -short).
func pgOutageLong() bool {
	return !testing.Short() && (*long || os.Getenv("BERTH_LONG") != "")
}

// pgOutage is one variant: Postgres down for down, or slow (slowBy per
// round trip from its clients) for slowFor.
type pgOutage struct {
	name    string
	down    time.Duration
	slowFor time.Duration
	slowBy  time.Duration
	run     bool
	why     string // why it does not run by default
}

// TestAPostgresOutagePausesTheNodesAndTheyResumeLosingNothing: three node
// children and a gateway in this process on one Postgres. Two senders on
// each node and two on the gateway send numbered Tells and Asks (one in
// eight) to 200 seqlog objects (in-memory state), spread over the nodes;
// two closed-loop senders on the gateway send numbered Asks to 50
// persistent pjournal objects. Under that traffic Postgres is stopped (a
// fast shutdown) for 5 s, 15 s or 30 s (-long or BERTH_LONG=1; -short runs
// 5 s only) and started again, or made slow — every round trip from a
// client delayed 2 s — for 8 s through a proxy in this process; traffic
// goes on 3 s after it returns, then the senders stop. Then:
//   - no node process exited (each is stopped at the end and exits 0), the
//     gateway did not close itself;
//   - every object answers the gateway after the store's return (a fact
//     polled for up to 2 minutes; the time from Postgres's return to the
//     last object's first answer is logged);
//   - every object ran every accepted message of every sender once and in
//     order, its in-memory state intact (checkSeqs); every persistent
//     object holds every answered message, applied once, and what it
//     serves is what the store holds (checkJournals, checkServedIsStored);
//   - refused sends are typed (Unavailable or DeadlineExceeded), counted
//     and logged;
//   - with Postgres down: every node went into jeopardy, none found its
//     lease lapsed or an object taken over, no object changed owner (a
//     silence of the store takes nothing over), no gap was given up on
//     and nothing ran late.
func TestAPostgresOutagePausesTheNodesAndTheyResumeLosingNothing(t *testing.T) {
	pg := startOutagePostgres(t)
	seed := uint64(time.Now().UnixNano() % 1_000_000_000)
	if s, _ := strconv.ParseUint(os.Getenv("BERTH_PGOUTAGE_SEED"), 10, 64); s != 0 {
		seed = s
	}
	t.Logf("seed %d (BERTH_PGOUTAGE_SEED=%d to repeat)", seed, seed)
	for i, v := range []pgOutage{
		{name: "down_5s", down: 5 * time.Second, run: true},
		{name: "down_15s", down: 15 * time.Second, run: !testing.Short(), why: "-short"},
		{name: "down_30s", down: 30 * time.Second, run: pgOutageLong(), why: "runs with -long or BERTH_LONG=1"},
		{name: "slow_2s_per_round_trip_for_8s", slowFor: 8 * time.Second, slowBy: 2 * time.Second, run: !testing.Short(), why: "-short"},
		{name: "slow_5s_per_round_trip_for_15s", slowFor: 15 * time.Second, slowBy: 5 * time.Second, run: !testing.Short(), why: "-short"},
	} {
		t.Run(v.name, func(t *testing.T) {
			if !v.run {
				t.Skipf("skipped: %s", v.why)
			}
			pgOutageRun(t, pg, v, seed+uint64(i)*1000)
		})
	}
}

func pgOutageRun(t *testing.T, pg *outagePG, v pgOutage, seed uint64) {
	const (
		objects  = 200 // seqlog: in-memory state
		pobjects = 50  // pjournal: persistent
		rate     = 100 // per sender per second
	)
	t.Logf("seed %d", seed)
	dbURL := pg.newDatabase(t)
	nodeURL := dbURL
	var proxy *delayProxy
	if v.slowFor > 0 {
		proxy = newDelayProxy(t, dbURL)
		nodeURL = proxy.url
	}

	// The cluster: three node children, a gateway here.
	var nodes []*child
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, startNodeChild(t, nodeURL, "n"+strconv.Itoa(i)))
	}
	store, members, closePG := openPostgres(t, nodeURL)
	t.Cleanup(closePG)
	gw, err := actor.NewHost(actor.Config{Name: "gateway", Transport: newTLSAttacher(tcp.Options{}), Store: store,
		Membership: members, Logger: quietLogger(), Gateway: true})
	if err != nil {
		t.Fatal(err)
	}
	gw.Register(seqlogKind())
	gw.Register(pjournalKind())
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	testutil.WaitForWithin(t, "the gateway to know the nodes", time.Minute, func() bool { return len(gw.Peers()) >= len(nodes) })
	for _, n := range nodes {
		n.waitPeers(t, len(nodes)) // the other nodes and the gateway
	}
	for i := range objects { // seqlog i activates on nodes[i%3]
		nodes[i%len(nodes)].must(t, "read "+strconv.Itoa(i))
	}
	for i := range pobjects { // pjournal i likewise
		nodes[i%len(nodes)].must(t, "jread "+strconv.Itoa(i))
	}
	ownersBefore := pgOutageOwners(t, store, objects, pobjects)

	// Traffic: node-local senders, gateway senders to both kinds.
	// n1 and n2's senders ask every eighth message (on average), n3's
	// only tell; likewise the gateway's first two senders and its third:
	// a sender waiting for an Ask sends nothing meanwhile, one that only
	// tells keeps sending into the outage.
	for i, n := range nodes {
		askEvery := 8
		if i == 2 {
			askEvery = 0
		}
		n.must(t, fmt.Sprintf("load %d 2 %d %d %d", objects, askEvery, seed+uint64(i)+1, rate))
	}
	gl := startGatewayLoad(gw, objects, []int{8, 8, 0}, seed, rate, 10*time.Second)
	pstop := make(chan struct{})
	psenders, pwg := runSenders(t, gw, "gp", 2, pobjects, seed+100, 3*time.Second, nil, pstop)
	var pstopped sync.Once
	stopP := func() {
		pstopped.Do(func() { close(pstop) })
		pwg.Wait()
	}
	// A failure before the senders are stopped below must not leave them
	// sending into the next test (its leak check would fail for them).
	t.Cleanup(func() { gl.stop(); stopP() })
	pgOutageWaitTraffic(t, gl, 2*time.Second)

	// The outage.
	checkAlive := func(when string) {
		t.Helper()
		for _, n := range nodes {
			select {
			case <-n.done:
				t.Fatalf("%s: node %s exited (%v); its log:\n%s", when, n.name, n.cmd.ProcessState, tailString(n.stderr(), 4000))
			default:
			}
		}
		select {
		case <-gw.Done():
			t.Fatalf("%s: the gateway closed itself: %v", when, gw.Err())
		default:
		}
	}
	var upAt time.Time
	jeopardyAt := map[string]time.Duration{} // since the outage began: each node seen in jeopardy
	began := time.Now()
	watchJeopardy := func(until time.Time) {
		for time.Now().Before(until) {
			for _, n := range nodes {
				if _, ok := jeopardyAt[n.name]; ok {
					continue
				}
				if st := decode[actor.Stats](t, n.must(t, "stats")); st.Jeopardy {
					jeopardyAt[n.name] = time.Since(began).Round(10 * time.Millisecond)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if v.down > 0 {
		if err := pg.stop(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Since(began)
		watchJeopardy(began.Add(v.down))
		checkAlive("with Postgres down")
		startAt := time.Now()
		if err := pg.start(); err != nil {
			t.Fatal(err)
		}
		upAt = time.Now()
		t.Logf("Postgres stopped (fast) in %v, down %v in all, started in %v; nodes in jeopardy after %v",
			stopped.Round(time.Millisecond), upAt.Sub(began).Round(time.Millisecond), upAt.Sub(startAt).Round(time.Millisecond), jeopardyAt)
	} else {
		proxy.delay.Store(int64(v.slowBy))
		watchJeopardy(began.Add(v.slowFor))
		checkAlive("with Postgres slow")
		proxy.delay.Store(0)
		upAt = time.Now()
		t.Logf("Postgres slow (%v per round trip from a client) for %v; nodes in jeopardy after %v", v.slowBy, v.slowFor, jeopardyAt)
	}

	// After its return: every object answers the gateway (polled, all at
	// once), while the traffic goes on 3 s more.
	type answers struct {
		took []time.Duration
		errs []error
	}
	ready := make(chan answers, 1)
	go func() {
		took, errs := pgOutageAllAnswer(gw, objects, pobjects, upAt, 2*time.Minute)
		ready <- answers{took, errs}
	}()
	time.Sleep(time.Until(upAt.Add(3 * time.Second))) // traffic runs meanwhile
	checkAlive("after Postgres returned")
	ans := <-ready
	took := ans.took
	reports := loadReports(t, nodes...)
	greports, gkinds, gerrs := gl.stop()
	gTellErrs, gAskErrs := 0, 0
	for name, r := range greports {
		reports[name] = r
		gTellErrs += r.TellErrors
		gAskErrs += r.AskErrors
	}
	stopP()
	checkAlive("after the senders stopped")

	var slowest time.Duration
	unanswered := 0
	for i, d := range took {
		if d < 0 {
			unanswered++
			if unanswered <= 5 {
				t.Errorf("%s did not answer the gateway within 2 minutes of Postgres's return: %v", pgOutageObjName(i, objects), ans.errs[i])
				pgOutageDiagnose(t, nodes, gw, store, i, objects)
			}
		}
		slowest = max(slowest, d)
	}
	if unanswered > 0 {
		pgOutageStats(t, nodes, gw)
		for _, n := range nodes {
			t.Logf("%s's log (its end):\n%s", n.name, tailString(n.stderr(), 6000))
		}
		t.Fatalf("%d of %d objects did not answer within 2 minutes of Postgres's return", unanswered, len(took))
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("MEASURED %s: all %d objects answered %v after Postgres returned (p50 %v, p90 %v)",
		v.name, len(took), slowest.Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)*9/10].Round(time.Millisecond))

	// What was sent, refused and failed.
	var tells, asks, tellErrs, askErrs int
	var nodeErrs []string
	for name, r := range reports {
		tells += r.Tells
		asks += r.Asks
		tellErrs += r.TellErrors
		askErrs += r.AskErrors
		if !strings.HasPrefix(name, "gateway/") && len(r.Errors) > 0 && len(nodeErrs) < 6 {
			nodeErrs = append(nodeErrs, r.Errors[:min(2, len(r.Errors))]...)
		}
	}
	t.Logf("MEASURED %s: seqlog senders: %d Tells and %d Asks accepted/answered; refused Tells %d, failed Asks %d (gateway: %d Tells refused, %d Asks failed; by kind %v; e.g. %q; nodes e.g. %q)",
		v.name, tells, asks, tellErrs, askErrs, gTellErrs, gAskErrs, gkinds, gerrs, nodeErrs)
	t.Logf("MEASURED %s: pjournal senders: %s", v.name, sendersSummary(psenders))
	for kind := range gkinds {
		if !strings.HasPrefix(kind, "Tell "+payload.Unavailable.String()) && !strings.HasPrefix(kind, "Tell "+payload.DeadlineExceeded.String()) &&
			!strings.HasPrefix(kind, "Ask "+payload.Unavailable.String()) && !strings.HasPrefix(kind, "Ask "+payload.DeadlineExceeded.String()) {
			t.Errorf("a gateway send failed with kind %q: want Unavailable or DeadlineExceeded (e.g. %q)", kind, gerrs)
		}
	}
	for _, s := range psenders {
		for kind := range s.errKinds {
			if kind != payload.Unavailable.String() && kind != payload.DeadlineExceeded.String() {
				t.Errorf("a pjournal Ask failed with kind %q: want Unavailable or DeadlineExceeded (e.g. %q)", kind, s.errs)
			}
		}
	}

	// Every seqlog object: read through the gateway, then each node (each
	// read after that host's own messages), the last read checked.
	for i := range objects {
		l, err := askRetry[readSeqlog, seqlog](gw, seqlogRef(i), readSeqlog{}, 30*time.Second)
		if err != nil {
			t.Fatalf("reading object %d through the gateway: %v", i, err)
		}
		for _, n := range nodes {
			l = decode[seqlog](t, n.must(t, "read "+strconv.Itoa(i)))
		}
		for name, r := range reports {
			if c := checkSeqs(l.Seen[name], r.Sent[i], r.Uncertain[i]); c.String() != "" {
				t.Errorf("seqlog %d, sender %s: %v", i, name, c)
			}
		}
		if t.Failed() {
			pgOutageStats(t, nodes, gw)
			t.FailNow()
		}
	}
	js := readJournals(t, gw, pobjects, time.Minute)
	if !checkJournals(t, js, psenders) {
		pgOutageStats(t, nodes, gw)
		t.FailNow()
	}
	checkServedIsStored(t, store, js)

	// The nodes paused and resumed; nothing moved.
	lapses, takenOver := 0, 0
	for _, n := range nodes {
		st := decode[actor.Stats](t, n.must(t, "stats"))
		t.Logf("%s: jeopardies %d, lease lapses %d, ownership checks %d, taken over %d, gaps closed %d, late %d",
			n.name, st.Jeopardies, st.LeaseLapses, st.OwnershipChecks, st.TakenOver, st.GapsClosed, st.Late)
		lapses += int(st.LeaseLapses)
		takenOver += int(st.TakenOver)
		if st.Jeopardy {
			t.Errorf("%s is still in jeopardy after Postgres returned and answered every object", n.name)
		}
		if st.GapsClosed != 0 || st.Late != 0 {
			t.Errorf("%s gave up on %d gaps and ran %d messages late; no host failed, want none", n.name, st.GapsClosed, st.Late)
		}
		if v.down > 0 {
			if st.Jeopardies < 1 {
				t.Errorf("%s never went into jeopardy with Postgres down %v (past its lease)", n.name, v.down)
			}
			if st.LeaseLapses != 0 || st.TakenOver != 0 {
				t.Errorf("%s found its lease lapsed %d times, %d objects taken over: a silence of the store takes nothing over; its events: %s\nits log:\n%s",
					n.name, st.LeaseLapses, st.TakenOver, n.must(t, "events"), n.stderr())
			}
		}
	}
	moved := 0
	for obj, host := range pgOutageOwners(t, store, objects, pobjects) {
		if ownersBefore[obj] != host {
			moved++
			if moved <= 5 {
				t.Logf("%s was on %s, is on %s", obj, ownersBefore[obj], host)
			}
		}
	}
	if moved > 0 {
		if v.down > 0 {
			t.Errorf("%d objects changed owner across the outage; want none (nothing moves)", moved)
		} else {
			t.Logf("%d objects changed owner across the slow spell", moved)
		}
	}
	if err := gw.Err(); err != nil {
		t.Errorf("the gateway closed itself: %v", err)
	}
	gst := gw.Stats()
	t.Logf("gateway: jeopardies %d, lease lapses %d", gst.Jeopardies, gst.LeaseLapses)
	for _, n := range nodes {
		n.stop(t)
	}
	t.Logf("MEASURED %s: lease lapses %d, taken over %d, objects moved %d", v.name, lapses, takenOver, moved)
}

// pgOutageWaitTraffic waits until the gateway's seqlog senders have had
// d of traffic with some sends accepted.
func pgOutageWaitTraffic(t *testing.T, gl *gatewayLoad, d time.Duration) {
	t.Helper()
	start := time.Now()
	testutil.WaitForWithin(t, "the gateway's sends to be accepted", time.Minute, func() bool {
		return gl.accepted.Load() > 50 && time.Since(start) >= d
	})
}

func pgOutageObjName(i, objects int) string {
	if i < objects {
		return "seqlog " + strconv.Itoa(i)
	}
	return "pjournal " + strconv.Itoa(i-objects)
}

// pgOutageOwners returns every object's owner by the store.
func pgOutageOwners(t *testing.T, store relocation.Store, objects, pobjects int) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owners := map[string]string{}
	get := func(kind string, i int) {
		row, err := store.Get(ctx, relocation.Object{Kind: kind, ID: strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("the row of %s %d: %v", kind, i, err)
		}
		owners[kind+"/"+strconv.Itoa(i)] = row.Host
	}
	for i := range objects {
		get("seqlog", i)
	}
	for i := range pobjects {
		get("pjournal", i)
	}
	return owners
}

// pgOutageStats logs every host's counters (after a failure).
func pgOutageStats(t *testing.T, nodes []*child, gw *actor.Host) {
	for _, n := range nodes {
		t.Logf("%s: %s", n.name, n.must(t, "stats"))
	}
	t.Logf("gateway: %+v", gw.Stats())
}

// pgOutageDiagnose logs, for object i that does not answer, where the
// store says it is, what each node answers when asked for it, and the
// gateway's and nodes' routing of it.
func pgOutageDiagnose(t *testing.T, nodes []*child, gw *actor.Host, store relocation.Store, i, objects int) {
	t.Helper()
	kind, id := "seqlog", strconv.Itoa(i)
	read := "read "
	if i >= objects {
		kind, id, read = "pjournal", strconv.Itoa(i-objects), "jread "
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, err := store.Get(ctx, relocation.Object{Kind: kind, ID: id})
	t.Logf("%s/%s: the store's row %+v, %v", kind, id, row, err)
	for _, n := range nodes {
		r, err := n.call(t, time.Minute, read+id)
		t.Logf("%s/%s asked through %s: %.300s %v", kind, id, n.name, r, err)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	where, err := gw.Locate(lctx, actor.Ref{Kind: kind, ID: id})
	t.Logf("%s/%s located by the gateway: %v %v", kind, id, where, err)
}

// pgOutageAllAnswer asks every object (seqlog 0..objects-1, then
// pjournal 0..pobjects-1) through h, all at once, each again until it
// answers or within is up, and returns for each the time from up to its
// first answer (-1: none) and the last error of one that never answered.
func pgOutageAllAnswer(h *actor.Host, objects, pobjects int, up time.Time, within time.Duration) ([]time.Duration, []error) {
	took := make([]time.Duration, objects+pobjects)
	errs := make([]error, len(took))
	deadline := up.Add(within)
	var wg sync.WaitGroup
	for i := range took {
		wg.Go(func() {
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				var err error
				if i < objects {
					_, err = actor.Ask[readSeqlog, seqlog](ctx, h, seqlogRef(i), readSeqlog{})
				} else {
					_, err = actor.Ask[pjRead, pjState](ctx, h, pjRef(i-objects), pjRead{})
				}
				cancel()
				if err == nil {
					took[i] = time.Since(up)
					return
				}
				if time.Now().After(deadline) {
					took[i], errs[i] = -1, err
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return took, errs
}

// gatewayLoad is senders in this process sending numbered Tells and Asks
// to seqlog objects through a host, as the node children's load command
// does, counting their errors by kind.
type gatewayLoad struct {
	halt     chan struct{}
	halted   sync.Once
	wg       sync.WaitGroup
	accepted atomic.Int64
	reports  map[string]*senderReport

	mu    sync.Mutex
	kinds map[string]int // "Tell <kind>" or "Ask <kind>"
	errs  []string       // the first few
}

// startGatewayLoad starts a sender gateway/<s> for each askEvery[s],
// sending numbered messages to random seqlog objects 0..objects-1 through
// h, every askEvery[s]-th (at random; 0: none) an Ask within askTimeout,
// each rate sends a second.
func startGatewayLoad(h *actor.Host, objects int, askEvery []int, seed uint64, rate int, askTimeout time.Duration) *gatewayLoad {
	gl := &gatewayLoad{halt: make(chan struct{}), kinds: map[string]int{}, reports: map[string]*senderReport{}}
	for s, askEvery := range askEvery {
		name := h.Name() + "/" + strconv.Itoa(s)
		r := &senderReport{Sent: make([]int, objects), Uncertain: map[int][]int{}}
		gl.reports[name] = r
		gl.wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(s)+0x9a7e))
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			fail := func(what string, i, seq int, err error) {
				if len(r.Errors) < 5 {
					r.Errors = append(r.Errors, fmt.Sprintf("%s #%d to object %d: %v", what, seq, i, err))
				}
				gl.mu.Lock()
				defer gl.mu.Unlock()
				gl.kinds[what+" "+payload.KindOf(err).String()]++
				if len(gl.errs) < 4 {
					gl.errs = append(gl.errs, fmt.Sprintf("%s #%d to %d: %v", what, seq, i, err))
				}
			}
			for {
				select {
				case <-gl.halt:
					return
				case <-tick.C:
				}
				i := rng.IntN(objects)
				if r.sendOne(h, name, i, askEvery > 0 && rng.IntN(askEvery) == 0, askTimeout, fail) {
					gl.accepted.Add(1)
				}
			}
		})
	}
	return gl
}

// stop stops the senders and returns their reports, their errors by
// kind and the first few errors; it may be called again (a test's
// clean-up, after it failed before it stopped them).
func (gl *gatewayLoad) stop() (map[string]*senderReport, map[string]int, []string) {
	gl.halted.Do(func() { close(gl.halt) })
	gl.wg.Wait()
	return gl.reports, gl.kinds, gl.errs
}

// outagePG is a throwaway Postgres of this test's own, which it stops
// and starts with pg_ctl (pgtest.Server has Restart only, and the shared
// server serves other tests' databases).
type outagePG struct {
	srv  *pgtest.Server
	bin  string
	asPG bool
	opts string // the server's options, from postmaster.opts
}

// startOutagePostgres starts the server, stopped when the test ends. It
// skips the test without Postgres binaries (fails it under
// BERTH_REQUIRE_PG=1 unless BERTH_TEST_DATABASE_URL names a server: this
// test cannot stop that one).
func startOutagePostgres(t *testing.T) *outagePG {
	t.Helper()
	bin, err := pgtest.FindBin()
	if err != nil {
		if pgtest.Required() && os.Getenv("BERTH_TEST_DATABASE_URL") == "" {
			t.Fatalf("pgtest: %v", err)
		}
		t.Skipf("skipped: %v (this test stops and starts a Postgres server of its own)", err)
	}
	srv, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	b, err := os.ReadFile(filepath.Join(srv.Dir(), "data", "postmaster.opts"))
	if err != nil {
		t.Fatal(err)
	}
	// "/path/to/postgres" "-D" "..." "-p" "...": the executable, then the
	// options, quoted for a shell (pg_ctl -o passes them on so).
	line := strings.TrimSpace(string(b))
	exe, opts, ok := strings.Cut(line, " ")
	if !ok || !strings.HasSuffix(strings.Trim(exe, `"`), "postgres") {
		t.Fatalf("postmaster.opts: %q", line)
	}
	return &outagePG{srv: srv, bin: bin, asPG: os.Geteuid() == 0, opts: opts}
}

func (p *outagePG) pgctl(args ...string) error {
	path := filepath.Join(p.bin, "pg_ctl")
	args = append([]string{"-D", filepath.Join(p.srv.Dir(), "data")}, args...)
	var cmd *exec.Cmd
	if p.asPG {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = p.srv.Dir()
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.srv.Dir(), "log"))
		return fmt.Errorf("pg_ctl %s: %v\n%s\n%s", strings.Join(args, " "), err, out, tailString(string(log), 2000))
	}
	return nil
}

// stop stops the server with a fast shutdown: its sessions end, new
// connections are refused.
func (p *outagePG) stop() error { return p.pgctl("-m", "fast", "-w", "-t", "60", "stop") }

// start starts it again, on the same port, with the same options.
func (p *outagePG) start() error {
	return p.pgctl("-o", p.opts, "-l", filepath.Join(p.srv.Dir(), "log"), "-w", "-t", "60", "start")
}

// newDatabase creates a fresh database on the server and returns its URL.
func (p *outagePG) newDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := pgtest.CreateDatabase(ctx, p.srv.URL("postgres"), fmt.Sprintf("berth_outage_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// delayProxy is a TCP proxy to Postgres that holds what its clients send
// for delay before passing it on (in order; what the server sends goes
// back at once): with delay set, every round trip to the server — each
// statement, BEGIN and COMMIT of a transaction — takes that much longer.
type delayProxy struct {
	url    string // the database URL through the proxy
	target string
	delay  atomic.Int64 // ns; read as each chunk arrives from a client
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newDelayProxy(t *testing.T, dbURL string) *delayProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{target: u.Host, ln: ln, conns: map[net.Conn]struct{}{}}
	u.Host = ln.Addr().String()
	p.url = u.String()
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *delayProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
}

func (p *delayProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *delayProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.track(c)
	p.track(s)
	end := func() {
		c.Close()
		s.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, s)
		p.mu.Unlock()
	}
	go func() { // server to client: at once
		_, _ = io.Copy(c, s)
		end()
	}()
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 4096)
	go func() { // client to server: each chunk delay after it arrived
		defer end()
		for ck := range q {
			time.Sleep(time.Until(ck.at))
			if _, err := s.Write(ck.b); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			q <- chunk{b: slices.Clone(buf[:n]), at: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil { // the client left, or the proxy closed
			close(q)
			return
		}
	}
}
