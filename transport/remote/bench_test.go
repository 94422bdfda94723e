package remote_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	paremote "github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/remote"
)

// countSink counts deliveries.
type countSink struct{ n atomic.Int64 }

func (c *countSink) Deliver(string, transport.Item)  { c.n.Add(1) }
func (c *countSink) Returned(string, transport.Item) {}
func (c *countSink) Event(transport.Event)           {}

// BenchmarkSendLoopback: pipelined Sends of 100-byte frames from one host
// to another over 127.0.0.1 (session layer, protoactor remote, gRPC), with
// flow control; the clock stops when the last one was delivered. Beside it,
// raw: protoactor remote's Send of the same bytes (a registered
// wrapperspb.BytesValue) to a process on another actor system, without
// a session layer.
func BenchmarkSendLoopback(b *testing.B) {
	needProcessPerHost(b)
	b.Run("berth", func(b *testing.B) {
		c := newCluster(remote.Options{})
		recv := &countSink{}
		r := c.start(b, "r", recv)
		s := c.start(b, "s", &countSink{})
		testutil.WaitFor(b, "link up", func() bool { return len(s.Peers()) == 1 && len(r.Peers()) == 1 })
		data := make([]byte, 100)
		ctx := context.Background()
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		b.ResetTimer()
		for range b.N {
			if err := s.WaitRoom(ctx, "r"); err != nil {
				b.Fatal(err)
			}
			if err := s.Send("r", transport.Item{Kind: transport.Frame, Data: data}); err != nil {
				b.Fatal(err)
			}
		}
		testutil.WaitForWithin(b, "all delivered", time.Minute, func() bool { return recv.n.Load() == int64(b.N) })
		b.StopTimer()
		_ = s.Close(false)
		_ = r.Close(false)
	})
	b.Run("raw-protoactor", func(b *testing.B) {
		var got atomic.Int64
		start := func(recv bool) (*actor.ActorSystem, *paremote.Remote) {
			sys := actor.NewActorSystem(actor.WithLoggerFactory(discardLogger))
			r := paremote.NewRemote(sys, paremote.Configure("127.0.0.1", 0, paremote.WithEndpointWriterQueueSize(1024)))
			r.Start()
			if recv {
				_, _ = sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
					if _, ok := ctx.Message().(*wrapperspb.BytesValue); ok {
						got.Add(1)
					}
				}), "sink")
			}
			return sys, r
		}
		rsys, rrem := start(true)
		ssys, srem := start(false)
		target := actor.NewPID(rsys.Address(), "sink")
		data := make([]byte, 100)
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		b.ResetTimer()
		for range b.N {
			ssys.Root.Send(target, &wrapperspb.BytesValue{Value: data})
		}
		testutil.WaitForWithin(b, "all delivered", time.Minute, func() bool { return got.Load() == int64(b.N) })
		b.StopTimer()
		srem.Shutdown(true)
		rrem.Shutdown(true)
	})
}
