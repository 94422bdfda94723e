package tests

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport/tcp"
)

// seqSink keeps the numbers it is told, in the order they ran.
type seqSink struct{ Got []int }

type seqItem struct{ I int }
type seqGot struct{}

// burster's handler Tells the sink numbers From..From+N-1, in order.
type burster struct{}

type burst struct{ From, N int }

func backlogKinds(h *actor.Host) {
	s := actor.NewKind("seqsink", func(*actor.Context, string) (*seqSink, error) { return &seqSink{}, nil })
	actor.Handle(s, func(_ *actor.Context, k *seqSink, m seqItem) error { k.Got = append(k.Got, m.I); return nil })
	actor.HandleRequest(s, func(_ *actor.Context, k *seqSink, _ seqGot) ([]int, error) { return slices.Clone(k.Got), nil })
	h.Register(s)
	b := actor.NewKind("burster", func(*actor.Context, string) (*burster, error) { return &burster{}, nil })
	actor.HandleRequest(b, func(c *actor.Context, _ *burster, m burst) (int, error) {
		failed := 0
		for i := m.From; i < m.From+m.N; i++ {
			if actor.Tell(c, c.Host(), actor.Ref{Kind: "seqsink", ID: "y"}, seqItem{I: i}) != nil {
				failed++
			}
		}
		return failed, nil
	})
	h.Register(b)
}

// A host whose link to another holds as much as the transport's hard bound
// allows (the other host takes nothing: the link is cut) does not send
// more: a handler's Tells past the bound are refused (counted in
// Stats.LinkRefused, the sender's observer told RejectFull), never
// stamped, so they leave no gap. Once the link is back, every Tell that was
// accepted runs once, in order, and later Tells run too (a lost stamp
// would hold them for good).
func TestAHandlersTellsPastTheLinksBoundAreRefusedAndLeaveNoGap(t *testing.T) {
	net := localnet.New(localnet.Options{})
	const bound = 256
	att := newTLSAttacher(tcp.Options{MaxPendingItems: bound, HighItems: bound / 2, InboundItems: 64})
	rejected := &rejectLog{}
	a, b := startPair(t, actor.Config{Transport: att, Store: net.Store, Membership: net.Membership,
		Observer: rejected, SendTimeout: 30 * time.Second}, backlogKinds)
	ctx := context.Background()
	x, y := actor.Ref{Kind: "burster", ID: "x"}, actor.Ref{Kind: "seqsink", ID: "y"}
	if _, err := actor.Ask[seqGot, []int](ctx, b, y, seqGot{}); err != nil { // activates y on b
		t.Fatal(err)
	}
	if _, err := actor.Ask[burst, int](ctx, a, x, burst{}); err != nil { // and x on a
		t.Fatal(err)
	}
	cut := func(on bool) {
		att.Transport("a").Cut("b", on)
		att.Transport("b").Cut("a", on)
	}
	cut(true)
	const n = 4 * bound
	if _, err := actor.Ask[burst, int](ctx, a, x, burst{From: 0, N: n}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "Tells refused past the bound", func() bool { return a.Stats().LinkRefused >= n-bound })
	refused := a.Stats().LinkRefused
	if refused > n {
		t.Fatalf("%d items refused, more than the %d Tells", refused, n)
	}
	if got := rejected.count(actor.RejectFull); got < int(n-bound) {
		t.Fatalf("the observer heard of %d refused Tells, want at least %d", got, n-bound)
	}
	cut(false)
	testutil.WaitFor(t, "b to take what waits on the link", func() bool {
		_, out := att.Transport("a").Pending()
		return out == 0 && !att.Transport("a").Backlogged("b")
	})
	const later = 50
	if _, err := actor.Ask[burst, int](ctx, a, x, burst{From: n, N: later}); err != nil {
		t.Fatal(err)
	}
	var got []int
	defer func() {
		if t.Failed() {
			t.Logf("sink: %d numbers, last %v; a: %+v; observer %s", len(got), got[max(len(got)-3, 0):], a.Stats(), rejected)
		}
	}()
	testutil.WaitForWithin(t, "the later Tells to run", 20*time.Second, func() bool {
		var err error
		got, err = actor.Ask[seqGot, []int](ctx, b, y, seqGot{})
		return err == nil && len(got) > 0 && got[len(got)-1] == n+later-1
	})
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("the sink's numbers are out of order or repeated: %v", got)
	}
	// Those of the burst that the link took ran, in order — the first ones:
	// once at its bound the link took none until the peer was back — and
	// every other one was refused, with the observer told.
	first := len(got) - later
	for i, g := range got {
		if want := i + (n-first)*btoi(i >= first); g != want {
			t.Fatalf("the sink's number %d is %d, want %d: %v", i, g, want, got)
		}
	}
	if first < bound/2 || first > bound || int64(n-first) > a.Stats().LinkRefused || rejected.count(actor.RejectFull) != n-first {
		t.Fatalf("%d of %d Tells ran, %d items refused, the observer told of %d", first, n, a.Stats().LinkRefused, rejected.count(actor.RejectFull))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// count returns how many rejections of reason were seen.
func (r *rejectLog) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[reason]
}
