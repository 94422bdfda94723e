package tests

import (
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
)

// Callers of a failed host learn at once, across processes: Asks pending
// at a node (their handlers never reply) when it is SIGKILLed under load
// end with Unavailable (actor.ErrPeerFailed) once the askers drop the
// node from their views — the lease's failover, not the Asks' own
// deadline (20 s, below RequestTimeout) — from a node and from a gateway alike. The times
// from the SIGKILL to each Ask's end are logged (-v), not asserted: a
// slow machine may stretch them, never past the deadline.
func TestPendingAsksToASIGKILLedNodeEndAtOnceWithUnavailable(t *testing.T) {
	const objects, perAsker, deadline = 64, 8, 20 // seqlog objects under load; hanging Asks per asker; seconds (the Asks' and the reads' deadline)
	db := pgtestNew(t)
	n1 := startNodeChild(t, db, "n1")
	n2 := startNodeChild(t, db, "n2")
	gw := startNodeChild(t, db, "gw", "BERTH_CHILD_GATEWAY=1")
	for _, c := range []*child{n1, n2, gw} {
		c.waitPeers(t, 2)
	}
	for i := range objects { // spread over the two nodes
		[]*child{n1, n2}[i%2].must(t, "read "+strconv.Itoa(i))
	}
	seed := time.Now().UnixNano() % 1_000_000
	t.Logf("seed %d", seed)
	// Two senders on each asker, 250 messages a second each (an Ask in
	// four): load, yet light enough that n2 renews its lease on a starved
	// machine until it is killed.
	gw.must(t, fmt.Sprintf("load %d 2 4 %d 250", objects, seed))
	n1.must(t, fmt.Sprintf("load %d 2 4 %d 250", objects, seed+1))

	// Objects on n2 whose requests never answer: n1 asks the first half,
	// the gateway the second, each with a deadline of 20 s.
	n2.must(t, fmt.Sprintf("activate %d hang 1", 2*perAsker))
	n1.must(t, fmt.Sprintf("hang 0 %d hang %d", perAsker, deadline))
	gw.must(t, fmt.Sprintf("hang %d %d hang %d", perAsker, 2*perAsker, deadline))
	testutil.WaitForWithin(t, "every hanging Ask to run on n2", time.Minute, func() bool { return n2.must(t, "hanging") == strconv.Itoa(2*perAsker) })

	killed := time.Now()
	n2.kill()
	// The failover the Asks are compared with: each seqlog object read
	// through n1 at once, again every 100 ms until it answers (n2's are
	// taken over by n1).
	reading := time.Now()
	reads := decode[[]readResult](t, n1.mustWithin(t, 2*time.Minute, fmt.Sprintf("readall %d %d", objects, deadline)))
	var failover time.Duration
	for i, r := range reads {
		if r.Err != "" {
			t.Errorf("seqlog object %d did not answer after n2's SIGKILL: %s", i, r.Err)
			continue
		}
		failover = max(failover, reading.Sub(killed)+r.Took)
	}
	t.Logf("failover: every object answered within %v of the SIGKILL", failover.Round(time.Millisecond))
	for _, c := range []*child{n1, gw} {
		rs := decode[[]hangResult](t, c.mustWithin(t, 2*time.Minute, "hangs"))
		if len(rs) != perAsker {
			t.Fatalf("%s: %d Asks ended, want %d", c.name, len(rs), perAsker)
		}
		var took []time.Duration
		failed := 0
		for _, r := range rs {
			if r.PeerFailed {
				failed++
			}
			if !r.PeerFailed || r.Kind != "unavailable" {
				t.Errorf("%s: the Ask of %s ended with %q (kind %q); want ErrPeerFailed (unavailable)", c.name, r.Object, r.Err, r.Kind)
			}
			if r.End >= r.Deadline {
				t.Errorf("%s: the Ask of %s ended %v after its own deadline", c.name, r.Object, time.Duration(r.End-r.Deadline))
			}
			took = append(took, time.Unix(0, r.End).Sub(killed))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("%s: %d Asks ended (%d with ErrPeerFailed) %v to %v after the SIGKILL (their deadline: %d s after they were sent)",
			c.name, len(took), failed, took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), deadline)
	}
	for _, r := range loadReports(t, n1, gw) {
		if r.Asks+r.Tells == 0 {
			t.Errorf("a sender sent nothing: %+v", r)
		}
	}
}

// mustWithin is must with its own bound on the wait for the answer.
func (c *child) mustWithin(tb testing.TB, d time.Duration, cmd string) string {
	tb.Helper()
	r, err := c.call(tb, d, cmd)
	if err != nil {
		tb.Fatalf("child %s: %s: %v", c.name, cmd, err)
	}
	return r
}
