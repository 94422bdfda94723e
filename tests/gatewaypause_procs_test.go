package tests

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/pgstore"
)

// TestAGatewayPausedPastItsLeaseJoinsAgainAsANewRun: two node processes
// and a gateway process on one Postgres database. The gateway's senders
// send numbered Tells and Asks to 60 objects, and so do the nodes'. The
// gateway is stopped (SIGSTOP) until the membership has ended its run —
// its peers saw it fail — and then resumed. A gateway owns no objects:
// it does not exit, it joins again as a new run, and its senders are
// answered again. What its old run's links held when it stopped (the
// nodes had not taken it) goes to them again on the new run's links,
// first. So every accepted message of every sender — the gateway's
// included, before and after the pause — ran once and in order (an Ask
// that failed may or may not have run).
func TestAGatewayPausedPastItsLeaseJoinsAgainAsANewRun(t *testing.T) {
	const objects = 60
	db := pgtestNew(t)
	_, members, closePG := openPostgres(t, db)
	t.Cleanup(closePG)
	nodes := []*child{
		startChild(t, "node", "n1", "BERTH_CHILD_NAME=n1", "BERTH_CHILD_DB="+db),
		startChild(t, "node", "n2", "BERTH_CHILD_NAME=n2", "BERTH_CHILD_DB="+db),
	}
	gw := startChild(t, "node", "gw", "BERTH_CHILD_NAME=gw", "BERTH_CHILD_DB="+db, "BERTH_CHILD_GATEWAY=1")
	for _, n := range nodes {
		n.waitPeers(t, 2)
	}
	gw.waitPeers(t, 2)
	for i := range objects {
		nodes[i%len(nodes)].must(t, "read "+strconv.Itoa(i))
	}
	seed := loadSeed(t)
	for i, n := range nodes {
		n.must(t, fmt.Sprintf("load %d 2 8 %d 100", objects, seed+int64(i)))
	}
	gw.must(t, fmt.Sprintf("load %d 3 8 %d 100", objects, seed+10))
	time.Sleep(time.Second) // traffic

	pausePastItsRun(t, gw, members)
	gw.must(t, "mark")
	time.Sleep(2 * time.Second) // traffic from the new run

	reports := loadReports(t, nodes...)
	greports := loadReports(t, gw)
	for name, r := range greports {
		if r.Marked == nil {
			t.Fatalf("gateway sender %s never sent after the mark", name)
		}
		reports[name] = r
	}
	// Read through the gateway last: after its own messages.
	if !checkObjects(t, objects, reports, append(slices.Clone(nodes), gw)...) {
		return
	}
	var tells, asks, failed int
	for _, r := range greports {
		tells += r.Tells
		asks += r.Asks
		failed += r.TellErrors + r.AskErrors
	}
	st := decode[actor.Stats](t, gw.must(t, "stats"))
	t.Logf("gateway senders: %d Tells, %d Asks, %d failed with a typed error; e.g. %v", tells, asks, failed, firstErrors(greports))
	t.Logf("the gateway sent %d messages again after it joined again (%d counted lost); the nodes dropped %d repeats",
		st.SentAgain, st.LostOnRejoin, repeatsOf(t, nodes))
	if st.LostOnRejoin != 0 {
		t.Fatalf("the gateway counted %d items lost with its old run; both nodes lived, so every message could go again", st.LostOnRejoin)
	}
	for _, n := range append(nodes, gw) {
		n.stop(t)
	}
}

// TestANodeWithNoObjectPausedPastItsLeaseJoinsAgainAsANewRun: two node
// processes hold 40 objects under traffic; a third node joins after them
// and is given none. It is stopped (SIGSTOP) until the membership has
// ended its run, then resumed. It does not exit: it joins again as a
// new run (it had no object to drop), an object first sent to from it
// activates on it, and every accepted message of the others' senders
// ran once and in order.
func TestANodeWithNoObjectPausedPastItsLeaseJoinsAgainAsANewRun(t *testing.T) {
	const objects = 40
	db := pgtestNew(t)
	_, members, closePG := openPostgres(t, db)
	t.Cleanup(closePG)
	nodes := []*child{startNodeChild(t, db, "n1"), startNodeChild(t, db, "n2")}
	for _, n := range nodes {
		n.waitPeers(t, 1)
	}
	for i := range objects {
		nodes[i%len(nodes)].must(t, "read "+strconv.Itoa(i))
	}
	n3 := startNodeChild(t, db, "n3")
	n3.waitPeers(t, 2)
	for _, n := range nodes {
		n.waitPeers(t, 2)
	}
	seed := loadSeed(t)
	for i, n := range nodes {
		n.must(t, fmt.Sprintf("load %d 2 8 %d 100", objects, seed+int64(i)))
	}
	if st := decode[actor.Stats](t, n3.must(t, "stats")); st.OwnersActive != 0 {
		t.Fatalf("n3 owns %d objects before its pause, want 0 (they were placed before it joined)", st.OwnersActive)
	}
	pausePastItsRun(t, n3, members)
	// An object sent to first from n3 activates there (PlaceLocal),
	// under its new run, and answers from the other nodes.
	n3.must(t, "read "+strconv.Itoa(objects))
	if st := decode[actor.Stats](t, n3.must(t, "stats")); st.OwnersActive != 1 {
		t.Fatalf("n3 owns %d objects after it activated one, want 1", st.OwnersActive)
	}
	nodes[0].must(t, "read "+strconv.Itoa(objects))
	for _, n := range nodes {
		n.must(t, "mark")
	}
	time.Sleep(time.Second) // traffic after the rejoin
	reports := loadReports(t, nodes...)
	if !checkObjects(t, objects, reports, nodes...) {
		return
	}
	if st := decode[actor.Stats](t, n3.must(t, "stats")); st.Rejoins != 1 {
		t.Fatalf("n3 joined again %d times, want 1", st.Rejoins)
	}
	for _, n := range append(nodes, n3) {
		n.stop(t)
	}
}

// pausePastItsRun stops child c (SIGSTOP) until the membership has ended
// its run, resumes it, and waits until it has joined again as a new run
// (Stats.Rejoins 1, listed again, and ready: its new run holds its lease
// in the Location Store); c exiting fails t. It logs how long c
// was stopped and how long after its resume it joined again.
func pausePastItsRun(t *testing.T, c *child, members *pgstore.Membership) {
	t.Helper()
	listed := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ms, err := members.Members(ctx)
		if err != nil {
			return true // not known: ask again
		}
		return slices.ContainsFunc(ms, func(m membership.Member) bool { return m.Name == c.name })
	}
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	testutil.WaitForWithin(t, "the membership to end the stopped "+c.name+"'s run", time.Minute, func() bool { return !listed() })
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	testutil.WaitForWithin(t, c.name+" to join again as a new run", time.Minute, func() bool {
		select {
		case <-c.done:
			t.Fatalf("%s exited after it was resumed (%v); its log:\n%s", c.name, c.cmd.ProcessState, tailString(c.stderr(), 4000))
		default:
		}
		if decode[actor.Stats](t, c.must(t, "stats")).Rejoins != 1 || !listed() {
			return false
		}
		_, err := c.call(t, 10*time.Second, "ready") // its new run's lease held too
		return err == nil
	})
	t.Logf("MEASURED %s was stopped %v (until the membership ended its run); it joined again as a new run %v after it was resumed",
		c.name, resumed.Sub(stopped).Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond))
}

// repeatsOf returns how many messages sent again the nodes dropped as
// repeats.
func repeatsOf(t *testing.T, nodes []*child) int64 {
	var n int64
	for _, c := range nodes {
		n += decode[actor.Stats](t, c.must(t, "stats")).Repeats
	}
	return n
}

// firstErrors returns a few of the reports' errors.
func firstErrors(reports map[string]*senderReport) []string {
	var out []string
	for _, r := range reports {
		for _, e := range r.Errors {
			if len(out) < 3 {
				out = append(out, e)
			}
		}
	}
	return out
}
