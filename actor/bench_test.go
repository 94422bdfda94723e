package actor_test

// Benchmarks of berth's send paths next to their raw protoactor-go
// equivalents, so one `go test -bench . -benchmem ./actor` run compares
// them side by side. Every benchmark waits until the receiving handlers have
// run before its timer stops, and closes its host or stops its actors and
// actor system before it returns, so no goroutine outlives it.
//
// Naming: BenchmarkX measures berth; BenchmarkRawProtoX measures the same
// work done directly with protoactor-go (default mailbox and dispatcher).

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/berthrt/berth/actor"
)

// Messages. Berth sends values (JSON-encoded by the default codec); raw
// protoactor sends pointers, as is usual there.
type (
	benchInc  struct{ N int }
	benchGet  struct{}
	benchNews struct{ N int }
	// benchAskPeer makes the handler Ask another object N times in turn.
	benchAskPeer struct {
		Peer string
		N    int
	}

	rawInc  struct{ N int }
	rawGet  struct{}
	rawNews struct{ N int }
	// rawTrigger makes the requester actor do n round trips with its peer.
	rawTrigger struct{ n int }
)

type benchCounter struct{ n int }

// latch is closed by the last of n hits.
type latch struct {
	left atomic.Int64
	done chan struct{}
}

func newLatch(n int) *latch {
	l := &latch{done: make(chan struct{})}
	l.left.Store(int64(n))
	return l
}

func (l *latch) hit() {
	if l.left.Add(-1) == 0 {
		close(l.done)
	}
}

func (l *latch) wait(b *testing.B, what string) {
	b.Helper()
	select {
	case <-l.done:
	case <-time.After(time.Minute):
		b.Fatalf("timed out waiting for %s: %d of the hits missing", what, l.left.Load())
	}
}

// armed is the latch the handlers of the running benchmark hit. Benchmarks
// run one at a time, so one global serves them all.
var armed atomic.Pointer[latch]

func arm(n int) *latch {
	l := newLatch(n)
	armed.Store(l)
	return l
}

func hit() { armed.Load().hit() }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newBenchHost starts a host with items registered; the caller closes it.
func newBenchHost(b *testing.B, items ...actor.Registrable) *actor.Host {
	b.Helper()
	return newBenchHostWith(b, actor.Config{}, items...)
}

func newBenchHostWith(b testing.TB, cfg actor.Config, items ...actor.Registrable) *actor.Host {
	b.Helper()
	cfg.Logger = discardLogger()
	h, err := actor.NewHost(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Register(items...); err != nil {
		b.Fatal(err)
	}
	if err := h.Start(); err != nil {
		b.Fatal(err)
	}
	return h
}

func closeHost(b *testing.B, h *actor.Host) {
	if err := h.Close(); err != nil {
		b.Error(err)
	}
}

// counterKind counts benchInc into its state (hitting the armed latch),
// answers benchGet with the count, and on benchAskPeer asks the named peer
// benchGet N times, one after another.
func counterKind() *actor.Kind[benchCounter] {
	k := actor.NewKind("counter", func(*actor.Context, string) (*benchCounter, error) {
		return &benchCounter{}, nil
	})
	actor.Handle(k, func(_ *actor.Context, c *benchCounter, m benchInc) error {
		c.n += m.N
		hit()
		return nil
	})
	actor.HandleRequest(k, func(_ *actor.Context, c *benchCounter, _ benchGet) (int, error) {
		return c.n, nil
	})
	actor.Handle(k, func(ctx *actor.Context, _ *benchCounter, m benchAskPeer) error {
		peer := actor.Ref{Kind: "counter", ID: m.Peer}
		for range m.N {
			if _, err := actor.Ask[benchGet, int](ctx, ctx.Host(), peer, benchGet{}); err != nil {
				return err
			}
		}
		hit()
		return nil
	})
	return k
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// rawSystem is a protoactor actor system with a quiet logger and a record
// of the actors spawned through it, so that stop can stop them all and
// wait for each one's Stopped.
type rawSystem struct {
	sys     *pa.ActorSystem
	pids    []*pa.PID
	stopped sync.WaitGroup
}

func newRawSystem() *rawSystem {
	return &rawSystem{sys: pa.NewActorSystem(pa.WithLoggerFactory(func(*pa.ActorSystem) *slog.Logger {
		return discardLogger()
	}))}
}

// spawn starts a rawActor; peer is where it sends requests (may be nil).
func (rs *rawSystem) spawn(peer *pa.PID) *pa.PID {
	rs.stopped.Add(1)
	pid := rs.sys.Root.Spawn(rs.props(peer))
	rs.pids = append(rs.pids, pid)
	return pid
}

func (rs *rawSystem) props(peer *pa.PID) *pa.Props {
	return pa.PropsFromProducer(func() pa.Actor { return &rawActor{peer: peer, stopped: &rs.stopped} })
}

func (rs *rawSystem) stop(b *testing.B) {
	for _, pid := range rs.pids {
		rs.sys.Root.Stop(pid)
	}
	done := make(chan struct{})
	go func() { rs.stopped.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Error("protoactor actors did not stop")
	}
	rs.sys.Shutdown()
}

// rawActor is the raw counterpart of counterKind and of a channel
// subscriber.
type rawActor struct {
	n       int
	peer    *pa.PID
	left    int // round trips still to do for the current trigger
	stopped *sync.WaitGroup
}

func (a *rawActor) Receive(ctx pa.Context) {
	switch m := ctx.Message().(type) {
	case *rawInc:
		a.n += m.N
		hit()
	case *rawNews:
		a.n += m.N
		hit()
	case *rawGet:
		ctx.Respond(a.n)
	case *rawTrigger:
		a.left = m.n
		ctx.Request(a.peer, &rawGet{})
	case int: // the peer's reply to rawGet
		if a.left--; a.left > 0 {
			ctx.Request(a.peer, &rawGet{})
			return
		}
		hit()
	case *pa.Stopped:
		a.stopped.Done()
	}
}

// --- 1. Tell, pipelined, one receiver ---

// BenchmarkTellPipelinedOneOwner Tells b.N messages to one object from one
// goroutine and waits until its handler has run them all.
func BenchmarkTellPipelinedOneOwner(b *testing.B) {
	h := newBenchHost(b, counterKind())
	defer closeHost(b, h)
	benchTellPipelined(b, h, h)
}

// benchTellPipelined activates the counter on host to, then Tells it b.N
// messages from host from, one goroutine, and waits until its handler has
// run them all.
func benchTellPipelined(b *testing.B, from, to *actor.Host) {
	benchTellPipelinedFrom(b, context.Background(), from, to)
}

// benchTellPipelinedFrom is benchTellPipelined, sending with ctx.
func benchTellPipelinedFrom(b *testing.B, ctx context.Context, from, to *actor.Host) {
	b.ReportAllocs()
	ref := actor.Ref{Kind: "counter", ID: "one"}
	arm(1)
	if err := actor.Tell(ctx, to, ref, benchInc{N: 1}); err != nil {
		b.Fatal(err)
	}
	armed.Load().wait(b, "activation")

	l := arm(b.N)
	b.ResetTimer()
	for range b.N {
		if err := actor.Tell(ctx, from, ref, benchInc{N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	l.wait(b, "handlers")
	b.StopTimer()
}

// BenchmarkTellPipelinedToAnotherHost is BenchmarkTellPipelinedOneOwner
// with the object on another host of an in-process Network: each Tell is
// routed (route cache), stamped with its sequence number and queued on the
// link, and the receiving host admits it off the link, in order.
func BenchmarkTellPipelinedToAnotherHost(b *testing.B) {
	_, hs := startBenchNetwork(b, func() actor.Registrable { return counterKind() }, "a", "b")
	benchTellPipelined(b, hs[0], hs[1])
}

// BenchmarkRawProtoSendOneActor is BenchmarkTellPipelinedOneOwner on raw
// protoactor: Root.Send of a fresh pointer to one actor.
func BenchmarkRawProtoSendOneActor(b *testing.B) {
	b.ReportAllocs()
	rs := newRawSystem()
	defer rs.stop(b)
	pid := rs.spawn(nil)

	l := arm(b.N)
	b.ResetTimer()
	for range b.N {
		rs.sys.Root.Send(pid, &rawInc{N: 1})
	}
	l.wait(b, "handlers")
	b.StopTimer()
}

// --- 2. Tell, pipelined, 1,000 receivers ---

const manyOwners = 1000

// BenchmarkTellPipelinedManyOwners Tells b.N messages round robin to 1,000
// already active objects and waits until all have been handled.
func BenchmarkTellPipelinedManyOwners(b *testing.B) {
	b.ReportAllocs()
	h := newBenchHost(b, counterKind())
	defer closeHost(b, h)
	ctx := context.Background()
	refs := make([]actor.Ref, manyOwners)
	l := arm(manyOwners)
	for i, id := range ids("o", manyOwners) {
		refs[i] = actor.Ref{Kind: "counter", ID: id}
		if err := actor.Tell(ctx, h, refs[i], benchInc{N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	l.wait(b, "activations")

	l = arm(b.N)
	b.ResetTimer()
	for i := range b.N {
		if err := actor.Tell(ctx, h, refs[i%manyOwners], benchInc{N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	l.wait(b, "handlers")
	b.StopTimer()
}

// BenchmarkRawProtoSendManyActors is BenchmarkTellPipelinedManyOwners on
// raw protoactor: 1,000 actors, Root.Send round robin.
func BenchmarkRawProtoSendManyActors(b *testing.B) {
	b.ReportAllocs()
	rs := newRawSystem()
	defer rs.stop(b)
	pids := make([]*pa.PID, manyOwners)
	for i := range pids {
		pids[i] = rs.spawn(nil)
	}

	l := arm(b.N)
	b.ResetTimer()
	for i := range b.N {
		rs.sys.Root.Send(pids[i%manyOwners], &rawInc{N: 1})
	}
	l.wait(b, "handlers")
	b.StopTimer()
}

// --- 3. Request/reply round trips, one at a time ---

// BenchmarkAskRoundTrip Asks one active object from outside, sequentially:
// each op is one complete Ask (send, turn, reply, decode).
func BenchmarkAskRoundTrip(b *testing.B) { benchAsk(b, actor.Config{}) }

// BenchmarkAskRoundTripInline is BenchmarkAskRoundTrip with
// Config.InlineAsk: the idle object's turn runs on the asking goroutine.
func BenchmarkAskRoundTripInline(b *testing.B) { benchAsk(b, actor.Config{InlineAsk: true}) }

func benchAsk(b *testing.B, cfg actor.Config) { benchAskFrom(b, context.Background(), cfg) }

// benchAskFrom is benchAsk, asking with ctx.
func benchAskFrom(b *testing.B, ctx context.Context, cfg actor.Config) {
	b.ReportAllocs()
	h := newBenchHostWith(b, cfg, counterKind())
	defer closeHost(b, h)
	ref := actor.Ref{Kind: "counter", ID: "one"}
	if _, err := actor.Ask[benchGet, int](ctx, h, ref, benchGet{}); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	for range b.N {
		if _, err := actor.Ask[benchGet, int](ctx, h, ref, benchGet{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawProtoRequestFuture is BenchmarkAskRoundTrip on raw
// protoactor: Root.RequestFuture(...).Result() to one actor, sequentially.
func BenchmarkRawProtoRequestFuture(b *testing.B) {
	b.ReportAllocs()
	rs := newRawSystem()
	defer rs.stop(b)
	pid := rs.spawn(nil)

	b.ResetTimer()
	for range b.N {
		if _, err := rs.sys.Root.RequestFuture(pid, &rawGet{}, time.Second).Result(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAskFromHandler measures sequential Asks between two objects:
// one Tell from outside makes object A's handler Ask object B b.N times,
// each waiting for its reply before the next. Each op is one Ask from a
// handler; the one outside Tell is amortized over b.N. Compare with
// BenchmarkRawProtoActorToActorRequest.
func BenchmarkAskFromHandler(b *testing.B) {
	b.ReportAllocs()
	h := newBenchHost(b, counterKind())
	defer closeHost(b, h)
	ctx := context.Background()
	a, peer := actor.Ref{Kind: "counter", ID: "a"}, actor.Ref{Kind: "counter", ID: "b"}
	l := arm(2)
	for _, r := range []actor.Ref{a, peer} {
		if err := actor.Tell(ctx, h, r, benchInc{N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	l.wait(b, "activations")

	l = arm(1)
	b.ResetTimer()
	if err := actor.Tell(ctx, h, a, benchAskPeer{Peer: peer.ID, N: b.N}); err != nil {
		b.Fatal(err)
	}
	l.wait(b, "the asking handler")
	b.StopTimer()
}

// BenchmarkRawProtoActorToActorRequest measures sequential request/reply
// round trips between two protoactor actors, driven from outside by one
// message: Root.Send of a trigger to actor A, which then does b.N round
// trips with actor B — ctx.Request(B, &rawGet{}), B answers with
// ctx.Respond, and A's receipt of the reply sends the next request — and
// hits a latch the benchmark waits on after the last. Each op is one
// actor-to-actor round trip (two mailbox deliveries, no future, no blocked
// goroutine); the outside trigger is amortized over b.N.
func BenchmarkRawProtoActorToActorRequest(b *testing.B) {
	b.ReportAllocs()
	rs := newRawSystem()
	defer rs.stop(b)
	peer := rs.spawn(nil)
	a := rs.spawn(peer)

	l := arm(1)
	b.ResetTimer()
	rs.sys.Root.Send(a, &rawTrigger{n: b.N})
	l.wait(b, "the round trips")
	b.StopTimer()
}

// --- 4. Fan-out to 16 subscribers ---

const subscribers = 16

// BenchmarkPublish16Subscribers Publishes b.N messages to a channel with
// 16 subscribers and waits until all 16 × b.N deliveries have been handled.
// One op is one Publish (16 deliveries).
func BenchmarkPublish16Subscribers(b *testing.B) {
	b.ReportAllocs()
	ch := actor.NewChannel("news")
	for range subscribers {
		actor.Subscribe(ch, func(_ *actor.Context, _ benchNews) error {
			hit()
			return nil
		})
	}
	h := newBenchHost(b, ch)
	defer closeHost(b, h)
	ctx := context.Background()

	l := arm(subscribers * b.N)
	b.ResetTimer()
	for range b.N {
		if err := actor.Publish(ctx, h, "news", benchNews{N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	l.wait(b, "deliveries")
	b.StopTimer()
}

// BenchmarkRawProtoSend16Actors is BenchmarkPublish16Subscribers on raw
// protoactor: the same pointer sent to 16 actors with Root.Send.
func BenchmarkRawProtoSend16Actors(b *testing.B) {
	b.ReportAllocs()
	rs := newRawSystem()
	defer rs.stop(b)
	pids := make([]*pa.PID, subscribers)
	for i := range pids {
		pids[i] = rs.spawn(nil)
	}

	l := arm(subscribers * b.N)
	b.ResetTimer()
	for range b.N {
		m := &rawNews{N: 1}
		for _, pid := range pids {
			rs.sys.Root.Send(pid, m)
		}
	}
	l.wait(b, "deliveries")
	b.StopTimer()
}

// --- 5. Activation ---

// BenchmarkActivateNewObject Tells a new object id each op, so each op
// activates an owner (spawns its actor, runs the factory in its first turn)
// and runs one handler; it waits until all b.N handlers have run. The
// objects stay active until the host closes (outside the timer).
func BenchmarkActivateNewObject(b *testing.B) {
	b.ReportAllocs()
	h := newBenchHost(b, counterKind())
	defer closeHost(b, h)
	activateNew(b, h)
}

// activateNew times b.N Tells to new counters on h, until each ran.
func activateNew(b *testing.B, h *actor.Host) {
	ctx := context.Background()
	names := ids("n", b.N)

	l := arm(b.N)
	b.ResetTimer()
	for _, id := range names {
		if err := actor.Tell(ctx, h, actor.Ref{Kind: "counter", ID: id}, benchInc{N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	l.wait(b, "first turns")
	b.StopTimer()
}

// BenchmarkActivateNewObjectOnNetwork is BenchmarkActivateNewObject on a
// host of a two-host Network (the kind placed PlaceLocal): each new
// object is placed, reserved and committed in the Location Store, and
// activated here. Its floor is BenchmarkRawProtoSpawnAndSend.
func BenchmarkActivateNewObjectOnNetwork(b *testing.B) {
	b.ReportAllocs()
	_, hs := startBenchNetwork(b, func() actor.Registrable { return counterKind() }, "a", "b")
	activateNew(b, hs[0])
}

// BenchmarkRawProtoSpawnAndSend is BenchmarkActivateNewObject on raw
// protoactor: Root.Spawn of a new actor and one Root.Send to it per op.
func BenchmarkRawProtoSpawnAndSend(b *testing.B) {
	b.ReportAllocs()
	rs := newRawSystem()
	defer rs.stop(b)
	rs.pids = make([]*pa.PID, 0, b.N)
	props := rs.props(nil)

	l := arm(b.N)
	b.ResetTimer()
	for range b.N {
		rs.stopped.Add(1)
		pid := rs.sys.Root.Spawn(props)
		rs.pids = append(rs.pids, pid)
		rs.sys.Root.Send(pid, &rawInc{N: 1})
	}
	l.wait(b, "first messages")
	b.StopTimer()
}

// --- 6. Memory of idle objects ---

const idleObjects = 100_000

// heapAfterGC returns the live heap after two collections (the second
// empties the sync.Pool victim caches the first one moved them to).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func reportPerObject(b *testing.B, total int64, runs int) {
	b.ReportMetric(float64(total)/float64(runs)/idleObjects, "bytes/owner")
}

// BenchmarkIdleObjectMemory activates 100,000 objects (one Tell each, all
// handled) per op and reports the growth of the live heap per object,
// averaged over the ops. Each op uses a fresh host, closed outside the
// timer; ns/op is the time to activate 100,000 objects.
func BenchmarkIdleObjectMemory(b *testing.B) {
	b.ReportAllocs()
	ctx := context.Background()
	names := ids("idle", idleObjects)
	var grown int64
	b.ResetTimer()
	run := func() {
		b.StopTimer()
		h := newBenchHost(b, counterKind())
		defer b.StartTimer()
		defer closeHost(b, h)
		before := heapAfterGC()
		l := arm(idleObjects)
		b.StartTimer()
		for _, id := range names {
			if err := actor.Tell(ctx, h, actor.Ref{Kind: "counter", ID: id}, benchInc{N: 1}); err != nil {
				b.Fatal(err)
			}
		}
		l.wait(b, "activations")
		b.StopTimer()
		grown += int64(heapAfterGC()) - int64(before)
		if st := h.Stats(); st.OwnersActive != idleObjects {
			b.Fatalf("%d owners active, want %d", st.OwnersActive, idleObjects)
		}
	}
	for range b.N {
		run()
	}
	b.StopTimer()
	reportPerObject(b, grown, b.N)
}

// BenchmarkRawProtoIdleActorMemory is BenchmarkIdleObjectMemory on raw
// protoactor: 100,000 spawned actors that have each handled one message.
func BenchmarkRawProtoIdleActorMemory(b *testing.B) {
	b.ReportAllocs()
	var grown int64
	b.ResetTimer()
	run := func() {
		b.StopTimer()
		rs := newRawSystem()
		defer b.StartTimer()
		defer rs.stop(b)
		rs.pids = make([]*pa.PID, 0, idleObjects)
		props := rs.props(nil)
		before := heapAfterGC()
		l := arm(idleObjects)
		b.StartTimer()
		for range idleObjects {
			rs.stopped.Add(1)
			pid := rs.sys.Root.Spawn(props)
			rs.pids = append(rs.pids, pid)
			rs.sys.Root.Send(pid, &rawInc{N: 1})
		}
		l.wait(b, "first messages")
		b.StopTimer()
		grown += int64(heapAfterGC()) - int64(before)
	}
	for range b.N {
		run()
	}
	b.StopTimer()
	reportPerObject(b, grown, b.N)
}

// BenchmarkTellPipelinedOnNetwork is BenchmarkTellPipelinedOneOwner on a
// host that is on a Network (the owner local): each Tell is also stamped
// with its sequence number and checked against the owner's receive order.
func BenchmarkTellPipelinedOnNetwork(b *testing.B) {
	_, hs := startBenchNetwork(b, func() actor.Registrable { return counterKind() }, "a")
	benchTellPipelined(b, hs[0], hs[0])
}

// BenchmarkAskRoundTripToAnotherHost is BenchmarkAskRoundTrip with the
// object on another host of an in-process Network: request and reply each
// cross a link.
func BenchmarkAskRoundTripToAnotherHost(b *testing.B) {
	b.ReportAllocs()
	_, hs := startBenchNetwork(b, func() actor.Registrable { return counterKind() }, "a", "b")
	ctx := context.Background()
	ref := actor.Ref{Kind: "counter", ID: "one"}
	if _, err := actor.Ask[benchGet, int](ctx, hs[1], ref, benchGet{}); err != nil { // activates on b
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := actor.Ask[benchGet, int](ctx, hs[0], ref, benchGet{}); err != nil {
			b.Fatal(err)
		}
	}
}
