package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
	"github.com/jackc/pgx/v5/pgxpool"
)

// buildBerth builds this command into a temporary directory: the nodes of
// the multi-process demo run it.
func buildBerth(t *testing.T) string { return buildProgram(t, "berth", ".") }

// buildProgram builds the main package pkg into a temporary directory as
// name, and returns its path.
func buildProgram(t *testing.T, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// testCA makes a demo CA in a temporary directory, with the TLS files of
// the nodes names.
func testCA(t *testing.T, names ...string) *demoCA {
	t.Helper()
	ca, err := newDemoCA(t.TempDir(), names)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// testHostTLS is ca.hostTLS(name), failing t on an error.
func testHostTLS(t *testing.T, ca *demoCA, name string) *tcp.TLS {
	t.Helper()
	c, err := ca.hostTLS(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The demo across OS processes, small: three `berth node` processes on one
// Postgres, a client host sending numbered messages; one node drains on
// SIGTERM (exit 0, its objects moved), then objects move between the
// others, and one of them is SIGKILLed in the middle of moves. Every object
// the killed node did not hold (nor was taking over past the point of no
// return) shows every accepted message once and in order; the killed
// node's objects start afresh elsewhere and serve again.
func TestDemoAcrossProcesses(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	var out bytes.Buffer
	rep, err := runProcs(context.Background(), procsConfig{procs: 3, objects: 200, senders: 2, rate: 2000,
		duration: 30 * time.Second, db: db.URL, binary: bin, quiet: true, accounts: 100}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		for name, l := range rep.nodeLogs {
			t.Logf("%s:\n%s", name, l.String())
		}
		t.Fatal(err)
	}
	if rep.accepted == 0 || rep.relocations == 0 || rep.rebalanced == 0 {
		t.Fatalf("nothing happened: %d accepted, %d relocations, %d rebalancing moves", rep.accepted, rep.relocations, rep.rebalanced)
	}
	if rep.lost != 0 || rep.duplicated != 0 || rep.outOfOrder != 0 {
		t.Fatalf("objects the killed node did not hold: %d lost, %d duplicated, %d out of order %v",
			rep.lost, rep.duplicated, rep.outOfOrder, rep.breaks)
	}
	if rep.depositsAcked == 0 || rep.depositsLost != 0 || rep.depositsTwice != 0 || rep.holes != 0 {
		t.Fatalf("persistent accounts (%d on the killed node): %d deposits answered, %d lost, %d applied twice, %d holes",
			rep.accountsOnKilled, rep.depositsAcked, rep.depositsLost, rep.depositsTwice, rep.holes)
	}
	if !strings.Contains(rep.drainExit, "exit status 0") {
		t.Errorf("the SIGTERMed node ended %q, want exit status 0", rep.drainExit)
	}
	if !strings.Contains(rep.killExit, "killed") {
		t.Errorf("the SIGKILLed node ended %q", rep.killExit)
	}
	// The kill is a handful of lines in the others' logs, not a line per
	// object taken over: the objects whose senders' gaps were given up on
	// are counted in a line a second.
	for name, l := range rep.nodeLogs {
		if name == rep.killedNode {
			continue
		}
		if n := strings.Count(l.String(), "given up on after a host failure"); n > 10 {
			t.Errorf("%s logged %d lines of gaps given up on after the kill (of %d objects on the killed node); want a handful", name, n, rep.killedObjects)
		}
	}
	if len(rep.failover) == 0 || rep.failoverMissed != 0 || rep.detected == 0 {
		t.Errorf("failover: %d objects answered elsewhere, %d did not within %v, detected after %v; want every object of the killed node to answer",
			len(rep.failover), rep.failoverMissed, failoverLimit, rep.detected)
	}
	if rep.killedHandled > rep.killedAccepted {
		t.Errorf("the killed node's objects handled %d messages, more than the %d accepted", rep.killedHandled, rep.killedAccepted)
	}
	testutil.CheckNoGoroutines(t)
}

// counterRef is the reference of counter object i.
func counterRef(i int) actor.Ref { return actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)} }

// nodePair is two berth node processes and a gateway client on one
// database, with counter objects placed by the client.
type nodePair struct {
	n1, n2 *nodeProc
	client *actor.Host
	store  *pgstore.Store
	onN2   []int // the objects node-2 hosts
}

// startNodePair starts node-1, node-2 (with the flags n2Flags) and a
// gateway client in this process, all ending with t, and has the client
// tell each of objects counter objects once (sender "s") and read it back.
// At least one object must land on node-2.
func startNodePair(t *testing.T, objects int, n2Flags ...string) *nodePair {
	t.Helper()
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1", "node-2")
	ctx := context.Background()
	p := &nodePair{}
	var err error
	if p.n1, err = startNode(ctx, bin, "node-1", db.URL, ca); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.n1.cmd.Process.Kill(); <-p.n1.done })
	if p.n2, err = startNode(ctx, bin, "node-2", db.URL, ca, n2Flags...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.n2.cmd.Process.Signal(syscall.SIGCONT); _ = p.n2.cmd.Process.Kill(); <-p.n2.done })
	var closeClient func()
	p.client, p.store, closeClient, err = startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	for i := range objects {
		if err := actor.Tell(ctx, p.client, counterRef(i), counter.Add{Sender: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		c, err := actor.Ask[counter.Read, counter.Counter](ctx, p.client, counterRef(i), counter.Read{})
		if err != nil || c.Count["s"] != 1 {
			t.Fatalf("object %d: %+v, %v", i, c, err)
		}
		if row, err := p.store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)}); err == nil && row.Host == "node-2" {
			p.onN2 = append(p.onN2, i)
		}
	}
	if len(p.onN2) == 0 {
		t.Fatal("no object on node-2")
	}
	return p
}

// A node whose process is paused (SIGSTOP) for longer than its lease:
// meanwhile another node takes its objects over at their next message; when
// the paused process resumes it finds its lease gone and its run ended,
// runs no turn for them — there is never a second live activation — and
// joins the cluster again as a new run, without them: it does not exit.
// The objects go on, once, on the other node.
func TestANodePausedPastItsLeaseJoinsAgainAndItsObjectsGoOnElsewhere(t *testing.T) {
	const objects = 40
	p := startNodePair(t, objects)
	n1, n2, client, store, onN2 := p.n1, p.n2, p.client, p.store, p.onN2
	ctx, ref := context.Background(), counterRef
	t.Logf("%d of %d objects on node-2; pausing it", len(onN2), objects)
	if err := n2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// node-1 takes node-2's objects over once node-2's lease ran out: an
	// Ask gets an answer from a fresh activation (count 0). (The client's
	// first messages to each then wait GapTimeout for the ones lost with
	// node-2: the objects are polled all at once.)
	var wg sync.WaitGroup
	late := make([]bool, len(onN2))
	last := make([]string, len(onN2))
	for k, i := range onN2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(time.Minute); ; {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				c, err := actor.Ask[counter.Read, counter.Counter](actx, client, ref(i), counter.Read{})
				cancel()
				if err == nil && c.Count["s"] == 0 {
					return
				}
				last[k] = fmt.Sprintf("%+v, %v", c, err)
				if time.Now().After(deadline) {
					late[k] = true
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for k, i := range onN2 {
		if late[k] {
			row, rowErr := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)})
			lease, held, leaseErr := store.Lease(ctx, "node-2")
			t.Fatalf("object %d not taken over a minute after node-2 paused; its last answer: %s; its row: %+v, %v; node-2's lease: %+v (%v), %v; the client's stats: %+v\nnode-1:\n%s",
				i, last[k], row, rowErr, lease, held, leaseErr, client.Stats(), n1.stderr())
		}
	}
	for _, i := range onN2 {
		if err := actor.Tell(ctx, client, ref(i), counter.Add{Sender: "t", Seq: 1}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("taken over %v after the pause", time.Since(paused).Round(time.Second))
	for _, i := range onN2 {
		row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)})
		if err != nil || row.Host != "node-1" {
			t.Fatalf("object %d after the takeover: %+v, %v; want it on node-1", i, row, err)
		}
	}
	resumed := time.Now()
	if err := n2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, "node-2 to join again as a new run after it resumed", 30*time.Second, func() bool {
		select {
		case <-n2.done:
			t.Fatalf("node-2 exited (%v) after it resumed past its lease:\n%s", n2.cmd.ProcessState, n2.stderr())
		default:
		}
		return strings.Contains(n2.stderr(), "it joins again as a new run")
	})
	t.Logf("node-2 joined again as a new run %v after it resumed", time.Since(resumed).Round(time.Millisecond))
	// The objects live on node-1 alone: each ran the one message sent
	// after the takeover, once.
	for _, i := range onN2 {
		c, err := actor.Ask[counter.Read, counter.Counter](ctx, client, ref(i), counter.Read{})
		if err != nil || c.Count["t"] != 1 || c.Count["s"] != 0 {
			t.Fatalf("object %d after node-2 joined again: %+v, %v; want t once, s never", i, c, err)
		}
		if row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)}); err != nil || row.Host != "node-1" {
			t.Fatalf("object %d after node-2 joined again: %+v, %v; want it on node-1", i, row, err)
		}
	}
	// node-2 dropped the old run's objects, and still runs.
	if !strings.Contains(n2.stderr(), "objects_dropped=") {
		t.Fatalf("node-2's rejoin line does not count the objects it dropped:\n%s", n2.stderr())
	}
	select {
	case <-n2.done:
		t.Fatalf("node-2 exited (%v):\n%s", n2.cmd.ProcessState, n2.stderr())
	default:
	}
}

// A second berth node process started with a live node's name is refused
// by the membership until -name-wait has passed, exits 1, and leaves the
// live node's lease alone: the
// live node keeps its lease generation (a second run's newer one used to
// replace it, and the live node exited 3 some 13 s later, its objects'
// state gone) and keeps serving.
func TestASecondNodeOfALiveNodesNameLeavesItAlone(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1")
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n1.cmd.Process.Kill(); <-n1.done }()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.Open(ctx, pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before, ok, err := store.Lease(ctx, "node-1")
	if err != nil || !ok {
		t.Fatalf("node-1's lease: %v, %v", ok, err)
	}
	// It asks for the name again and again for -name-wait (the name might
	// be held by a crashed run's lease), refused each time.
	dup, err := startNode(ctx, bin, "node-1", db.URL, ca, "-name-wait", "3s")
	if err == nil {
		_ = dup.cmd.Process.Kill()
		<-dup.done
		t.Fatal("a second node of a live node's name started")
	}
	if !strings.Contains(err.Error(), "name held by a live member") || !strings.Contains(err.Error(), "leaves alone") {
		t.Fatalf("the second node: %v; want the membership's refusal", err)
	}
	after, ok, err := store.Lease(ctx, "node-1")
	if err != nil || !ok || after.Gen != before.Gen {
		t.Fatalf("node-1's lease after the second node's start: gen %d (ok %v, %v); want it unchanged, %d", after.Gen, ok, err, before.Gen)
	}
	// It still renews its lease (it would be refused, and exit 3, if the
	// second run's had replaced it).
	waitFor := time.Now().Add(2*relocation.LeaseRenew + 10*time.Second)
	for {
		l, ok, err := store.Lease(ctx, "node-1")
		if err != nil || !ok || l.Gen != before.Gen {
			t.Fatalf("node-1's lease: gen %d, ok %v, %v; want %d renewed", l.Gen, ok, err, before.Gen)
		}
		if l.Deadline.After(before.Deadline) {
			break // renewed since
		}
		if time.Now().After(waitFor) {
			t.Fatalf("node-1's lease was not renewed within %v", 2*relocation.LeaseRenew+10*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-n1.done:
		t.Fatalf("node-1 exited: %s", n1.stderr())
	default:
	}
}

// A node started with TLS files refuses a client whose certificate another
// CA issued (a well-formed certificate naming the client it says it is):
// the client's messages never reach it, the node logs the refused
// handshake, and it keeps serving a client of its own CA.
func TestANodeWithTLSRefusesAClientOfAnotherCA(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca, other := testCA(t, "node-1"), testCA(t)
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n1.cmd.Process.Kill(); <-n1.done }()
	// What the rogue sent never arrives: its Close need not wait long for
	// that.
	rogue, _, closeRogue, err := startGateway(ctx, db.URL, "rogue",
		tcp.Options{TLS: testHostTLS(t, other, "rogue"), CloseTimeout: 100 * time.Millisecond}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRogue()
	client, _, closeClient, err := startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	ref := actor.Ref{Kind: counter.Name, ID: "1"}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = actor.Tell(actx, rogue, ref, counter.Add{Sender: "rogue", Seq: 1})
	if err == nil {
		_, err = actor.Ask[counter.Read, counter.Counter](actx, rogue, ref, counter.Read{})
	}
	cancel()
	if err == nil {
		t.Fatal("a client of another CA reached the node")
	}
	t.Logf("the client of another CA: %v", err)
	if err := actor.Tell(ctx, client, ref, counter.Add{Sender: "client", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := actor.Ask[counter.Read, counter.Counter](ctx, client, ref, counter.Read{})
	if err != nil || c.Count["client"] != 1 || c.Count["rogue"] != 0 {
		t.Fatalf("the object through the client of the node's CA: %+v, %v; want client once, rogue never", c, err)
	}
	if log := n1.stderr(); !strings.Contains(log, "refused a connection: TLS handshake") {
		t.Errorf("node-1 logged no refused handshake:\n%s", log)
	}
	select {
	case <-n1.done:
		t.Fatalf("node-1 exited: %s", n1.stderr())
	default:
	}
}

// A gateway that cannot reach its database returns the error it met, its
// resources closed — it does not panic in its clean-up and hide it.
func TestAGatewayThatCannotStartReturnsItsError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, store, closeClient, err := startGateway(ctx, "postgres://berth@127.0.0.1:1/none?connect_timeout=2", "client", tcp.Options{Insecure: true}, 1)
	if err == nil || client != nil || store != nil || closeClient != nil {
		t.Fatalf("startGateway on a database nobody serves = %v, %v, close set %v, err %v; want only an error", client, store, closeClient != nil, err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") && !strings.Contains(err.Error(), "connect") {
		t.Fatalf("startGateway's error %q does not say what it could not reach", err)
	}
	testutil.CheckNoGoroutines(t)
}

// -lease-ttl sets the node's membership lease as well as its Location
// Store lease: a node given a longer lease starts (a host refuses a
// membership lease shorter than its own), and its membership row runs
// out -lease-ttl after each renewal.
func TestALongerLeaseTTLIsTheMembershipsLeaseToo(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1")
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca, "-lease-ttl", "9s", "-lease-renew", "1s")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n1.cmd.Process.Kill(); <-n1.done }()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ttl time.Duration
	if err := pool.QueryRow(ctx, `SELECT deadline - renewed_at FROM pgstore_members WHERE name = 'node-1' AND live`).Scan(&ttl); err != nil {
		t.Fatalf("node-1's membership row: %v", err)
	}
	if ttl != 9*time.Second {
		t.Fatalf("node-1's membership lease runs out %v after its renewal, want 9s (-lease-ttl)", ttl)
	}
}

// A node started with a lease longer than its peers' (-lease-ttl 12s, the
// others at the default 3.5 s) and paused (SIGSTOP) for 6 s — past the
// default lease, within its own — rides the stall out: nobody takes its
// objects over, the membership keeps its run, and once resumed it serves
// them with their state and the Tells sent to them meanwhile, and goes on
// running.
func TestANodeWithALongerLeaseRidesOutAStallPastTheDefault(t *testing.T) {
	const objects = 30
	p := startNodePair(t, objects, "-lease-ttl", "12s", "-lease-renew", "1s")
	n2, client, store, onN2 := p.n2, p.client, p.store, p.onN2
	ctx, ref := context.Background(), counterRef
	t.Logf("%d of %d objects on node-2; pausing it for 6 s", len(onN2), objects)
	if err := n2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	told := map[int]bool{}
	for _, i := range onN2 { // held on the link while node-2 is paused
		if err := actor.Tell(ctx, client, ref(i), counter.Add{Sender: "u", Seq: 1}); err == nil {
			told[i] = true
		} else if !errors.Is(err, payload.Unavailable) && !errors.Is(err, payload.DeadlineExceeded) {
			t.Fatalf("Tell to object %d while node-2 is paused: %v; want nil or a typed refusal", i, err)
		}
	}
	time.Sleep(6 * time.Second) // the stall: past the default lease (3.5 s), within node-2's (12 s)
	if err := n2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	for _, i := range onN2 {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		c, err := actor.Ask[counter.Read, counter.Counter](actx, client, ref(i), counter.Read{})
		cancel()
		want := map[string]int{"s": 1}
		if told[i] {
			want["u"] = 1
		}
		if err != nil || c.Count["s"] != want["s"] || c.Count["u"] != want["u"] {
			t.Fatalf("object %d after the stall: %+v, %v; want %v (its state kept, the Tells held for it run once)\nnode-2:\n%s", i, c, err, want, n2.stderr())
		}
		row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)})
		if err != nil || row.Host != "node-2" {
			t.Fatalf("object %d after the stall: row %+v, %v; want it still on node-2", i, row, err)
		}
	}
	select {
	case <-n2.done:
		t.Fatalf("node-2 exited (%v) after a stall within its lease:\n%s", n2.cmd.ProcessState, n2.stderr())
	default:
	}
	t.Logf("%d of %d Tells sent during the stall accepted; every object answered %v after the resume; node-2 runs on",
		len(told), len(onN2), time.Since(resumed).Round(time.Millisecond))
}
