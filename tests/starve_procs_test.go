package tests

import (
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
)

// busyCPU starts n processes that spin on CPU cpu (taskset) until the test
// ends: whatever else runs there gets a share of one core.
func busyCPU(t *testing.T, cpu, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("taskset", "-c", strconv.Itoa(cpu), "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Skipf("cannot pin a busy process to a CPU (taskset): %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// TestStarvedNodesPauseAndLoseNothing: three node processes pinned to one
// core (taskset) with GOMAXPROCS=1, sharing it with four processes that
// spin for the whole run — from before the nodes start, so their start,
// their migrations and their first lease are starved too. Numbered Tells
// and Asks from two senders on each node to 100 objects, and movers, run
// for 5 s (60 s with -long). No node exits: a starved node's lease may
// pass its deadline (jeopardy: a pause), never end its run. Every object
// ran every accepted message of every sender once, in order.
func TestStarvedNodesPauseAndLoseNothing(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset on this machine")
	}
	const objects = 100
	duration := 5 * time.Second
	if *long {
		duration = 60 * time.Second
	}
	db := pgtestNew(t)
	busyCPU(t, 0, 4)
	pin := []string{"taskset", "-c", "0"}
	var nodes []*child
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, startChildVia(t, pin, "node", "n"+strconv.Itoa(i),
			"BERTH_CHILD_NAME=n"+strconv.Itoa(i), "BERTH_CHILD_DB="+db, "GOMAXPROCS=1"))
	}
	for _, n := range nodes {
		n.waitPeers(t, len(nodes)-1)
	}
	for i := range objects {
		nodes[i%len(nodes)].must(t, "read "+strconv.Itoa(i))
	}
	seed := time.Now().UnixNano() % 1_000_000
	t.Logf("seed %d; starved for %v", seed, duration)
	for i, n := range nodes {
		n.must(t, fmt.Sprintf("load %d 2 8 %d 200", objects, seed+int64(i)))
	}
	nodes[0].must(t, fmt.Sprintf("movers 2 %d n1,n2,n3 %d 20", objects, seed))
	deadline := time.After(duration)
	for waiting := true; waiting; {
		select {
		case <-deadline:
			waiting = false
		case <-nodes[0].done:
			t.Fatalf("n1 exited while starved; its log:\n%s", nodes[0].stderr())
		case <-nodes[1].done:
			t.Fatalf("n2 exited while starved; its log:\n%s", nodes[1].stderr())
		case <-nodes[2].done:
			t.Fatalf("n3 exited while starved; its log:\n%s", nodes[2].stderr())
		}
	}
	moves := decode[moverReport](t, nodes[0].must(t, "unmove"))
	reports := loadReports(t, nodes...)
	var tells, asks, failed int
	for _, r := range reports {
		tells += r.Tells
		asks += r.Asks
		failed += r.TellErrors + r.AskErrors
	}
	for _, n := range nodes {
		st := decode[actor.Stats](t, n.must(t, "stats"))
		t.Logf("%s: jeopardies %d, lease lapses %d, taken over %d, suspicions %d", n.name, st.Jeopardies, st.LeaseLapses, st.TakenOver, st.Suspicions)
		if st.TakenOver != 0 {
			t.Errorf("%s: %d objects taken over from it while no node failed", n.name, st.TakenOver)
		}
	}
	if !checkObjects(t, objects, reports, nodes...) {
		return
	}
	for _, n := range nodes {
		n.stop(t)
	}
	t.Logf("%d tells, %d asks (%d refused with a typed error); movers %+v", tells, asks, failed, moves)
}
