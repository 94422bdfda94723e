package actor

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// spyStore records the stack of every Location Store call that runs on a
// goroutine where no store call may run (the host-to-host seam,
// docs/architecture.md, "Packages"): a transport's delivery goroutine, or a goroutine that is
// granting a job permit (which may be any goroutine that freed one,
// including a transport's).
type spyStore struct {
	relocation.Store
	mu  sync.Mutex
	bad []string
	n   int
}

// forbidden are the frames of goroutines that must not wait for the store.
var forbidden = []string{
	"transport/inproc.(*link).run", // a transport's delivery goroutine
	"(*outbox).Granted(",           // a permit being granted
}

func (s *spyStore) check() {
	buf := make([]byte, 64<<10)
	st := string(buf[:runtime.Stack(buf, false)])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	for _, f := range forbidden {
		if strings.Contains(st, f) {
			s.bad = append(s.bad, st)
			return
		}
	}
}

func (s *spyStore) Get(ctx context.Context, obj relocation.Object) (relocation.Row, error) {
	s.check()
	return s.Store.Get(ctx, obj)
}

func (s *spyStore) Reserve(ctx context.Context, obj relocation.Object, host string) (relocation.Row, error) {
	s.check()
	return s.Store.Reserve(ctx, obj, host)
}

func (s *spyStore) Commit(ctx context.Context, obj relocation.Object, expect relocation.Ownership) (relocation.Row, error) {
	s.check()
	return s.Store.Commit(ctx, obj, expect)
}

func (s *spyStore) NewOwner(ctx context.Context, obj relocation.Object, expect relocation.Ownership, newHost string) (relocation.Row, error) {
	s.check()
	return s.Store.NewOwner(ctx, obj, expect, newHost)
}

func (s *spyStore) Preserve(ctx context.Context, obj relocation.Object, expect relocation.Ownership, order []byte) (relocation.Row, error) {
	s.check()
	return s.Store.Preserve(ctx, obj, expect, order)
}

func (s *spyStore) Delete(ctx context.Context, obj relocation.Object, expect relocation.Ownership) error {
	s.check()
	return s.Store.Delete(ctx, obj, expect)
}

func (s *spyStore) Lease(ctx context.Context, host string) (relocation.Lease, bool, error) {
	s.check()
	return s.Store.Lease(ctx, host)
}

func (s *spyStore) Expire(host string) { s.Store.(*relocation.MemoryStore).Expire(host) }

// Spread is a message whose handler Tells N new counters (ids Base+i).
type Spread struct {
	Base string
	N    int
}

// No Location Store call runs on a transport's delivery goroutine nor on
// a goroutine granting a job permit: under traffic between three hosts
// with few permits (grants happen on whatever goroutine frees one),
// handlers' sends to new objects, moves, and a host that leaves (its
// messages are forwarded, its objects looked up again), every store call
// the hosts make is checked where it runs.
func TestNoStoreCallRunsOnATransportOrPermitGrantingGoroutine(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	spy := &spyStore{Store: relocation.NewMemoryStore(nil)}
	n := NewNetwork(spy)
	g := newGates()
	kind := func() *Kind[Counter] {
		k := movableKind(g)
		Handle(k, func(ctx *Context, _ *Counter, m Spread) error {
			for i := range m.N {
				if err := Tell(ctx, ctx.Host(), Ref{"counter", m.Base + itoa(i)}, Inc{By: 1}); err != nil {
					return err
				}
			}
			return nil
		})
		return k
	}
	var hs []*Host
	for _, name := range []string{"a", "b", "c"} {
		hs = append(hs, startHost(t, n.With(Config{Name: name, Logger: quietLogger(), MaxQueuedApplicationJobs: 2}), kind()))
	}
	waitViews(t, hs...)
	const objects = 40
	ref := func(i int) Ref { return Ref{"counter", itoa(i)} }
	for i := range objects {
		if err := Tell(bg, hs[i%3], ref(i), Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				from := hs[s%2] // a and b: c leaves
				_ = Tell(bg, from, ref((s*7+k)%objects), Spread{Base: "new-" + itoa(s) + "-" + itoa(k) + "-", N: 3})
			}
		}()
	}
	for m := range 30 {
		i := rng.IntN(objects)
		loc, err := hs[0].Locate(bg, ref(i))
		if err != nil {
			continue
		}
		_ = hs[0].Relocate(bg, ref(i), []string{"a", "b", "c"}[(m+1)%3])
		_ = loc
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := hs[2].Stop(ctx); err != nil {
		t.Errorf("stop c: %v", err)
	}
	for range 10 {
		_ = hs[0].Relocate(bg, ref(rng.IntN(objects)), "b")
	}
	close(stop)
	wg.Wait()
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if spy.n < 100 {
		t.Fatalf("only %d store calls: the workload did not exercise the hosts", spy.n)
	}
	if len(spy.bad) > 0 {
		t.Fatalf("%d of %d store calls ran where none may; the first:\n%s", len(spy.bad), spy.n, spy.bad[0])
	}
}

// The actor package depends on the interfaces between hosts only: no
// transport, store or membership implementation outside the interface
// packages (docs/architecture.md, "Packages"), so a host runs over whatever its Config hands it.
func TestActorImportsNoTransportOrStoreImplementation(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed %q", out)
	}
	for _, d := range deps {
		for _, impl := range []string{
			"github.com/berthrt/berth/transport/", // inproc, remote, transporttest: only transport itself
			"github.com/berthrt/berth/pgstore",
			"github.com/berthrt/berth/internal/localnet",
			"github.com/jackc/pgx",
			"github.com/asynkron/protoactor-go/remote",
		} {
			if strings.HasPrefix(d, impl) {
				t.Errorf("actor depends on %s", d)
			}
		}
	}
}

// rawPeer is a transport participant that is not a host: it sends the
// items a test builds by hand and keeps what it is sent.
type rawPeer struct {
	mu  sync.Mutex
	got []transport.Item
}

func (p *rawPeer) Deliver(_ string, it transport.Item) {
	it.Data = bytes.Clone(it.Data) // lent for the call
	p.mu.Lock()
	p.got = append(p.got, it)
	p.mu.Unlock()
}
func (p *rawPeer) Returned(string, transport.Item) {}
func (p *rawPeer) Event(transport.Event)           {}

// items returns what the peer was sent, but the host's control items
// (its credit and load reports, which its tick sends any peer it heard
// from, whenever the tick comes).
func (p *rawPeer) items() []transport.Item {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []transport.Item
	for _, it := range p.got {
		if it.Kind != transport.Control {
			out = append(out, it)
		}
	}
	return out
}

// A frame off a link that cannot be opened loses nothing silently
// (docs/architecture.md, "Errors"): a malformed header is dropped and counted as a protocol
// rejection; a message whose content type this host does not know is
// failed back to its asker with a ProtocolError; a reply whose content
// type this host does not know still goes to its request (the asker
// decodes it), here one nobody waits for, which is dropped.
func TestFramesOffALinkThatCannotBeOpened(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	g := newGates()
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs}), counterKind(g))
	x, tr := attachRaw(t, n, "x")
	frame := func(h payload.Header, body string) []byte {
		f, err := payload.AppendHeader(nil, &h)
		if err != nil {
			t.Fatal(err)
		}
		return append(f, body...)
	}
	send := func(k transport.Kind, data []byte) {
		if err := tr.Send("b", transport.Item{Kind: k, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	target := payload.Target{Scope: payload.ScopeObject, Name: "counter", ID: "1"}

	// A reply nobody waits for, then a message: both of a content type b
	// does not know.
	send(transport.Reply, frame(payload.Header{ContentType: "application/x-nope", Op: payload.OpID{9}, Flags: flagReply}, "zz"))
	ask := payload.OpID{7}
	send(transport.Frame, frame(payload.Header{Type: "Inc", ContentType: "application/x-nope", Target: target, Op: ask, ReplyTo: "x"}, "zz"))
	waitFor(t, "the error reply", func() bool { return len(x.items()) >= 1 })
	if got := len(x.items()); got != 1 {
		t.Fatalf("x got %d items, want only the one error reply", got)
	}
	it := x.items()[0]
	hv, _, err := payload.DecodeHeader(it.Data)
	if err != nil {
		t.Fatal(err)
	}
	if it.Kind != transport.Reply || hv.Op() != ask || hv.Flags() != flagReply|flagError {
		t.Fatalf("answer to an unknown content type: kind %v, op %x, flags %b", it.Kind, hv.Op(), hv.Flags())
	}
	if rerr := b.decodeWireError(b.pool.Copy(it.Data)); !errors.Is(rerr, payload.ProtocolError) {
		t.Fatalf("answer to an unknown content type: %v, want a ProtocolError", rerr)
	}
	// The reply went to its (absent) request: neither malformed nor
	// failed back like a message.
	if r := obs.snapshot(); r[RejectProtocol] != 0 || r[RejectUndeliverable] != 1 {
		t.Fatalf("rejections %v, want one undeliverable (the message) and no protocol rejection", r)
	}

	send(transport.Frame, []byte{0xff, 0x01, 0x02})
	waitFor(t, "the malformed frame to be counted", func() bool { return obs.snapshot()[RejectProtocol] == 1 })
	if err := Tell(bg, b, Ref{"counter", "1"}, Inc{By: 1}); err != nil { // b still serves
		t.Fatal(err)
	}
}

// Lines that a peer's input causes are rate-limited: a peer that sends a
// thousand malformed frames at once gets them all counted (protocol
// rejections) but logged once per second at most, the next line saying
// how many were held back; the host goes on serving.
func TestMalformedItemsFromAPeerAreCountedAndTheirLogLinesRateLimited(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b := startHost(t, n.With(Config{Name: "b", Logger: logger, Observer: obs}), counterKind(newGates()))
	_, tr := attachRaw(t, n, "x")
	const garbage = 1000
	began := time.Now()
	for range garbage {
		if err := tr.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{0xff, 0x01, 0x02}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every malformed frame to be counted", func() bool { return obs.snapshot()[RejectProtocol] == garbage })
	// One line per peerLogEvery that the frames took to arrive, and one.
	most := 1 + int(time.Since(began)/peerLogEvery)
	if lines := strings.Count(buf.String(), "malformed frame from a link dropped"); lines < 1 || lines > most {
		t.Fatalf("%d log lines for %d malformed frames sent at once in %v; want 1 to %d (one a second)", lines, garbage, time.Since(began), most)
	}
	b.peerLogs.malformed.Reset() // as a second later
	if err := tr.Send("b", transport.Item{Kind: transport.Frame, Data: []byte{0xff}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next line", func() bool { return strings.Contains(buf.String(), "suppressed=") })
	if err := Tell(bg, b, Ref{"counter", "1"}, Inc{By: 1}); err != nil { // b still serves
		t.Fatal(err)
	}
}

// A host takes at most maxIncomingPerPeer moves from one source at once
// (from their Prepare until they open or end): past it a Prepare is
// answered Failed — the source aborts that move, its object stays — and
// nothing is kept for it; once one under way ends, another is taken.
func TestIncomingMovesFromOnePeerAreCapped(t *testing.T) {
	n := NewNetwork(nil)
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), movableKind(newGates()))
	x, tr := attachRaw(t, n, "x")
	moveID := func(i int) relocation.MoveID { return relocation.MoveID{0xee, byte(i >> 8), byte(i)} }
	obj := func(i int) relocation.Object { return relocation.Object{Kind: "counter", ID: "in" + itoa(i)} }
	prepare := func(i int) {
		t.Helper()
		owner := preflightAs(t, n, b, tr, "x", obj(i), moveID(i))
		p := &relocation.Prepare{Move: moveID(i), Object: obj(i), Source: "x", Owner: owner, TotalLen: 8, ChunkCount: 1, CRC: 1}
		if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj(i), p)}); err != nil {
			t.Fatal(err)
		}
	}
	failed := func() (moves []relocation.MoveID) {
		for _, it := range x.items() {
			if it.Kind != transport.Record {
				continue
			}
			if _, r, err := relocation.DecodeRecord(it.Data); err == nil {
				if f, ok := r.(*relocation.Failed); ok {
					moves = append(moves, f.Move)
				}
			}
		}
		return moves
	}
	for i := 0; i <= maxIncomingPerPeer; i++ {
		prepare(i)
	}
	waitFor(t, "the Prepare past the cap to be refused", func() bool { return len(failed()) == 1 })
	if f := failed(); f[0] != moveID(maxIncomingPerPeer) {
		t.Fatalf("refused %v; want only the move past the cap, %v", f, moveID(maxIncomingPerPeer))
	}
	// One ends (its source aborts it): one more is taken, the next refused.
	abort := &relocation.Abort{Move: moveID(0), Reason: "test"}
	if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj(0), abort)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the aborted move to end", func() bool {
		b.moves.mu.Lock()
		defer b.moves.mu.Unlock()
		return b.moves.incoming["x"] == maxIncomingPerPeer-1
	})
	prepare(maxIncomingPerPeer + 1)
	prepare(maxIncomingPerPeer + 2)
	waitFor(t, "the next Prepare past the cap to be refused", func() bool { return len(failed()) == 2 })
	if f := failed(); f[1] != moveID(maxIncomingPerPeer+2) {
		t.Fatalf("refused %v; want the move past the cap again, %v", f, moveID(maxIncomingPerPeer+2))
	}
}

// A move comes from the object's owner on its own link: a Prepare from
// peer x naming another host as its source, or as the owner, is answered
// Failed and nothing is kept for it; the same Prepare naming x is taken.
func TestAPrepareNamingAnotherSourceThanItsLinkIsRefused(t *testing.T) {
	n := NewNetwork(nil)
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), movableKind(newGates()))
	x, tr := attachRaw(t, n, "x")
	obj := relocation.Object{Kind: "counter", ID: "claimed"}
	prepare := func(id byte, source, owner string) relocation.MoveID {
		t.Helper()
		mv := relocation.MoveID{0xfa, id}
		o := relocation.Ownership{Host: owner}
		if source == "x" && owner == "x" {
			o = preflightAs(t, n, b, tr, "x", obj, mv)
		}
		p := &relocation.Prepare{Move: mv, Object: obj, Source: source, Owner: o, TotalLen: 8, ChunkCount: 1, CRC: 1}
		if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, p)}); err != nil {
			t.Fatal(err)
		}
		return mv
	}
	failed := func(mv relocation.MoveID) bool {
		for _, it := range x.items() {
			if it.Kind != transport.Record {
				continue
			}
			if _, r, err := relocation.DecodeRecord(it.Data); err == nil {
				if f, ok := r.(*relocation.Failed); ok && f.Move == mv {
					return true
				}
			}
		}
		return false
	}
	for i, tc := range []struct{ source, owner string }{{"y", "x"}, {"x", "y"}, {"b", "b"}} {
		mv := prepare(byte(i), tc.source, tc.owner)
		waitFor(t, "the Prepare naming source "+tc.source+" and owner "+tc.owner+" to be refused", func() bool { return failed(mv) })
		if b.moves.move(mv) != nil {
			t.Fatalf("a move was kept for the Prepare naming source %s and owner %s", tc.source, tc.owner)
		}
	}
	// The control: the same Prepare naming x is taken (kept, not refused).
	mv := prepare(9, "x", "x")
	waitFor(t, "the Prepare naming x to be taken", func() bool { return b.moves.move(mv) != nil })
	if failed(mv) {
		t.Fatal("the Prepare naming x was refused")
	}
}

// heldGets is a Location Store whose next Get of the object armed (arm)
// waits until released: a store check that ends late.
type heldGets struct {
	relocation.Store
	mu      sync.Mutex
	armed   *relocation.Object
	landed  chan struct{} // closed when the armed Get arrived
	release chan struct{} // closed to let it answer
}

// arm makes the next Get of obj wait for release.
func (s *heldGets) arm(obj relocation.Object) {
	s.mu.Lock()
	s.armed, s.landed, s.release = &obj, make(chan struct{}), make(chan struct{})
	s.mu.Unlock()
}

func (s *heldGets) Get(ctx context.Context, obj relocation.Object) (relocation.Row, error) {
	s.mu.Lock()
	hold := s.armed != nil && *s.armed == obj
	var landed, release chan struct{}
	if hold {
		s.armed, landed, release = nil, s.landed, s.release
	}
	s.mu.Unlock()
	if hold {
		close(landed)
		<-release
	}
	return s.Store.Get(ctx, obj)
}

// The store checks of two Preflights of one object from one source may
// end in either order (each runs off the link, on a lane of its own): a
// check of an earlier move (its source gave up on it) that ends after the
// check of the next move must not hide that move's answer, or its Prepare
// is refused and a drain finds no host for the object.
func TestAnEarlierMovesLatePreflightCheckDoesNotHideTheNextMovesAnswer(t *testing.T) {
	st := &heldGets{Store: relocation.NewMemoryStore(nil)}
	n := NewNetwork(st)
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), movableKind(newGates()))
	x, tr := attachRaw(t, n, "x")
	obj := relocation.Object{Kind: "counter", ID: "xs"}
	earlier, next := relocation.MoveID{0xc1}, relocation.MoveID{0xc2}
	// The earlier move's check waits in the store; the next move's is
	// answered OK meanwhile (preflightAs makes x the owner first).
	st.arm(obj)
	if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, &relocation.Preflight{Move: earlier, Object: obj})}); err != nil {
		t.Fatal(err)
	}
	<-st.landed
	owner := preflightAs(t, n, b, tr, "x", obj, next)
	close(st.release) // the earlier check ends now, after the next one
	waitFor(t, "the earlier move's check to end", func() bool {
		b.moves.mu.Lock()
		defer b.moves.mu.Unlock()
		return b.moves.checking["x"] == 0
	})
	if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj,
		&relocation.Prepare{Move: next, Object: obj, Source: "x", Owner: owner, TotalLen: 8, ChunkCount: 1, CRC: 1})}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next move's Prepare to be taken or refused", func() bool {
		if b.moves.move(next) != nil {
			return true
		}
		for _, it := range x.items() {
			if _, r, err := relocation.DecodeRecord(it.Data); err == nil && r.MoveID() == next {
				if f, ok := r.(*relocation.Failed); ok {
					t.Fatalf("the next move's Prepare was refused: %s", f.Reason)
				}
			}
		}
		return false
	})
}

// preflightAs makes peer name the owner of obj in the Location Store (a
// lease of its own, a row it reserved and committed) and sends b the
// Preflight of move mv on tr, waiting until b answered it OK; it returns
// the ownership the move's Prepare names.
func preflightAs(t *testing.T, n *Network, b *Host, tr transport.Transport, name string, obj relocation.Object, mv relocation.MoveID) relocation.Ownership {
	t.Helper()
	st := n.Store()
	if _, err := st.RenewLease(bg, name, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	row, err := st.Reserve(bg, obj, name)
	if err == nil && row.State != relocation.Active {
		row, err = st.Commit(bg, obj, row.Ownership)
	}
	if err != nil {
		t.Fatal(err)
	}
	pf := &relocation.Preflight{Move: mv, Object: obj}
	if err := tr.Send(b.Name(), transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, pf)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to answer the Preflight of "+obj.String(), func() bool {
		b.moves.mu.Lock()
		defer b.moves.mu.Unlock()
		cp := b.moves.checked[name]
		if cp == nil {
			return false
		}
		_, ok := cp.m[preflightKey{obj: obj, move: mv}]
		return ok
	})
	return row.Ownership
}

// attachRaw attaches a peer named name to n whose items the test reads
// (rawPeer), closed when the test ends.
func attachRaw(t *testing.T, n *Network, name string) (*rawPeer, transport.Transport) {
	t.Helper()
	x := &rawPeer{}
	tr, err := n.Transport.Attach(name, x)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(false) })
	return x, tr
}

// rawLink attaches a peer named name to n that speaks the wire by hand
// (its items are built by the test), closed when the test ends.
func rawLink(t *testing.T, n *Network, name string) transport.Transport {
	t.Helper()
	tr, err := n.Transport.Attach(name, &rawPeer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(false) })
	return tr
}

// sendFrame sends, on tr to host to, an item of kind k carrying a frame
// of Inc{By: 1} for ref with header h (its target and operation id set
// here), encoded with host via's registry.
func sendFrame(t *testing.T, tr transport.Transport, to string, k transport.Kind, via *Host, ref Ref, h payload.Header) {
	t.Helper()
	h.Target = payload.Target{Scope: payload.ScopeObject, Name: ref.Kind, ID: ref.ID}
	h.Op = payload.NewOpID()
	m, err := payload.NewMessage(via.pool, via.reg, h, Inc{By: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if err := tr.Send(to, transport.Item{Kind: k, Data: m.Frame()}); err != nil {
		t.Fatal(err)
	}
}

// A frame on its first hop comes from its origin: one from a peer that
// names another host as its origin (whose sequence numbers order the
// object's messages) is refused and counted, and runs nothing; the same
// frame naming the peer itself runs.
func TestAFirstHopFrameNamingAnotherOriginIsRefused(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs}), counterKind(newGates()))
	tr := rawLink(t, n, "x")
	ref := Ref{"counter", "forged"}
	send := func(origin string) {
		t.Helper()
		sendFrame(t, tr, "b", transport.Frame, b, ref, payload.Header{Origin: origin})
	}
	for _, origin := range []string{"a", "b", ""} {
		send(origin)
	}
	waitFor(t, "the forged frames to be refused", func() bool { return obs.snapshot()[RejectProtocol] == 3 })
	send("x")
	waitFor(t, "x's own frame to run", func() bool {
		c, err := Ask[Get, int](bg, b, ref, Get{})
		return err == nil && c == 1
	})
	if got := obs.snapshot()[RejectProtocol]; got != 3 {
		t.Fatalf("%d frames refused, want 3", got)
	}
}

// A bounce comes back to the message's origin: one carrying another
// origin's message is dropped, counted — routed, it would go on as the
// receiving host's own. The peer's own bounce is routed again.
func TestABounceOfAnotherOriginsMessageIsRefused(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs}), counterKind(newGates()))
	tr := rawLink(t, n, "x")
	ref := Ref{"counter", "bounced"}
	bounce := func(origin string) {
		t.Helper()
		sendFrame(t, tr, "b", transport.Bounce, b, ref, payload.Header{Origin: origin, Hops: 1})
	}
	for _, origin := range []string{"x", "a", ""} {
		bounce(origin)
	}
	waitFor(t, "the bounces of other origins to be refused", func() bool { return obs.snapshot()[RejectProtocol] == 3 })
	bounce("b")
	waitFor(t, "b's own bounced message to run", func() bool {
		c, err := Ask[Get, int](bg, b, ref, Get{})
		return err == nil && c == 1
	})
	if got := obs.snapshot()[RejectProtocol]; got != 3 {
		t.Fatalf("%d bounces refused, want 3", got)
	}
}

// A move's relocation records come from its peer only: a record of
// another peer for a move under way (here an Abort, which would end it)
// is dropped, counted, and the move goes on with its peer.
func TestARelocationRecordFromAnotherPeerThanTheMovesIsDropped(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs}), movableKind(newGates()))
	x, y := rawLink(t, n, "x"), rawLink(t, n, "y")
	obj := relocation.Object{Kind: "counter", ID: "moving"}
	move := relocation.MoveID{7}
	send := func(tr transport.Transport, rec relocation.Record) {
		t.Helper()
		if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, rec)}); err != nil {
			t.Fatal(err)
		}
	}
	// x starts a move of obj to b (its record never comes: the move waits).
	owner := preflightAs(t, n, b, x, "x", obj, move)
	send(x, &relocation.Prepare{Move: move, Object: obj, Source: "x", Owner: owner, TotalLen: 8, ChunkCount: 1})
	waitFor(t, "b to take the move", func() bool { return b.moves.move(move) != nil })
	send(y, &relocation.Abort{Move: move, Reason: "forged"})
	waitFor(t, "y's record to be dropped", func() bool { return obs.snapshot()[RejectProtocol] == 1 })
	if d := b.moves.move(move); d == nil || d.peer != "x" {
		t.Fatalf("after another peer's Abort the move is %v; want it under way with x", d)
	}
	// The control: x's own Abort ends it.
	send(x, &relocation.Abort{Move: move, Reason: "by its source"})
	waitFor(t, "x's Abort to end the move", func() bool { return b.moves.move(move) == nil })
}

// A forwarded message names the host that sent it first, and each origin
// takes a place in the object's order state: one naming a host that is no
// member is dropped, counted; one naming a member runs (an object's
// senders are bounded by the membership).
func TestAForwardedFrameNamingAnOriginThatIsNoMemberIsDropped(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs}), counterKind(newGates()))
	c := startHost(t, n.With(Config{Name: "c", Logger: quietLogger()}), counterKind(newGates()))
	waitViews(t, b, c)
	tr := rawLink(t, n, "x")
	ref := Ref{"counter", "forwarded"}
	if err := Tell(bg, b, ref, Inc{By: 0}); err != nil { // activated on b
		t.Fatal(err)
	}
	forward := func(origin string, seq uint64) {
		t.Helper()
		sendFrame(t, tr, "b", transport.Frame, b, ref, payload.Header{Origin: origin, Hops: 1, Epoch: 1, Seq: seq})
	}
	for i := range 100 {
		forward("nobody-"+itoa(i), 1)
	}
	waitFor(t, "the frames of unknown origins to be dropped", func() bool { return obs.snapshot()[RejectProtocol] == 100 })
	forward("c", 1) // a member's (as if forwarded on its behalf)
	waitFor(t, "the member's message to run", func() bool {
		got, err := Ask[Get, int](bg, b, ref, Get{})
		return err == nil && got == 1
	})
	o := b.owners.kinds["counter"].local(ref.ID)
	o.seqMu.Lock()
	senders := o.inbox.Order().Senders()
	o.seqMu.Unlock()
	if senders > 2 { // b (its own Tell and Ask) and c
		t.Fatalf("the object's order knows %d senders; want at most 2 (no unknown origin)", senders)
	}
}

// A host keeps something of an incoming move only for a Prepare whose
// Preflight it answered OK once the Location Store named the sender as
// the object's owner, and that names the ownership the store showed: a
// Preflight of an object the store names another host (or no host) the
// owner of is answered not OK; a Prepare with no Preflight answered, of
// another move than the one answered, or naming another owner generation
// is answered Failed, counted, and nothing is kept for it. The control:
// the Prepare that matches is taken.
func TestAPrepareIsTakenOnlyAfterAPreflightTheStoreConfirmed(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), Observer: obs}), movableKind(newGates()))
	x, tr := attachRaw(t, n, "x")
	send := func(obj relocation.Object, rec relocation.Record) {
		t.Helper()
		if err := tr.Send("b", transport.Item{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, rec)}); err != nil {
			t.Fatal(err)
		}
	}
	// answer returns b's answer to move mv: its PreflightReply, or its
	// Failed if failed is set.
	answer := func(mv relocation.MoveID, failed bool) relocation.Record {
		for _, it := range x.items() {
			if it.Kind != transport.Record {
				continue
			}
			if _, r, err := relocation.DecodeRecord(it.Data); err == nil && r.MoveID() == mv {
				switch r.(type) {
				case *relocation.PreflightReply:
					if !failed {
						return r
					}
				case *relocation.Failed:
					if failed {
						return r
					}
				}
			}
		}
		return nil
	}
	// b's own object, and one no host owns: x's Preflights are answered
	// not OK.
	if err := Tell(bg, b, Ref{"counter", "bs"}, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"bs", "nobodys"} {
		obj := relocation.Object{Kind: "counter", ID: id}
		mv := relocation.MoveID{0xb0, byte(i)}
		send(obj, &relocation.Preflight{Move: mv, Object: obj})
		waitFor(t, "the Preflight of "+id+" answered", func() bool { return answer(mv, false) != nil })
		if r := answer(mv, false).(*relocation.PreflightReply); r.OK {
			t.Fatalf("the Preflight of %s, which x does not own, was answered %+v", id, r)
		}
	}
	// Prepares b must refuse.
	obj := relocation.Object{Kind: "counter", ID: "xs"}
	answered := relocation.MoveID{0xb1}
	owner := preflightAs(t, n, b, tr, "x", obj, answered)
	newer := owner
	newer.OwnerGen++
	for _, tc := range []struct {
		what  string
		move  relocation.MoveID
		owner relocation.Ownership
	}{
		{"another move than the one answered", relocation.MoveID{0xb2}, owner},
		{"another owner generation than the store's", answered, newer}, // uses the answer up
	} {
		before := obs.snapshot()[RejectProtocol]
		send(obj, &relocation.Prepare{Move: tc.move, Object: obj, Source: "x", Owner: tc.owner, TotalLen: 8, ChunkCount: 1, CRC: 1})
		waitFor(t, tc.what+": refused", func() bool { return answer(tc.move, true) != nil && obs.snapshot()[RejectProtocol] > before })
		if b.moves.move(tc.move) != nil {
			t.Fatalf("%s: a move was kept", tc.what)
		}
	}
	// The Prepare that named the answered move used the answer up: the
	// matching Prepare needs a Preflight again.
	again := relocation.MoveID{0xb3}
	owner = preflightAs(t, n, b, tr, "x", obj, again)
	send(obj, &relocation.Prepare{Move: again, Object: obj, Source: "x", Owner: owner, TotalLen: 8, ChunkCount: 1, CRC: 1})
	waitFor(t, "the matching Prepare to be taken", func() bool { return b.moves.move(again) != nil })
	if r := answer(again, true); r != nil {
		t.Fatalf("the matching Prepare was refused: %+v", r)
	}
}
