package actor

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// TestAGatewaysTellsOnItsOldRunsLinksRunOnceInOrderAfterItJoinsAgain: a
// gateway whose run the membership ends while Tells it accepted are still
// on its link (not yet taken by the object's host) joins again as a new
// run. Its old run's links close as a crash's would, but what they held
// goes to the object's host again on the new run's links, first: every
// accepted Tell runs once and in order, with the Tells sent after the
// rejoin behind them, and nothing is counted lost. A message the object's
// host had run that comes from the gateway again, marked as sent again (a
// tcp link may not have reported its taking before the old run closed),
// is dropped, not run twice. The same with every item on the link
// between them delayed (a slow link: a rejoin cuts a delivery short).
func TestAGatewaysTellsOnItsOldRunsLinksRunOnceInOrderAfterItJoinsAgain(t *testing.T) {
	for _, delay := range []time.Duration{0, 3 * time.Millisecond} {
		t.Run(fmt.Sprintf("delay %v", delay), func(t *testing.T) { testGatewayRejoinSendsAgain(t, delay) })
	}
}

func testGatewayRejoinSendsAgain(t *testing.T, delay time.Duration) {
	n := NewNetwork(nil)
	n.Delay("g", "o", delay)
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

	// The frame of Tell 2 as it went to o (no record crosses in this
	// test: the cluster's record filter is not needed meanwhile).
	var mu sync.Mutex
	var frames [][]byte
	n.Transport.SetHook(func(from, to string, it transport.Item) bool {
		if from == "g" && to == "o" && it.Kind == transport.Frame {
			mu.Lock()
			frames = append(frames, bytes.Clone(it.Data))
			mu.Unlock()
		}
		return true
	})
	tell(1)
	tell(2)
	waitFor(t, "Tells 1 and 2 to run on o", func() bool { return slices.Equal(ran(), []int{1, 2}) })
	mu.Lock()
	if len(frames) != 2 {
		t.Fatalf("saw %d frames from g to o, want Tells 1 and 2", len(frames))
	}
	tell2 := frames[1]
	mu.Unlock()

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
	// And an Ask, behind them on the link.
	type answer struct {
		seqs []int
		err  error
	}
	asked := make(chan answer, 1)
	go func() {
		got, err := Ask[GetSeqs, []int](bg, g, x, GetSeqs{})
		asked <- answer{got, err}
	}()
	var askFrame []byte
	waitFor(t, "the Ask to wait on the link", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(frames) == 6 {
			askFrame = frames[5]
		}
		return askFrame != nil && g.Stats().RequestsInFlight == 1
	})

	// The membership ends g's run (o sees it fail); g notices at its next
	// renewal and joins again as a new run.
	n.Membership.Expire("g")
	waitFor(t, "g to join again as a new run", func() bool { return g.Stats().Rejoins == 1 && g.Ready() == nil })
	n.Heal("g", "o")
	waitViews(t, o, g)

	tell(6)
	tell(7)

	// Tell 7 runs: every Tell before it ran, once and in order.
	waitFor(t, "Tell 7 to run on o", func() bool { return slices.Contains(ran(), 7) })
	got := ran()
	st := g.Stats()
	t.Logf("ran %v of %v; g: Rejoins %d, SentAgain %d, LostOnRejoin %d", got, accepted, st.Rejoins, st.SentAgain, st.LostOnRejoin)
	if !slices.Equal(got, accepted) {
		t.Fatalf("o ran %v of g's accepted Tells %v%s: some lost, twice or out of order", got, accepted, missing(accepted, got))
	}
	if st.SentAgain < 4 || st.LostOnRejoin != 0 {
		t.Fatalf("g sent %d messages again (want the 4 its old run's link held) and counted %d lost", st.SentAgain, st.LostOnRejoin)
	}
	// The Ask went again too, and its answer came to the new run: it saw
	// Tells 1..5 before it.
	if a := <-asked; a.err != nil || !slices.Equal(a.seqs, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("the Ask on the old run's link was answered %v, %v; want [1 2 3 4 5]", a.seqs, a.err)
	}

	// Tell 2 again, marked as sent again, as a tcp link would send it
	// had o's taking not reached g: o drops it.
	if _, _, ok := markAgain(tell2); !ok {
		t.Fatal("Tell 2's frame could not be marked as sent again")
	}
	if err := g.peers.tr.Send("o", transport.Item{Kind: transport.Frame, Data: tell2}); err != nil {
		t.Fatal(err)
	}
	tell(8)
	waitFor(t, "Tell 8 to run on o", func() bool { return slices.Contains(ran(), 8) })
	if got := ran(); !slices.Equal(got, accepted) {
		t.Fatalf("o ran %v of g's accepted Tells %v after Tell 2 came again: it ran it twice", got, accepted)
	}
	if r := o.Stats().Repeats; r != 1 {
		t.Fatalf("o counted %d repeats dropped, want 1 (Tell 2)", r)
	}

	// The Ask again, as if o had taken it from the old run and its answer
	// had gone there while the new run waits for it: o answers at once
	// that it ran and its answer is lost (ErrRejoined), not run it twice.
	n.Transport.SetHook(nil)
	askAgainIsAnsweredRejoined(t, g, "o", askFrame)
	if r := o.Stats().Repeats; r != 2 {
		t.Fatalf("o counted %d repeats dropped, want 2 (Tell 2, the Ask)", r)
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

// TestARepeatedAskToAPersistentObjectIsAnsweredAtOnce: an Ask that comes
// to a persistent object's owner again, marked as sent again, after its
// first coming ran (a gateway's new run sends again what its old run's
// link had not seen taken) is dropped and answered at once with
// ErrRejoined, from the goroutine that admits it — not through the
// persistent owner's output gate, which holds a turn's answers until the
// turn's write: outside a turn the answer waited for some later turn's
// write, and the gate was touched from two goroutines (a data race under
// -race).
func TestARepeatedAskToAPersistentObjectIsAnsweredAtOnce(t *testing.T) {
	n := NewNetwork(nil)
	o := startHost(t, n.With(Config{Name: "o", Logger: quietLogger()}), ledgerKind(nil))
	g := startHost(t, n.With(Config{Name: "g", Logger: quietLogger(), Gateway: true}), ledgerKind(nil))
	waitViews(t, o, g)
	var mu sync.Mutex
	var frames [][]byte
	n.Transport.SetHook(func(from, to string, it transport.Item) bool {
		if from == "g" && to == "o" && it.Kind == transport.Frame {
			mu.Lock()
			frames = append(frames, bytes.Clone(it.Data))
			mu.Unlock()
		}
		return true
	})
	x := Ref{"ledger", "x"}
	if got, err := Ask[Add, int](bg, g, x, Add{By: 1}); err != nil || got != 1 {
		t.Fatalf("the Ask: %d, %v; want 1", got, err)
	}
	n.Transport.SetHook(nil)
	mu.Lock()
	if len(frames) != 1 {
		mu.Unlock()
		t.Fatalf("saw %d frames from g to o, want the Ask's", len(frames))
	}
	askFrame := frames[0]
	mu.Unlock()
	askAgainIsAnsweredRejoined(t, g, "o", askFrame)
	if l, err := Ask[Peek, Ledger](bg, g, x, Peek{}); err != nil || l.N != 1 {
		t.Fatalf("the ledger after the Ask came again: %+v, %v; want N 1 (it ran once)", l, err)
	}
	if r := o.Stats().Repeats; r != 1 {
		t.Fatalf("o counted %d repeats dropped, want 1", r)
	}
}

// askAgainIsAnsweredRejoined sends g's Ask frame to host to again, marked
// as sent again, with g waiting for its answer as a new run would: the
// owner, which ran it already, must answer at once with ErrRejoined (of
// kind Unavailable, its text) rather than run it twice. The minute is a
// failure bound: the answer is due at once.
func askAgainIsAnsweredRejoined(t *testing.T, g *Host, to string, askFrame []byte) {
	t.Helper()
	if _, _, ok := markAgain(askFrame); !ok {
		t.Fatal("the Ask's frame could not be marked as sent again")
	}
	hv, _, err := payload.DecodeHeader(askFrame)
	if err != nil {
		t.Fatal(err)
	}
	p := &pending{ch: make(chan reply, 1)}
	g.requests.add(hv.Op(), p)
	if err := g.peers.tr.Send(to, transport.Item{Kind: transport.Frame, Data: askFrame}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-p.ch:
		if !errors.Is(r.err, payload.Unavailable) || r.err.Error() != ErrRejoined.Error() {
			t.Fatalf("the Ask sent again, which its owner had run, was answered %v, want ErrRejoined (of kind Unavailable, its text)", r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the Ask sent again was not answered within a minute: a persistent owner's answer waits for a later turn's write")
	}
}
