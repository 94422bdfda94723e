package tests

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/relocation"
)

// TestARollingUpgradeMovesEachObjectAtMostOnce: three node processes of
// application version v1.9.0 hold 150 objects; a gateway's senders send
// them numbered Tells and Asks in a closed loop. The cluster is rolled to
// v1.10.0 the way a Deployment with a surge of one does it: a node of the
// new version starts, then each old node in turn drains (its objects move
// to nodes of the newest version only) and a node of the new version
// takes its name. Every accepted message of every sender ran once and in
// order, and every object moved at most once — its owner generation in
// the Location Store grew by one at most — and those of the old nodes
// exactly once. The Asks' round trips before, during and after the
// rollout are reported.
func TestARollingUpgradeMovesEachObjectAtMostOnce(t *testing.T) {
	const objects = 150
	const oldV, newV = "v1.9.0", "v1.10.0"
	db := pgtestNew(t)
	store, members, closePG := openPostgres(t, db)
	t.Cleanup(closePG)
	version := func(v string) string { return "BERTH_CHILD_VERSION=" + v }
	olds := []*child{
		startNodeChild(t, db, "n1", version(oldV)),
		startNodeChild(t, db, "n2", version(oldV)),
		startNodeChild(t, db, "n3", version(oldV)),
	}
	for _, n := range olds {
		n.waitPeers(t, 2)
	}
	for i := range objects { // activate each where it is first read: spread over the old nodes
		olds[i%len(olds)].must(t, "read "+strconv.Itoa(i))
	}
	ctx := context.Background()
	ownerGen := func() []uint64 {
		gens := make([]uint64, objects)
		for i := range objects {
			row, err := store.Get(ctx, relocation.Object{Kind: "seqlog", ID: strconv.Itoa(i)})
			if err != nil {
				t.Fatalf("object %d's row: %v", i, err)
			}
			gens[i] = row.OwnerGen
		}
		return gens
	}
	before := ownerGen()
	gw := startChild(t, "node", "gw", "BERTH_CHILD_NAME=gw", "BERTH_CHILD_DB="+db, "BERTH_CHILD_GATEWAY=1")
	gw.waitPeers(t, 3)
	seed := loadSeed(t)
	gw.must(t, fmt.Sprintf("load %d 8 4 %d 0", objects, seed)) // closed loop: each sender's next send after its last
	time.Sleep(2 * time.Second)                                // steady state, the first phase of the Asks' round trips

	// The rollout: a surge node first, then each old node drained and
	// replaced by a node of the new version under its name.
	gw.must(t, "mark")
	began := time.Now()
	news := []*child{startNodeChild(t, db, "n4", version(newV))}
	news[0].waitPeers(t, 4)
	var drainLogs []string
	for _, old := range olds {
		old.waitPeers(t, 4)                                // it knows the new nodes
		ms, _, _ := strings.Cut(old.must(t, "drain"), " ") // its time, then its moves' pauses
		old.exited(t)
		t.Logf("%s drained in %s ms", old.name, ms)
		drainLogs = append(drainLogs, old.name+":\n"+old.stderr())
		n := startNodeChild(t, db, old.name, version(newV))
		n.waitPeers(t, 4) // the other nodes and the gateway
		news = append(news, n)
	}
	rollout := time.Since(began)
	gw.must(t, "mark")
	time.Sleep(2 * time.Second) // after the rollout, the last phase
	reports := loadReports(t, gw)

	if !checkObjects(t, objects, reports, append(slices.Clone(news), gw)...) {
		return
	}
	after := ownerGen()
	moved, twice := 0, 0
	for i := range objects {
		switch d := after[i] - before[i]; {
		case d > 1:
			if twice++; twice <= 5 {
				t.Errorf("object %d moved %d times during the rollout (owner generation %d → %d), want at most once", i, d, before[i], after[i])
			}
		case d == 1:
			moved++
		}
	}
	if moved != objects {
		ms, err := members.Members(ctx)
		t.Errorf("%d of %d objects moved during the rollout, %d more than once; every one was on an old node, so each moves once. The members now: %+v (%v). The drained nodes' logs:\n%s",
			moved, objects, twice, ms, err, strings.Join(drainLogs, "\n"))
	}
	var asks, failed int
	phases := map[int][]int{}
	for _, r := range reports {
		asks += r.Asks
		failed += r.TellErrors + r.AskErrors
		for p, us := range r.AskUS {
			phases[p] = append(phases[p], us...)
		}
	}
	t.Logf("MEASURED rollout of 3 nodes (+1 surge) in %v; %d objects moved once each; %d Asks answered, %d sends failed with a typed error (e.g. %v)",
		rollout.Round(time.Millisecond), moved, asks, failed, firstErrors(reports))
	for p, name := range []string{"before", "during", "after"} {
		us := phases[p]
		if len(us) == 0 {
			t.Errorf("no Ask answered %s the rollout", name)
			continue
		}
		slices.Sort(us)
		t.Logf("MEASURED Ask round trips %s the rollout: %d, p50 %v, p99 %v, max %v", name, len(us),
			time.Duration(us[len(us)/2])*time.Microsecond, time.Duration(us[len(us)*99/100])*time.Microsecond, time.Duration(us[len(us)-1])*time.Microsecond)
	}
	for _, n := range append(news, gw) {
		n.stop(t)
	}
}
