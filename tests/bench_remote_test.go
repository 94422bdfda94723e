package tests

import (
	"context"
	"log/slog"
	"testing"
	"time"

	paactor "github.com/asynkron/protoactor-go/actor"
	paremote "github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport/remote"
)

// benchCounter is the benchmarks' object: it counts.
type benchCounter struct{ N int }

type benchInc struct{}
type benchGet struct{}

func benchKind() *actor.Kind[benchCounter] {
	k := actor.NewKind("bench", func(*actor.Context, string) (*benchCounter, error) { return &benchCounter{}, nil })
	actor.Handle(k, func(_ *actor.Context, c *benchCounter, _ benchInc) error { c.N++; return nil })
	actor.HandleRequest(k, func(_ *actor.Context, c *benchCounter, _ benchGet) (int, error) { return c.N, nil })
	return k
}

// remotePair starts hosts a and b over transport/remote (each its own gRPC
// server on loopback, in this process) with a shared in-memory store and
// membership, and activates the object on b.
func remotePair(b *testing.B) (a, bh *actor.Host, ref actor.Ref) {
	if raceEnabled {
		b.Skip("several protoactor remotes in one process race on gRPC's global logger inside protoactor; run without -race")
	}
	net := localnet.New(localnet.Options{})
	att := remote.New(remote.Options{})
	start := func(name string) *actor.Host {
		h, err := actor.NewHost(actor.Config{Name: name, Transport: att, Store: net.Store, Membership: net.Membership, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		h.Register(benchKind())
		if err := h.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close() })
		return h
	}
	bh, a = start("b"), start("a")
	testutil.WaitFor(b, "the hosts to know each other", func() bool { return len(a.Peers()) == 1 && len(bh.Peers()) == 1 })
	ref = actor.Ref{Kind: "bench", ID: "one"}
	if _, err := actor.Ask[benchGet, int](context.Background(), bh, ref, benchGet{}); err != nil { // activates on b
		b.Fatal(err)
	}
	return a, bh, ref
}

// BenchmarkRemoteTellPipelined: Tells from host a to an object on host b
// over transport/remote (gRPC on loopback), one goroutine; the clock stops
// when the object ran them all.
func BenchmarkRemoteTellPipelined(b *testing.B) {
	a, _, ref := remotePair(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := actor.Tell(ctx, a, ref, benchInc{}); err != nil {
			b.Fatal(err)
		}
	}
	if n, err := actor.Ask[benchGet, int](ctx, a, ref, benchGet{}); err != nil || n != b.N {
		b.Fatalf("count %d, %v; want %d", n, err, b.N)
	}
}

// BenchmarkRemoteAsk: one Ask at a time from host a to an object on host
// b over transport/remote: a round trip.
func BenchmarkRemoteAsk(b *testing.B) {
	a, _, ref := remotePair(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := actor.Ask[benchGet, int](ctx, a, ref, benchGet{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawProtoRemoteRequestFuture is the baseline of BenchmarkRemoteAsk:
// protoactor-go's RequestFuture to an actor on another actor system over
// its remote (gRPC on loopback), answering with the same kind of message.
func BenchmarkRawProtoRemoteRequestFuture(b *testing.B) {
	if raceEnabled {
		b.Skip("several protoactor remotes in one process race on gRPC's global logger inside protoactor; run without -race")
	}
	discard := func(*paactor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }
	start := func() (*paactor.ActorSystem, *paremote.Remote) {
		sys := paactor.NewActorSystem(paactor.WithLoggerFactory(discard))
		r := paremote.NewRemote(sys, paremote.Configure("127.0.0.1", 0, paremote.WithEndpointWriterQueueSize(1024)))
		r.Start()
		return sys, r
	}
	rsys, rrem := start()
	ssys, srem := start()
	defer srem.Shutdown(true)
	defer rrem.Shutdown(true)
	n := 0
	_, _ = rsys.Root.SpawnNamed(paactor.PropsFromFunc(func(ctx paactor.Context) {
		if _, ok := ctx.Message().(*wrapperspb.BytesValue); ok {
			n++
			ctx.Respond(&wrapperspb.BytesValue{Value: []byte{byte(n)}})
		}
	}), "counter")
	target := paactor.NewPID(rsys.Address(), "counter")
	req := []byte("get")
	if _, err := ssys.Root.RequestFuture(target, &wrapperspb.BytesValue{Value: req}, 10*time.Second).Result(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := ssys.Root.RequestFuture(target, &wrapperspb.BytesValue{Value: req}, 10*time.Second).Result(); err != nil {
			b.Fatal(err)
		}
	}
}
