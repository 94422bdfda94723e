package actor_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/metrics"

	"github.com/berthrt/berth/internal/testutil"
)

// An Ask round trip allocates at most 2 times (the decoded values), and
// adding the metrics observer adds no allocation per message. Pools are
// involved and sync.Pool drops items at random under the race detector, so
// this runs in the non-race pass of .ci/run.
func TestAllocsAskRoundTripAndObserverAddsNone(t *testing.T) {
	if testutil.Race {
		t.Skip("sync.Pool drops items at random under -race; .ci/run runs this test without it")
	}
	measure := func(cfg actor.Config) float64 {
		arm(1 << 40) // the benchmark kind's Inc handler counts down a latch
		h := newBenchHostWith(t, cfg, counterKind())
		defer h.Close()
		return allocsPerAskTell(t, h, h)
	}
	plain := measure(actor.Config{})
	observed := measure(actor.Config{Observer: metrics.New(prometheus.NewRegistry())})
	inline := measure(actor.Config{InlineAsk: true})
	t.Logf("allocs per Ask+Tell: plain %.2f, with metrics %.2f, inline %.2f", plain, observed, inline)
	if plain > 2.5 || inline > 2.5 {
		t.Fatalf("Ask+Tell allocates %.2f (inline %.2f) times; want at most 2 (one decoded value each)", plain, inline)
	}
	if observed > plain+0.1 {
		t.Fatalf("the metrics observer adds %.2f allocations per Ask+Tell", observed-plain)
	}
}

// On a Network every message to an object is stamped (its origin's
// sequence number) and checked against the owner's receive order: neither
// adds an allocation — locally, or to an object on another host, where the
// allocations are the codec's, the reply's and the link's: 6 per Ask+Tell
// round trip (the fence-based code before sequence numbers took 9, measured
// with this same test).
func TestAllocsOrderedSendsAddNone(t *testing.T) {
	if testutil.Race {
		t.Skip("sync.Pool drops items at random under -race; .ci/run runs this test without it")
	}
	arm(1 << 40)
	alone := newBenchHostWith(t, actor.Config{}, counterKind())
	defer alone.Close()
	plain := allocsPerAskTell(t, alone, alone)

	n := actor.NewNetwork(nil)
	var hs []*actor.Host
	for _, name := range []string{"a", "b"} {
		h := newBenchHostWith(t, actor.Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership}, counterKind())
		defer h.Close()
		hs = append(hs, h)
	}
	local := allocsPerAskTell(t, hs[0], hs[0])
	remote := allocsPerAskTell(t, hs[1], hs[0])
	t.Logf("allocs per Ask+Tell: alone %.2f, on a network to a local owner %.2f, to an owner on another host %.2f", plain, local, remote)
	if local > plain+0.1 {
		t.Fatalf("ordering adds %.2f allocations per local Ask+Tell", local-plain)
	}
	if remote > 6.1 {
		t.Fatalf("Ask+Tell to another host allocates %.2f times; want at most 6", remote)
	}
}

// allocsPerAskTell activates the counter on host to, then measures the
// allocations of an Ask and a Tell to it from host from.
func allocsPerAskTell(t *testing.T, from, to *actor.Host) float64 {
	return allocsPerAskTellFrom(t, context.Background(), from, to)
}

// allocsPerAskTellFrom is allocsPerAskTell, sending with ctx.
func allocsPerAskTellFrom(t *testing.T, ctx context.Context, from, to *actor.Host) float64 {
	ref := actor.Ref{Kind: "counter", ID: "one"}
	if err := actor.Tell(ctx, to, ref, benchInc{N: 1}); err != nil {
		t.Fatal(err)
	}
	ask := func() {
		if _, err := actor.Ask[benchGet, int](ctx, from, ref, benchGet{}); err != nil {
			t.Fatal(err)
		}
		if err := actor.Tell(ctx, from, ref, benchInc{N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		ask()
	}
	return testing.AllocsPerRun(1000, ask)
}
