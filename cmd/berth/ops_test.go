package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/node"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

// placeObjects sends counter objects 0…n-1 one Add from sender "s"
// through client, asks each (so it has run), and returns the host the
// Location Store names for each.
func placeObjects(t *testing.T, client *actor.Host, store *pgstore.Store, n int) []string {
	t.Helper()
	ctx := context.Background()
	hosts := make([]string, n)
	for i := range n {
		ref := actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}
		if err := actor.Tell(ctx, client, ref, counter.Add{Sender: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := actor.Ask[counter.Read, counter.Counter](ctx, client, ref, counter.Read{}); err != nil {
			t.Fatal(err)
		}
		row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: ref.ID})
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = row.Host
	}
	return hosts
}

// countOf returns how many of hosts are host.
func countOf(hosts []string, host string) int {
	n := 0
	for _, h := range hosts {
		if h == host {
			n++
		}
	}
	return n
}

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A node started again right after its previous run crashed finds the
// name held by that run's lease: it waits, logged, until the lease runs
// out, and then serves (it used to exit 1).
func TestANodeRestartedRightAfterACrashWaitsForItsOldLeaseThenServes(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1")
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca)
	if err != nil {
		t.Fatal(err)
	}
	if st := n1.signal(syscall.SIGKILL, 10*time.Second); !strings.Contains(st, "killed") {
		t.Fatalf("node-1 after SIGKILL: %s", st)
	}
	crashed := time.Now()
	again, err := startNode(ctx, bin, "node-1", db.URL, ca)
	if err != nil {
		t.Fatalf("node-1 started again after its crash: %v", err)
	}
	defer func() { again.signal(syscall.SIGKILL, 10*time.Second) }()
	t.Logf("serving again %v after the crash", time.Since(crashed).Round(time.Millisecond))
	// Its standard error is copied by another goroutine: the lines may
	// come a moment after "ready".
	logged := func() bool {
		log := again.stderr()
		return strings.Contains(log, "waiting for its lease to run out") && strings.Contains(log, "the name is this node's now")
	}
	for deadline := time.Now().Add(10 * time.Second); !logged(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node did not log its wait for the old lease:\n%s", again.stderr())
		}
	}
}

// stoppedPeerSetup starts node-1 (serving HTTP, with extra flags) and
// node-2 and puts objects on node-1, then stops node-2's process
// (SIGSTOP): a drain of node-1 toward node-2 waits for it — a slow peer is
// not a dead one. It returns node-1 and a function that lets node-2 go on.
func stoppedPeerSetup(t *testing.T, extra ...string) (n1 *nodeProc, cont func()) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1", "node-2")
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca, append([]string{"-http", "127.0.0.1:0"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n1.signal(syscall.SIGKILL, 10*time.Second) })
	n2, err := startNode(ctx, bin, "node-2", db.URL, ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n2.cmd.Process.Signal(syscall.SIGCONT); n2.signal(syscall.SIGKILL, 10*time.Second) })
	client, store, closeClient, err := startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	if hosts := placeObjects(t, client, store, 40); !slices.Contains(hosts, "node-1") {
		t.Fatalf("no object on node-1: %v", hosts)
	}
	if code, body := get(t, "http://"+n1.http+"/readyz"); code != http.StatusOK {
		t.Fatalf("node-1 serving: /readyz %d %q, want 200", code, body)
	}
	if code, body := get(t, "http://"+n1.http+"/dashboard/"); code != http.StatusOK || !strings.Contains(body, "<title>berth</title>") {
		t.Fatalf("node-1's /dashboard/: %d %.200q", code, body)
	}
	checkDashboardStream(t, "http://"+n1.http+"/dashboard/events", "node-1", 3) // the nodes and the client
	if err := n2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return n1, func() { _ = n2.cmd.Process.Signal(syscall.SIGCONT) }
}

// waitNotReady waits until n's /readyz answers 503 (its body saying why),
// while /healthz still answers 200.
func waitNotReady(t *testing.T, n *nodeProc) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		code, body := get(t, "http://"+n.http+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "not ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q 30 s after SIGTERM", code, body)
		}
	}
	if code, body := get(t, "http://"+n.http+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while stopping: %d %q, want 200", code, body)
	}
}

// SIGTERM makes a node not ready at once, while its drain waits for a
// slow peer; a second SIGTERM closes it without finishing the stop: it
// logs what that dropped and exits 1.
func TestSIGTERMEndsReadinessAtOnceAndASecondSIGTERMClosesTheNode(t *testing.T) {
	n1, cont := stoppedPeerSetup(t)
	defer cont()
	_ = n1.cmd.Process.Signal(syscall.SIGTERM)
	waitNotReady(t, n1)
	select {
	case <-n1.done:
		t.Fatalf("node-1 exited (%s) before the second SIGTERM, with its peer stopped:\n%s", n1.cmd.ProcessState, n1.stderr())
	default:
	}
	second := time.Now()
	st := n1.signal(syscall.SIGTERM, 30*time.Second)
	t.Logf("node-1 %s %v after the second SIGTERM", st, time.Since(second).Round(time.Millisecond))
	if code := n1.cmd.ProcessState.ExitCode(); code != node.ExitFailed {
		t.Fatalf("node-1 exited %d (%s), want %d:\n%s", code, st, node.ExitFailed, n1.stderr())
	}
	if log := n1.stderr(); !strings.Contains(log, "second signal") || !strings.Contains(log, "dropped=") {
		t.Fatalf("node-1 did not log the second signal and what closing dropped:\n%s", log)
	}
}

// A graceful stop that has not finished within -stop-timeout ends with
// the host closed and exit 1.
func TestAStopPastItsGracePeriodClosesTheNode(t *testing.T) {
	const grace = 2 * time.Second
	n1, cont := stoppedPeerSetup(t, "-stop-timeout", grace.String())
	defer cont()
	term := time.Now()
	st := n1.signal(syscall.SIGTERM, 60*time.Second)
	took := time.Since(term)
	t.Logf("node-1 %s %v after SIGTERM with -stop-timeout %v", st, took.Round(time.Millisecond), grace)
	if code := n1.cmd.ProcessState.ExitCode(); code != node.ExitFailed {
		t.Fatalf("node-1 exited %d (%s), want %d:\n%s", code, st, node.ExitFailed, n1.stderr())
	}
	if log := n1.stderr(); !strings.Contains(log, "graceful stop did not finish") {
		t.Fatalf("node-1 did not log the end of its grace period:\n%s", log)
	}
	// The grace period, then at most the 5 s a node gives its host's close
	// (package node's closeBound): the slack is for a slow machine.
	if limit := grace + 5*time.Second + 10*time.Second; took > limit {
		t.Fatalf("node-1 exited %v after SIGTERM with -stop-timeout %v; want at most %v\n%s", took, grace, limit, n1.stderr())
	}
}

// A node told to stop right after a peer was killed drains to the peers
// that live: it exits 0, every object keeps its state, and it did not
// wait for the membership to report the killed peer gone (its lease has
// not run out when the node has exited).
func TestANodeStoppedRightAfterAPeerWasKilledDrainsToTheLivePeers(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1", "node-2", "node-3")
	ctx := context.Background()
	var ns []*nodeProc
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		n, err := startNode(ctx, bin, name, db.URL, ca)
		if err != nil {
			t.Fatal(err)
		}
		ns = append(ns, n)
		defer n.signal(syscall.SIGKILL, 10*time.Second)
	}
	client, store, closeClient, err := startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	const objects = 30
	ref := func(i int) actor.Ref { return actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)} }
	onN2 := countOf(placeObjects(t, client, store, objects), "node-2")
	if onN2 < 2 {
		t.Fatalf("%d objects on node-2; want some to drain", onN2)
	}
	ns[0].signal(syscall.SIGKILL, 10*time.Second)
	term := time.Now()
	st := ns[1].signal(syscall.SIGTERM, time.Minute)
	t.Logf("node-2 (%d objects) %s %v after SIGTERM, node-1 killed just before", onN2, st, time.Since(term).Round(time.Millisecond))
	if code := ns[1].cmd.ProcessState.ExitCode(); code != node.ExitOK {
		t.Fatalf("node-2 exited %d (%s), want 0:\n%s", code, st, ns[1].stderr())
	}
	if !slices.Contains(client.Peers(), "node-1") {
		t.Fatalf("the killed node-1 is no longer a member (%v): its lease ran out, so the test does not show that the drain did not wait for that\n%s", client.Peers(), ns[1].stderr())
	}
	for i := range objects {
		row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: ref(i).ID})
		if err != nil {
			t.Fatal(err)
		}
		if row.Host == "node-3" || row.Host == "node-2" {
			c, err := actor.Ask[counter.Read, counter.Counter](ctx, client, ref(i), counter.Read{})
			if err != nil || c.Count["s"] != 1 {
				t.Fatalf("object %d (row on %s): %+v, %v; want its one message counted (state kept)", i, row.Host, c, err)
			}
		}
	}
}

// admin runs berth admin against n's admin API (HTTPS, checked against
// ca and the node's name) with the credential cred; it returns the exit
// code, standard output and standard error.
func adminRun(t *testing.T, n *nodeProc, ca *demoCA, cred string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	env := func(k string) string {
		if k == "BERTH_ADMIN_TOKEN" {
			return cred
		}
		return ""
	}
	flags := []string{"-addr", n.admin, "-ca", filepath.Join(ca.dir, "ca.pem"), "-node", n.name}
	code := adminMain(context.Background(), append(flags, args...), env, &out, &errOut)
	return code, out.String(), errOut.String()
}

// adminRunInNode is adminRun the way a node's own container runs berth
// admin (a Kubernetes preStop hook): the node's name from $BERTH_NAME
// (name), the credential from the file $BERTH_ADMIN_TOKEN_FILE names.
func adminRunInNode(t *testing.T, n *nodeProc, ca *demoCA, name, cred string, args ...string) (int, string, string) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(cred+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	env := func(k string) string {
		return map[string]string{"BERTH_NAME": name, "BERTH_ADMIN_TOKEN_FILE": tokenFile}[k]
	}
	flags := []string{"-addr", n.admin, "-ca", filepath.Join(ca.dir, "ca.pem")}
	code := adminMain(context.Background(), append(flags, args...), env, &out, &errOut)
	return code, out.String(), errOut.String()
}

// berth admin, against two node processes that serve the admin API over
// TLS: it lists the members and the objects per host, locates an object,
// moves it and lists the move, and drains a node (which then exits 0);
// without the credential, or to a node that does not allow writes, it is
// refused.
func TestBerthAdminSeesAndSteersAClusterOfNodes(t *testing.T) {
	const cred = "the-admin-credential-of-the-test"
	t.Setenv("BERTH_ADMIN_TOKEN", cred) // the nodes inherit it
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1", "node-2")
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca, "-admin", "127.0.0.1:0", "-admin-write", "-app-version", "v1.4.0")
	if err != nil {
		t.Fatal(err)
	}
	defer n1.signal(syscall.SIGKILL, 10*time.Second)
	n2, err := startNode(ctx, bin, "node-2", db.URL, ca, "-admin", "127.0.0.1:0", "-app-version", "v1.4.0") // no writes
	if err != nil {
		t.Fatal(err)
	}
	defer n2.signal(syscall.SIGKILL, 10*time.Second)
	client, store, closeClient, err := startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	const objects = 20
	onN1 := map[string]bool{}
	for i, h := range placeObjects(t, client, store, objects) {
		if h == "node-1" {
			onN1[strconv.Itoa(i)] = true
		}
	}
	if len(onN1) == 0 || len(onN1) == objects {
		t.Fatalf("%d of %d objects on node-1; want some on each node", len(onN1), objects)
	}

	code, out, errOut := adminRun(t, n1, ca, cred, "members")
	if code != 0 || !regexp.MustCompile(`(?m)^node-1\s+serving\s+v1\.4\.0\s`).MatchString(out) || !regexp.MustCompile(`(?m)^node-2\s+serving\s+v1\.4\.0\s`).MatchString(out) {
		t.Fatalf("members: %d %q %q", code, out, errOut)
	}
	code, out, errOut = adminRun(t, n1, ca, cred, "objects")
	if code != 0 || !regexp.MustCompile(fmt.Sprintf(`(?m)^total\s+%d$`, objects)).MatchString(out) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^node-1\s+%s\s+%d$`, counter.Name, len(onN1))).MatchString(out) {
		t.Fatalf("objects: %d %q %q", code, out, errOut)
	}
	// top: objects per host, and node-1's message rate and busiest
	// objects, polled while a sender keeps one object of node-1 busy
	// until top names it.
	var busy string
	for id := range onN1 {
		busy = id
		break
	}
	stopSend, sendErr, busySent := make(chan struct{}), make(chan error, 1), 0
	go func() {
		for seq := 1; ; seq++ {
			select {
			case <-stopSend:
				sendErr <- nil
				return
			default:
			}
			if err := actor.Tell(ctx, client, actor.Ref{Kind: counter.Name, ID: busy}, counter.Add{Sender: "top", Seq: seq}); err != nil {
				sendErr <- err
				return
			}
			busySent = seq
		}
	}()
	busiest := regexp.MustCompile(`(?m)^  node-1 ran \d+ messages/s; busiest: ` + counter.Name + `/` + busy + ` \d+/s`)
	testutil.WaitForWithin(t, "top to name the object kept busy on node-1", time.Minute, func() bool {
		code, out, errOut = adminRun(t, n1, ca, cred, "top", "-n", "1", "-every", "300ms", "-objects", "1")
		if code != 0 || !strings.Contains(out, fmt.Sprintf("total=%d", objects)) || !strings.Contains(out, fmt.Sprintf("node-1=%d", len(onN1))) {
			t.Fatalf("top: %d %q %q", code, out, errOut)
		}
		return busiest.MatchString(out)
	})
	close(stopSend)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	var id string
	for i := range objects {
		if !onN1[strconv.Itoa(i)] {
			id = strconv.Itoa(i) // on node-2
			break
		}
	}
	code, out, errOut = adminRun(t, n1, ca, cred, "locate", counter.Name+"/"+id)
	if code != 0 || !strings.Contains(out, " on node-2 ") {
		t.Fatalf("locate %s: %d %q %q", id, code, out, errOut)
	}
	// inspect asks the object on node-2, through node-1: one Add and one
	// Read ran, and the counter's summary says so.
	code, out, errOut = adminRun(t, n1, ca, cred, "inspect", counter.Name+"/"+id)
	if code != 0 || !regexp.MustCompile(`(?m)^runs on\s+node-2 \(object gen \d+, owner gen \d+\)$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^messages run\s+2$`).MatchString(out) || !regexp.MustCompile(`(?m)^queued\s+0$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^summary\s+1 adds from 1 senders, 0 out of order$`).MatchString(out) {
		t.Fatalf("inspect %s: %d %q %q", id, code, out, errOut)
	}
	if code, out, errOut = adminRun(t, n1, ca, cred, "inspect", counter.Name+"/nowhere"); code != 1 || !strings.Contains(errOut, "not active") {
		t.Fatalf("inspect of an object that never ran: %d %q %q; want exit 1, not active", code, out, errOut)
	}
	// stats is a table, a row per count; -o json prints the API's answers.
	code, out, errOut = adminRun(t, n1, ca, cred, "stats")
	if code != 0 || !regexp.MustCompile(`(?m)^host\s+node-1$`).MatchString(out) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^OwnersActive\s+%d$`, len(onN1))).MatchString(out) ||
		!regexp.MustCompile(`(?m)^Jeopardy\s+false$`).MatchString(out) || !regexp.MustCompile(`(?m)^Payload\.Decodes\s+\d+$`).MatchString(out) {
		t.Fatalf("stats: %d %q %q", code, out, errOut)
	}
	var ms admin.Members
	code, out, errOut = adminRun(t, n1, ca, cred, "-o", "json", "members")
	if err := json.Unmarshal([]byte(out), &ms); code != 0 || err != nil || ms.Self != "node-1" || len(ms.Members) != 3 { // the nodes and the client
		t.Fatalf("-o json members: %d %q %q (%v)", code, out, errOut, err)
	}
	var st admin.Stats
	code, out, errOut = adminRun(t, n1, ca, cred, "-o", "json", "stats")
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Host != "node-1" || st.Stats.OwnersActive != len(onN1) {
		t.Fatalf("-o json stats: %d %q %q (%v)", code, out, errOut, err)
	}
	var sample struct {
		Total int            `json:"total"`
		Hosts map[string]int `json:"hosts"`
	}
	code, out, errOut = adminRun(t, n1, ca, cred, "-o", "json", "top", "-n", "1")
	if err := json.Unmarshal([]byte(out), &sample); code != 0 || err != nil || sample.Total != objects || sample.Hosts["node-1"] != len(onN1) {
		t.Fatalf("-o json top: %d %q %q (%v)", code, out, errOut, err)
	}
	if code, _, errOut = adminRun(t, n1, ca, cred, "-o", "yaml", "members"); code != node.ExitUsage || !strings.Contains(errOut, "table or json") {
		t.Fatalf("-o yaml: %d %q", code, errOut)
	}
	// Refused: no credential; writes on node-2, which does not allow them.
	if code, _, errOut = adminRun(t, n1, ca, "not-the-admin-credential", "members"); code != node.ExitFailed || !strings.Contains(errOut, "401") {
		t.Fatalf("members with a wrong credential: %d %q", code, errOut)
	}
	if code, _, errOut = adminRun(t, n2, ca, cred, "move", counter.Name+"/"+id, "node-1"); code != node.ExitFailed || !strings.Contains(errOut, "403") {
		t.Fatalf("move through node-2 (no -admin-write): %d %q", code, errOut)
	}
	// Moves from any node: node-1 moves node-2's object to itself.
	if code, out, errOut = adminRun(t, n1, ca, cred, "move", counter.Name+"/"+id, "node-1"); code != 0 || !strings.Contains(out, "moved") {
		t.Fatalf("move: %d %q %q", code, out, errOut)
	}
	if row, err := store.Get(ctx, relocation.Object{Kind: counter.Name, ID: id}); err != nil || row.Host != "node-1" {
		t.Fatalf("object %s after the move: %+v, %v; want it on node-1", id, row, err)
	}
	// The move is listed by its source, node-2 (moves is a read route).
	code, out, errOut = adminRun(t, n2, ca, cred, "moves")
	if code != 0 || !regexp.MustCompile(`(?m)^1\s+\S+\s+`+counter.Name+`/`+id+`\s+node-2\s+node-1\s+\S+s\s+moved$`).MatchString(out) {
		t.Fatalf("moves at node-2: %d %q %q", code, out, errOut)
	}
	// drain checks the name first.
	if code, _, errOut = adminRun(t, n1, ca, cred, "drain", "node-2"); code != node.ExitFailed || !strings.Contains(errOut, "not node-2") {
		t.Fatalf("drain node-2 at node-1's address: %d %q", code, errOut)
	}
	// In a node's own container (a preStop hook), drain drains the node
	// $BERTH_NAME names, whose certificate the node at -addr must have.
	if code, out, errOut = adminRunInNode(t, n1, ca, "node-1", cred, "drain"); code != 0 || !strings.Contains(out, "drained node-1") {
		t.Fatalf("drain: %d %q %q", code, out, errOut)
	}
	select {
	case <-n1.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("node-1 still runs 30 s after its drain:\n%s", n1.stderr())
	}
	if c := n1.cmd.ProcessState.ExitCode(); c != node.ExitOK {
		t.Fatalf("node-1 exited %d after its drain, want 0:\n%s", c, n1.stderr())
	}
	// node-2's event log tells of node-1's drain: it began, node-2
	// received its objects (counted: node-1 held onN1 and the one moved
	// to it), and node-1 left — no failure.
	testutil.WaitForWithin(t, "node-2's events to tell node-1's drain", time.Minute, func() bool {
		var es admin.Events
		code, out, errOut := adminRun(t, n2, ca, cred, "-o", "json", "events")
		if err := json.Unmarshal([]byte(out), &es); code != 0 || err != nil {
			t.Fatalf("-o json events: %d %q %q (%v)", code, out, errOut, err)
		}
		in, draining, left := 0, false, false
		for _, e := range es.Events {
			switch {
			case e.Host != "node-1":
			case e.Kind == actor.EventMovedIn:
				in += e.Count
			case e.Kind == actor.EventDraining:
				draining = true
			case e.Kind == actor.EventLeft:
				left = true
			case e.Kind == actor.EventFailed:
				t.Fatalf("node-2's events name node-1 failed after a drain: %+v", e)
			}
		}
		return in == len(onN1)+1 && draining && left
	})
	code, out, errOut = adminRun(t, n2, ca, cred, "events")
	if code != 0 || !regexp.MustCompile(`(?m)^\d+\s+\S+\s+moved-in\s+node-1\s+\d+\s*$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\d+\s+\S+\s+left\s+node-1\s*$`).MatchString(out) {
		t.Fatalf("events at node-2: %d %q %q", code, out, errOut)
	}
	for i := range objects {
		ref := actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}
		c, err := actor.Ask[counter.Read, counter.Counter](ctx, client, ref, counter.Read{})
		if err != nil || c.Count["s"] != 1 || ref.ID == busy && (c.Count["top"] != busySent || c.OutOfOrder != 0) {
			t.Fatalf("object %d after node-1's drain: %+v, %v; want its state (s once; top's %d in order on %s)", i, c, err, busySent, busy)
		}
	}
}

// checkDashboardStream reads the first snapshot of a node's dashboard
// stream: it names the node and lists members members.
func checkDashboardStream(t *testing.T, url, name string, members int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var s admin.Snapshot
			if err := json.Unmarshal([]byte(data), &s); err != nil || s.Host != name || len(s.Members) != members || s.Total == 0 {
				t.Fatalf("the dashboard's first snapshot: %+v, %v; want %s with %d members and objects", s, err, name, members)
			}
			return
		}
	}
	t.Fatalf("the dashboard's stream ended: %v", sc.Err())
}

// A node SIGKILLed: its peer's event log and members (berth admin) say it
// is unreachable as soon as its links break, then failed once its lease
// ran out — within the failover time — and the objects the peer took
// over from it are counted, a few events for them all.
func TestASIGKILLedNodeIsMarkedUnreachableThenFailedAndItsTakeoversCounted(t *testing.T) {
	const cred = "the-admin-credential-of-the-test"
	t.Setenv("BERTH_ADMIN_TOKEN", cred)
	db := pgtest.New(t)
	bin := buildBerth(t)
	ca := testCA(t, "node-1", "node-2")
	ctx := context.Background()
	n1, err := startNode(ctx, bin, "node-1", db.URL, ca, "-admin", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer n1.signal(syscall.SIGKILL, 10*time.Second)
	n2, err := startNode(ctx, bin, "node-2", db.URL, ca, "-admin", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client, store, closeClient, err := startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	const objects = 40
	var onN2 []int
	for i, h := range placeObjects(t, client, store, objects) {
		if h == "node-2" {
			onN2 = append(onN2, i)
		}
	}
	if len(onN2) == 0 {
		t.Fatal("no object on node-2")
	}
	// seen returns what node-1's members answer says of node-2.
	seen := func() admin.Member {
		var ms admin.Members
		code, out, errOut := adminRun(t, n1, ca, cred, "-o", "json", "members")
		if err := json.Unmarshal([]byte(out), &ms); code != 0 || err != nil {
			t.Fatalf("members: %d %q %q (%v)", code, out, errOut, err)
		}
		for _, m := range ms.Members {
			if m.Name == "node-2" {
				return m
			}
		}
		return admin.Member{}
	}
	killed := time.Now()
	n2.signal(syscall.SIGKILL, 10*time.Second)
	testutil.WaitForWithin(t, "node-1 to see node-2 unreachable or failed", time.Minute, func() bool { return seen().Seen != "" })
	sawDown := time.Since(killed)
	testutil.WaitForWithin(t, "node-1 to list node-2 failed", time.Minute, func() bool { return seen().State == "failed" })
	sawFailed := time.Since(killed)
	t.Logf("MEASURED node-1 listed node-2 down %v after the SIGKILL, failed %v after it (lease: %v)",
		sawDown.Round(time.Millisecond), sawFailed.Round(time.Millisecond), relocation.LeaseTTL)
	// The client's next messages have node-1 take node-2's objects over.
	for _, i := range onN2 {
		testutil.WaitForWithin(t, "an object of node-2 to answer on node-1", time.Minute, func() bool {
			_, err := actor.Ask[counter.Read, counter.Counter](ctx, client, actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}, counter.Read{})
			return err == nil
		})
	}
	var es admin.Events
	testutil.WaitForWithin(t, "node-1's events to count the objects it took over", time.Minute, func() bool {
		es = admin.Events{}
		code, out, errOut := adminRun(t, n1, ca, cred, "-o", "json", "events")
		if err := json.Unmarshal([]byte(out), &es); code != 0 || err != nil {
			t.Fatalf("events: %d %q %q (%v)", code, out, errOut, err)
		}
		n := 0
		for _, e := range es.Events {
			if e.Kind == actor.EventTookOver && e.Host == "node-2" {
				n += e.Count
			}
		}
		return n == len(onN2)
	})
	var kinds []string
	var tookOver []actor.Event
	for _, e := range es.Events {
		if e.Host == "node-2" {
			if e.Kind == actor.EventTookOver {
				tookOver = append(tookOver, e)
			}
			if len(kinds) == 0 || kinds[len(kinds)-1] != string(e.Kind) {
				kinds = append(kinds, string(e.Kind))
			}
		}
	}
	if want := "joined unreachable failed took-over"; strings.Join(kinds, " ") != want {
		t.Fatalf("node-1's events about node-2: %v, want %s", kinds, want)
	}
	// A burst is counted at most once a second (the event log's flush),
	// not listed: no more took-over events than the seconds they span
	// allow (plus one).
	span := tookOver[len(tookOver)-1].Time.Sub(tookOver[0].Time)
	if max := int(span/time.Second) + 1; len(tookOver) > max {
		t.Fatalf("node-1 recorded %d took-over events over %v for %d objects taken over: a burst is counted at most once a second, not listed", len(tookOver), span, len(onN2))
	}
}
