package actor

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/berthrt/berth/relocation"
)

// TestAGatewaysTellsLostWithItsOldRunAreCounted: a gateway whose run the
// membership ends while Tells it accepted are still on its link (not yet
// taken by the object's host) joins again as a new run; the old run's
// links close as a crash would close them and what they held is lost with
// that run. The Tells that run do so once and in order, and every one
// that never runs is counted in the gateway's Stats.LostOnRejoin — the
// loss is not silent.
func TestAGatewaysTellsLostWithItsOldRunAreCounted(t *testing.T) {
	n := NewNetwork(nil)
	o := startHost(t, shortLeases(n.With(Config{Name: "o", Logger: quietLogger()})), seqKind())
	g := startHost(t, shortLeases(n.With(Config{Name: "g", Logger: quietLogger(), Gateway: true})), seqKind())
	waitViews(t, o, g)

	// An object that runs on o.
	var x Ref
	for i := range 64 {
		ref := Ref{"seq", "r" + strconv.Itoa(i)}
		if _, err := Ask[GetSeqs, []int](bg, o, ref, GetSeqs{}); err != nil {
			t.Fatal(err)
		}
		if row, err := n.Net.Store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err == nil && row.Host == "o" {
			x = ref
			break
		}
	}
	if x == (Ref{}) {
		t.Fatal("no object activated on o")
	}
	ran := func() []int {
		got, err := Ask[GetSeqs, []int](bg, o, x, GetSeqs{})
		if err != nil {
			return nil
		}
		return got
	}

	var accepted []int
	tell := func(seq int) {
		t.Helper()
		if err := Tell(bg, g, x, SeqMsg{Seq: seq}); err != nil {
			t.Logf("Tell %d refused (the caller knows): %v", seq, err)
			return
		}
		accepted = append(accepted, seq)
	}

	tell(1)
	tell(2)
	waitFor(t, "Tells 1 and 2 to run on o", func() bool { return slices.Equal(ran(), []int{1, 2}) })

	// Tells 3..5 are accepted by g while its link to o holds them (a
	// starved gateway building large messages, a slow link: o has not
	// taken them yet).
	n.Break("g", "o")
	for seq := 3; seq <= 5; seq++ {
		tell(seq)
	}
	if !slices.Equal(accepted, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("accepted %v before the rejoin, want 1..5", accepted)
	}

	// The membership ends g's run (o sees it fail); g notices at its next
	// renewal and joins again as a new run.
	n.Membership.Expire("g")
	waitFor(t, "g to join again as a new run", func() bool { return g.Stats().Rejoins == 1 && g.Ready() == nil })
	n.Heal("g", "o")
	waitViews(t, o, g)

	tell(6)
	tell(7)

	// Tell 7 runs: every Tell before it has run or never will (the new
	// run's stream does not wait for the old run's).
	waitFor(t, "Tell 7 to run on o", func() bool { return slices.Contains(ran(), 7) })
	got := ran()
	var want []int // the accepted Tells in their order, less those that never ran
	for _, s := range accepted {
		if slices.Contains(got, s) {
			want = append(want, s)
		}
	}
	lost := len(accepted) - len(want)
	st := g.Stats()
	t.Logf("ran %v of %v; g: Rejoins %d, LostOnRejoin %d", got, accepted, st.Rejoins, st.LostOnRejoin)
	if !slices.Equal(got, want) {
		t.Fatalf("o ran %v of g's accepted Tells %v: some twice or out of order", got, accepted)
	}
	if int64(lost) > st.LostOnRejoin {
		t.Fatalf("%d accepted Tells never ran%s, but g counted %d lost on its rejoin (Stats.LostOnRejoin)",
			lost, missing(accepted, got), st.LostOnRejoin)
	}
}

// missing names the accepted numbers that never ran.
func missing(accepted, got []int) string {
	var out []int
	for _, s := range accepted {
		if !slices.Contains(got, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%v)", out)
}
