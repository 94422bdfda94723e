package actor

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// TestWhatIsSentAgainGoesToItsPeerBeforeAnythingElse: the messages a new
// run sends again from its old run's links go to each peer in their
// order, before anything else the new run sends that peer. While the new
// run's transport refuses them (it does not know the peer yet), a send to
// that peer fails as the transport refused it, rather than overtake them;
// sends to other peers go at once. A second replacement before they went
// carries them over, ahead of what its own old links held.
func TestWhatIsSentAgainGoesToItsPeerBeforeAnythingElse(t *testing.T) {
	frame := func(seq byte) []byte {
		h := payload.Header{Op: payload.OpID{seq}, Origin: "g", Epoch: 1, Seq: uint64(seq)}
		if seq == 2 {
			h.ReplyTo = "g" // an Ask
		}
		b, err := payload.AppendHeader(nil, &h)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := &fakeLink{refuse: map[string]bool{}}
	first.back = map[string][]transport.Item{
		"p": {{Kind: transport.Frame, Data: frame(1)}, {Kind: transport.Hint, Data: []byte("advice")}, {Kind: transport.Frame, Data: frame(2)}},
	}
	l := newRunLink(first)
	var sentAgain []string
	count := func(to string, it transport.Item) { sentAgain = append(sentAgain, to) }

	second := &fakeLink{refuse: map[string]bool{"p": true}}
	r, err := l.replace(func() (transport.Transport, error) { return second, nil }, count)
	if err != nil || r.again != 2 || r.lost != 0 || !r.reclaimed {
		t.Fatalf("replace: %+v, %v; want 2 to send again, 0 lost, reclaimed (the hint is advice)", r, err)
	}
	if len(r.asks) != 1 || !r.asks[payload.OpID{2}] {
		t.Fatalf("replace named the Asks %v among what goes again, want only #2's", r.asks)
	}
	if err := l.Send("p", transport.Item{Kind: transport.Frame, Data: frame(3)}); err == nil {
		t.Fatal("a send to p went while what is sent again to p was refused")
	}
	if err := l.Send("q", transport.Item{Kind: transport.Frame, Data: frame(9)}); err != nil {
		t.Fatalf("a send to q waited for p's: %v", err)
	}
	if got := second.seqs("p"); len(got) != 0 {
		t.Fatalf("p got %v while its link refused", got)
	}

	// Replaced again before they went: they go first on the third link,
	// then what the second held for p.
	second.back = map[string][]transport.Item{"p": {{Kind: transport.Frame, Data: frame(4)}}}
	third := &fakeLink{refuse: map[string]bool{"p": true}}
	r, err = l.replace(func() (transport.Transport, error) { return third, nil }, count)
	if err != nil || r.again != 3 || !r.asks[payload.OpID{2}] {
		t.Fatalf("second replace: %d to send again (the Asks among them: %v), %v; want 3, with #2", r.again, r.asks, err)
	}
	l.current().sendAllAgain() // refused: they stay
	// The peer becomes known: the next send to it takes them first.
	third.mu.Lock()
	third.refuse["p"] = false
	third.mu.Unlock()
	if err := l.Send("p", transport.Item{Kind: transport.Frame, Data: frame(5)}); err != nil {
		t.Fatal(err)
	}
	if got, want := third.seqs("p"), []byte{1, 2, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("p got %v, want %v: what is sent again first, in order", got, want)
	}
	for _, it := range third.items["p"][:3] {
		if !isMarked(t, it.Data) {
			t.Fatalf("an item sent again is not marked (flagAgain)")
		}
	}
	if isMarked(t, third.items["p"][3].Data) {
		t.Fatal("the new run's own send is marked as sent again")
	}
	if len(sentAgain) != 3 {
		t.Fatalf("%d items counted as sent again, want 3", len(sentAgain))
	}
}

// TestARunThatEndedClosesItsLinksWithoutWaitingAndCountsWhatIsLost: a
// host whose run the membership ended closes its links as a reclaim does,
// which waits for no answer to its crash notice (its peers dropped the
// run and send none), and counts as lost the messages its peers had not
// seen taken and those it held to send again; advice and replies are not
// messages a sender handed it.
func TestARunThatEndedClosesItsLinksWithoutWaitingAndCountsWhatIsLost(t *testing.T) {
	frame := func(seq byte) []byte {
		h := payload.Header{Op: payload.OpID{seq}, Origin: "g", Epoch: 1, Seq: uint64(seq)}
		b, err := payload.AppendHeader(nil, &h)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := &fakeLink{back: map[string][]transport.Item{
		"p": {{Kind: transport.Frame, Data: frame(1)}, {Kind: transport.Hint, Data: []byte("advice")}},
	}}
	l := newRunLink(first)
	second := &fakeLink{refuse: map[string]bool{"p": true}}
	second.back = map[string][]transport.Item{
		"q": {{Kind: transport.Bounce, Data: frame(2)}, {Kind: transport.Reply, Data: []byte("answer")}},
	}
	if _, err := l.replace(func() (transport.Transport, error) { return second, nil }, func(string, transport.Item) {}); err != nil {
		t.Fatal(err)
	}
	// second holds #1 for p to send again (p is refused), and its peer q
	// had not taken #2.
	if lost := l.closeEnded(); lost != 2 {
		t.Fatalf("closeEnded counted %d lost, want 2: the frame held to send again and the bounce q had not taken", lost)
	}
	if !second.reclaimed {
		t.Fatal("the ended run's links were closed with Close, which waits for answers to the crash notice")
	}
	if n := second.seqs("p"); len(n) != 0 {
		t.Fatalf("the ended run sent %v to p as it closed", n)
	}
}

// isMarked reports whether frame is marked as sent again.
func isMarked(t *testing.T, frame []byte) bool {
	t.Helper()
	hv, _, err := payload.DecodeHeader(frame)
	if err != nil {
		t.Fatal(err)
	}
	return sentAgain(hv.Flags())
}

// fakeLink is a transport that records what it is sent, refuses sends to
// the peers in refuse (as an unknown peer), and hands back back when it is
// closed with CloseReclaim.
type fakeLink struct {
	mu     sync.Mutex
	refuse map[string]bool
	items  map[string][]transport.Item
	back   map[string][]transport.Item
	closed bool
	// reclaimed is set by CloseReclaim: it closed without waiting for
	// answers to its crash notice.
	reclaimed bool
}

func (f *fakeLink) Local() string { return "g" }

func (f *fakeLink) Send(to string, it transport.Item) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return transport.ErrClosed
	case f.refuse[to]:
		return transport.ErrUnknownPeer
	}
	if f.items == nil {
		f.items = map[string][]transport.Item{}
	}
	f.items[to] = append(f.items[to], it)
	return nil
}

// seqs returns the sequence numbers of what peer to was sent.
func (f *fakeLink) seqs(to string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []byte
	for _, it := range f.items[to] {
		hv, _, err := payload.DecodeHeader(it.Data)
		if err != nil {
			return append(out, 0)
		}
		out = append(out, byte(hv.Seq()))
	}
	return out
}

func (f *fakeLink) WaitRoom(context.Context, string) error { return nil }
func (f *fakeLink) Peers() []string                        { return nil }
func (f *fakeLink) Pending() (int, int)                    { return 0, 0 }
func (f *fakeLink) Leave()                                 {}
func (f *fakeLink) Close(bool) error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeLink) CloseReclaim() map[string][]transport.Item {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.reclaimed = true
	back := map[string][]transport.Item{}
	for peer, items := range f.back {
		back[peer] = items
	}
	return back
}
