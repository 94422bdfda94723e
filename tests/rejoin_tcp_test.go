package tests

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport/tcp"
)

// TestAGatewaysTellsOnItsOldRunsTCPLinksRunOnceInOrderAfterItJoinsAgain:
// over transport/tcp, a gateway sends a burst of numbered Tells to an
// object on host o, and its link to o is cut while they go (o may have
// taken some without its taking reaching the gateway); it sends more that
// wait on the cut link. The membership then ends the gateway's run, and
// it joins again as a new run on a new listener. What its old run's
// session had not seen taken goes to o again on the new run's link,
// marked, before the Tells sent after the rejoin: every accepted Tell
// runs once and in order — o drops those it had taken already — and
// nothing is counted lost.
func TestAGatewaysTellsOnItsOldRunsTCPLinksRunOnceInOrderAfterItJoinsAgain(t *testing.T) {
	net := localnet.New(localnet.Options{})
	att := newTLSAttacher(tcp.Options{})
	start := func(name string, gateway bool) *actor.Host {
		return startHost(t, actor.Config{Name: name, Gateway: gateway, Transport: att, Store: net.Store, Membership: net.Membership}, backlogKinds)
	}
	o, g := start("o", false), start("g", true)
	testutil.WaitFor(t, "the hosts to know each other", func() bool { return len(o.Peers()) == 1 && len(g.Peers()) == 1 })
	ctx := context.Background()
	y := actor.Ref{Kind: "seqsink", ID: "y"}
	if _, err := actor.Ask[seqGot, []int](ctx, o, y, seqGot{}); err != nil { // activates y on o
		t.Fatal(err)
	}
	var accepted []int
	tell := func(i int) {
		t.Helper()
		if err := actor.Tell(ctx, g, y, seqItem{I: i}); err != nil {
			t.Logf("Tell %d refused (the caller knows): %v", i, err)
			return
		}
		accepted = append(accepted, i)
	}
	cut := func(on bool) {
		att.Transport("o").Cut("g", on)
		att.Transport("g").Cut("o", on)
	}

	const burst, waiting, after = 2000, 50, 50
	for i := range burst {
		tell(i)
	}
	// Asks behind the burst, most of them in flight when the link is cut
	// (some may be answered before): each is answered, or ends with
	// ErrRejoined (Unavailable: its owner had run it from the old run's
	// link), never left to its deadline.
	const asks = 8
	asked := make(chan error, asks)
	var ended atomic.Int64
	for range asks {
		go func() {
			actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			_, err := actor.Ask[seqGot, []int](actx, g, y, seqGot{})
			ended.Add(1)
			asked <- err
		}()
	}
	testutil.WaitFor(t, "every Ask to be under way or answered", func() bool {
		return int64(g.Stats().RequestsInFlight)+ended.Load() == asks
	})
	cut(true)
	for i := burst; i < burst+waiting; i++ {
		tell(i)
	}
	net.Membership.Expire("g")
	testutil.WaitFor(t, "g to join again as a new run", func() bool { return g.Stats().Rejoins == 1 && g.Ready() == nil })
	cut(false) // g's new run has a transport of its own; o's end of the cut ends
	for i := burst + waiting; i < burst+waiting+after; i++ {
		tell(i)
	}
	last := accepted[len(accepted)-1]
	var got []int
	testutil.WaitForWithin(t, "the last Tell to run on o", 30*time.Second, func() bool {
		var err error
		got, err = actor.Ask[seqGot, []int](ctx, o, y, seqGot{})
		return err == nil && slices.Contains(got, last)
	})
	answered, rejoined := 0, 0
	for range asks {
		switch err := <-asked; {
		case err == nil:
			answered++
		case errors.Is(err, payload.Unavailable) && err.Error() == actor.ErrRejoined.Error():
			rejoined++
		default:
			t.Fatalf("an Ask in flight across the rejoin ended with %v", err)
		}
	}
	t.Logf("of %d Asks in flight across the rejoin, %d were answered, %d ended with ErrRejoined", asks, answered, rejoined)
	gs, os := g.Stats(), o.Stats()
	t.Logf("%d Tells accepted, %d ran; g: Rejoins %d, SentAgain %d, LostOnRejoin %d; o: Repeats %d, Late %d",
		len(accepted), len(got), gs.Rejoins, gs.SentAgain, gs.LostOnRejoin, os.Repeats, os.Late)
	if !slices.Equal(got, accepted) {
		i := 0
		for i < min(len(got), len(accepted)) && got[i] == accepted[i] {
			i++
		}
		t.Fatalf("o ran %d Tells, g accepted %d: they differ from #%d (ran %v…, accepted %v…): lost, run twice or out of order",
			len(got), len(accepted), i, got[i:min(i+5, len(got))], accepted[i:min(i+5, len(accepted))])
	}
	if gs.SentAgain < waiting || gs.LostOnRejoin != 0 {
		t.Fatalf("g sent %d messages again (at least the %d that waited on the cut link) and counted %d lost", gs.SentAgain, waiting, gs.LostOnRejoin)
	}
}
