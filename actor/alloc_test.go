package actor_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/metrics"
)

// An Ask round trip allocates at most 2 times (the decoded values), and
// adding the metrics observer adds no allocation per message. Pools are
// involved and sync.Pool drops items at random under the race detector, so
// this runs in the non-race pass of .ci/run.
func TestAllocsAskRoundTripAndObserverAddsNone(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race; .ci/run runs this test without it")
	}
	measure := func(cfg actor.Config) float64 {
		arm(1 << 40) // the benchmark kind's Inc handler counts down a latch
		h := newBenchHostWith(t, cfg, counterKind())
		defer h.Close()
		ctx := context.Background()
		ref := actor.Ref{Kind: "counter", ID: "one"}
		ask := func() {
			if _, err := actor.Ask[benchGet, int](ctx, h, ref, benchGet{}); err != nil {
				t.Fatal(err)
			}
			if err := actor.Tell(ctx, h, ref, benchInc{N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 100; i++ {
			ask()
		}
		return testing.AllocsPerRun(1000, ask)
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
