package tests

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	paactor "github.com/asynkron/protoactor-go/actor"
	paremote "github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
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

// pair starts hosts a and b over transport/tcp (each its own listener on
// loopback, in this process; mutual TLS unless insecure) with a shared
// in-memory store and membership, and activates the object on b.
func pair(b *testing.B, insecure bool) (a, bh *actor.Host, ref actor.Ref) {
	net := localnet.New(localnet.Options{})
	var att transport.Attacher = newTLSAttacher(tcp.Options{})
	if insecure {
		att = tcp.New(tcp.Options{Insecure: true})
	}
	a, bh = startPair(b, actor.Config{Transport: att, Store: net.Store, Membership: net.Membership},
		func(h *actor.Host) { h.Register(benchKind()) })
	ref = actor.Ref{Kind: "bench", ID: "one"}
	if _, err := actor.Ask[benchGet, int](context.Background(), bh, ref, benchGet{}); err != nil { // activates on b
		b.Fatal(err)
	}
	return a, bh, ref
}

// tlsModes runs f with TLS on, then off (the cost of TLS itself).
func tlsModes(b *testing.B, f func(b *testing.B, insecure bool)) {
	b.Run("tls=on", func(b *testing.B) { f(b, false) })
	b.Run("tls=off", func(b *testing.B) { f(b, true) })
}

// BenchmarkTCPTellPipelined: Tells from host a to an object on host b over
// transport/tcp (loopback, one process), one goroutine; the clock stops
// when the object ran them all.
func BenchmarkTCPTellPipelined(b *testing.B) {
	tlsModes(b, func(b *testing.B, insecure bool) {
		a, _, ref := pair(b, insecure)
		benchTells(b, a, ref)
	})
}

// BenchmarkTCPAsk: one Ask at a time from host a to an object on host b
// over transport/tcp: a round trip.
func BenchmarkTCPAsk(b *testing.B) {
	tlsModes(b, func(b *testing.B, insecure bool) {
		a, _, ref := pair(b, insecure)
		benchAsks(b, a, ref)
	})
}

// benchTells times b.N Tells of benchInc from h to the bench object ref,
// one goroutine, until the object ran them all.
func benchTells(b *testing.B, h *actor.Host, ref actor.Ref) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := actor.Tell(ctx, h, ref, benchInc{}); err != nil {
			b.Fatal(err)
		}
	}
	if n, err := actor.Ask[benchGet, int](ctx, h, ref, benchGet{}); err != nil || n != b.N {
		b.Fatalf("count %d, %v; want %d", n, err, b.N)
	}
}

// benchAsks times b.N Asks from h to the bench object ref, one at a time.
func benchAsks(b *testing.B, h *actor.Host, ref actor.Ref) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := actor.Ask[benchGet, int](ctx, h, ref, benchGet{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawProtoRemoteRequestFuture is a point of comparison for
// BenchmarkTCPAsk:
// protoactor-go's RequestFuture to an actor on another actor system over
// its remote (gRPC on loopback), answering with the same kind of message.
func BenchmarkRawProtoRemoteRequestFuture(b *testing.B) {
	if testutil.Race {
		b.Skip("several protoactor remotes in one process race on gRPC's global logger inside protoactor; run without -race")
	}
	rsys, rrem := rawSystem()
	ssys, srem := rawSystem()
	defer srem.Shutdown(true)
	defer rrem.Shutdown(true)
	rawEcho(rsys)
	benchRawRequests(b, ssys, paactor.NewPID(rsys.Address(), "echo"))
}

// rawSystem starts a protoactor-go actor system with remote on a free
// loopback port, its logs discarded.
func rawSystem() (*paactor.ActorSystem, *paremote.Remote) {
	discard := func(*paactor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }
	sys := paactor.NewActorSystem(paactor.WithLoggerFactory(discard))
	r := paremote.NewRemote(sys, paremote.Configure("127.0.0.1", 0, paremote.WithEndpointWriterQueueSize(1024)))
	r.Start()
	return sys, r
}

// rawEcho spawns the baselines' actor, "echo" on sys: it answers every
// BytesValue with one, as berth's bench object answers benchGet.
func rawEcho(sys *paactor.ActorSystem) error {
	n := 0
	_, err := sys.Root.SpawnNamed(paactor.PropsFromFunc(func(ctx paactor.Context) {
		if _, ok := ctx.Message().(*wrapperspb.BytesValue); ok {
			n++
			ctx.Respond(&wrapperspb.BytesValue{Value: []byte{byte(n)}})
		}
	}), "echo")
	return err
}

// benchRawRequests times b.N RequestFutures from sys to target, one at a
// time, after one untimed.
func benchRawRequests(b *testing.B, sys *paactor.ActorSystem, target *paactor.PID) {
	req := []byte("get")
	if _, err := sys.Root.RequestFuture(target, &wrapperspb.BytesValue{Value: req}, 10*time.Second).Result(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := sys.Root.RequestFuture(target, &wrapperspb.BytesValue{Value: req}, 10*time.Second).Result(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPRelocate moves one object with 1 KiB of state back and forth
// between two hosts over transport/tcp (TLS on loopback, one process), on
// the in-memory store and on pgstore: the whole Relocate call per op, and
// the pause (Host.Pauses) percentiles.
func BenchmarkTCPRelocate(b *testing.B) {
	b.Run("store=memory", func(b *testing.B) {
		net := localnet.New(localnet.Options{})
		benchTCPRelocate(b, net.Store, net.Membership)
	})
	b.Run("store=postgres", func(b *testing.B) {
		store, members, closePG := openPostgres(b, pgtest.New(b).URL)
		defer closePG()
		benchTCPRelocate(b, store, members)
	})
}

func benchTCPRelocate(b *testing.B, store relocation.Store, members membership.Membership) {
	att := newTLSAttacher(tcp.Options{})
	var hs []*actor.Host
	for _, name := range []string{"a", "b"} {
		h, err := actor.NewHost(actor.Config{Name: name, Transport: att, Store: store, Membership: members, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		h.Register(tallyKind())
		if err := h.Start(); err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		hs = append(hs, h)
	}
	testutil.WaitFor(b, "the hosts to know each other", func() bool { return len(hs[0].Peers()) == 1 && len(hs[1].Peers()) == 1 })
	ctx := context.Background()
	ref := actor.Ref{Kind: "tally", ID: "moving"}
	pad := strings.Repeat("x", 1024)
	if err := actor.Tell(ctx, hs[0], ref, numbered{Sender: pad, Seq: 1}); err != nil { // activates on a, with ~1 KiB of state
		b.Fatal(err)
	}
	if _, err := actor.Ask[readTally, tally](ctx, hs[0], ref, readTally{}); err != nil {
		b.Fatal(err)
	}
	hs[0].Pauses()
	where := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := hs[where].Relocate(ctx, ref, hs[1-where].Name()); err != nil {
			b.Fatal(err)
		}
		where = 1 - where
	}
	b.StopTimer()
	p := append(hs[0].Pauses(), hs[1].Pauses()...)
	slices.Sort(p)
	if len(p) > 0 {
		b.ReportMetric(float64(p[len(p)/2].Microseconds()), "pause-p50-µs")
		b.ReportMetric(float64(p[len(p)*99/100].Microseconds()), "pause-p99-µs")
	}
}
