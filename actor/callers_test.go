package actor

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The tests of "callers of a failed host learn at once"
// (docs/architecture.md, "Submit and completion"): an Ask whose message
// was handed to a host, and a send waiting for credit or room on the link
// to it, end with ErrPeerFailed (Unavailable) as soon as a failure fact
// about that host is known here — not at their deadlines, which are ten
// minutes here. The tests wait for facts; the deadlines of the waits are
// failure bounds only.

// Hang is a request whose handler never replies until the test releases
// its key (or the host closes).
type Hang struct{ Key string }

// longWait is the deadline of the test's Asks and sends: far past any
// failure bound of the waits.
const longWait = 10 * time.Minute

// hangKind is the counter kind with a request handler that blocks.
func hangKind(g *gates) *Kind[Counter] {
	k := movableKind(g)
	HandleRequest(k, func(ctx *Context, c *Counter, m Hang) (int, error) {
		g.block(ctx, m.Key)
		return c.N, nil
	})
	return k
}

// objectsOn returns n counter objects that run on host h, activated
// through h.
func objectsOn(t *testing.T, h *Host, store relocation.Store, n int) []Ref {
	t.Helper()
	var out []Ref
	for i := 0; len(out) < n && i < 64*n; i++ {
		ref := Ref{"counter", h.Name() + "-" + strconv.Itoa(i)}
		if _, err := Ask[Get, int](bg, h, ref, Get{}); err != nil {
			t.Fatal(err)
		}
		if row, err := store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err == nil && row.Host == h.Name() {
			out = append(out, ref)
		}
	}
	if len(out) < n {
		t.Fatalf("%d objects of %d activated on %s", len(out), n, h.Name())
	}
	return out
}

// asked is an Ask's outcome and when it came.
type asked struct {
	v   int
	err error
	at  time.Time
}

// askAsync asks ref from h (deadline longWait) on a goroutine of its own.
func askAsync[M any](h *Host, ref Ref, msg M) <-chan asked {
	ch := make(chan asked, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, longWait)
		defer cancel()
		v, err := Ask[M, int](ctx, h, ref, msg)
		ch <- asked{v, err, time.Now()}
	}()
	return ch
}

// outcome waits for an Ask's outcome (a minute at most: a failure bound,
// far below the Ask's own deadline).
func outcome(t *testing.T, what string, ch <-chan asked) asked {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%s: no outcome after a minute (its deadline is %v)", what, longWait)
	}
	return asked{}
}

// pendingStill fails the test if the Ask has an outcome already.
func pendingStill(t *testing.T, what string, ch <-chan asked) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s ended early: %v, %v", what, r.v, r.err)
	default:
	}
}

// An Ask whose handler never replies, on a host that is then killed,
// ends with ErrPeerFailed (Unavailable) once the asker's view drops that
// host — from a node and from a gateway alike — long before its
// deadline. The link's end alone (the transport's Gone) is no fact: the
// Ask waits for the membership's word.
func TestAnAskToAHostThatFailsEndsWithUnavailableOnceTheViewDropsIt(t *testing.T) {
	n := NewNetwork(nil)
	gb := newGates()
	cfg := func(name string, gateway bool) Config {
		return n.With(Config{Name: name, Gateway: gateway, RequestTimeout: longWait, Logger: quietLogger()})
	}
	a := startHost(t, cfg("a", false), hangKind(newGates()))
	b := startHost(t, cfg("b", false), hangKind(gb))
	gw := startHost(t, cfg("g", true), hangKind(newGates()))
	waitViews(t, a, b, gw)
	refs := objectsOn(t, b, n.Store(), 2)
	fromNode := askAsync(a, refs[0], Hang{Key: "from a"})
	fromGateway := askAsync(gw, refs[1], Hang{Key: "from g"})
	gb.waitStarted(t, "from a")
	gb.waitStarted(t, "from g")

	// b's process dies: its links end first; its lease has not run out.
	n.Transport.Kill("b")
	waitFor(t, "a and g to hear b's links end", func() bool {
		return a.peers.view.leavingOrGone("b") && gw.peers.view.leavingOrGone("b")
	})
	pendingStill(t, "a's Ask after b's link ended (no failure fact yet)", fromNode)
	pendingStill(t, "g's Ask after b's link ended (no failure fact yet)", fromGateway)

	// The membership reports b's lease expired: a failure fact.
	expired := time.Now()
	n.Membership.Expire("b")
	for _, c := range []struct {
		name string
		h    *Host
		ch   <-chan asked
	}{{"a (a node)", a, fromNode}, {"g (a gateway)", gw, fromGateway}} {
		r := outcome(t, c.name+"'s Ask", c.ch)
		if !errors.Is(r.err, ErrPeerFailed) || !errors.Is(r.err, payload.Unavailable) {
			t.Fatalf("%s's Ask to b: %v, %v; want ErrPeerFailed (Unavailable)", c.name, r.v, r.err)
		}
		if _, ok := c.h.peers.view.member("b"); ok {
			t.Fatalf("%s's Ask ended while its view still listed b", c.name)
		}
		if got := c.h.Stats().RequestsFailedWithPeer; got != 1 {
			t.Fatalf("%s: Stats.RequestsFailedWithPeer = %d, want 1", c.name, got)
		}
		t.Logf("%s's Ask ended %v after b's expiry (its deadline: %v)", c.name, r.at.Sub(expired), longWait)
	}
	_ = b.Close()
}

// A send from outside the handlers that waits for credit on the link to a
// host (its messages are not taken: the link is cut) ends with an error
// wrapping ErrPeerFailed once that host is declared failed — nothing was
// sent — not after SendTimeout (ten minutes here).
func TestASendWaitingForCreditToAHostThatFailsEndsWithErrPeerFailed(t *testing.T) {
	n := NewNetwork(nil)
	cfg := func(name string) Config {
		return n.With(Config{Name: name, SendTimeout: longWait, RequestTimeout: longWait, Logger: quietLogger(),
			PeerInbound: mailbox.Limits{Items: 4, Bytes: 64 << 20}}) // a window of 2 messages
	}
	a := startHost(t, cfg("a"), hangKind(newGates()))
	b := startHost(t, cfg("b"), hangKind(newGates()))
	waitViews(t, a, b)
	ref := objectsOn(t, b, n.Store(), 1)[0]
	n.Break("a", "b") // what a sends waits on the link; no credit comes back
	tells := make(chan error, 1)
	go func() {
		for {
			ctx, cancel := context.WithTimeout(bg, longWait)
			err := Tell(ctx, a, ref, Inc{By: 1})
			cancel()
			if err != nil {
				tells <- err
				return
			}
		}
	}()
	waitFor(t, "a's Tell to wait for credit at b", func() bool { return a.Stats().PeerWaits >= 1 })
	ask := askAsync(a, ref, Get{})
	waitFor(t, "a's Ask to wait for credit at b", func() bool { return a.Stats().PeerWaits >= 2 })
	select {
	case err := <-tells:
		t.Fatalf("a's Tell ended while b was live: %v", err)
	default:
	}
	pendingStill(t, "a's Ask waiting for credit at b", ask)

	expired := time.Now()
	n.Membership.Expire("b")
	select {
	case err := <-tells:
		if !errors.Is(err, ErrPeerFailed) || !errors.Is(err, payload.Unavailable) {
			t.Fatalf("a's Tell waiting for credit at b: %v; want ErrPeerFailed (Unavailable)", err)
		}
		t.Logf("a's Tell ended %v after b's expiry: %v", time.Since(expired), err)
	case <-time.After(time.Minute):
		t.Fatalf("a's Tell still waits for credit a minute after b's expiry (SendTimeout %v)", longWait)
	}
	r := outcome(t, "a's Ask waiting for credit", ask)
	if !errors.Is(r.err, ErrPeerFailed) {
		t.Fatalf("a's Ask waiting for credit at b: %v, %v; want ErrPeerFailed", r.v, r.err)
	}
	if got := a.Stats().RequestsFailedWithPeer; got != 0 {
		t.Fatalf("Stats.RequestsFailedWithPeer = %d, want 0 (no request was handed to b)", got)
	}
	_ = b.Close()
}

// A reply that reached the asker before the failure fact wins; requests
// to other hosts that are live go on untouched and get their replies.
func TestAReplyBeforeTheFactWinsAndRequestsToLiveHostsAreUntouched(t *testing.T) {
	n := NewNetwork(nil)
	gb, gc := newGates(), newGates()
	cfg := func(name string) Config {
		return n.With(Config{Name: name, RequestTimeout: longWait, Logger: quietLogger()})
	}
	a := startHost(t, cfg("a"), hangKind(newGates()))
	b := startHost(t, cfg("b"), hangKind(gb))
	c := startHost(t, cfg("c"), hangKind(gc))
	waitViews(t, a, b, c)
	onB := objectsOn(t, b, n.Store(), 2)
	onC := objectsOn(t, c, n.Store(), 1)[0]
	answered := askAsync(a, onB[0], Hang{Key: "answered"})
	hanging := askAsync(a, onB[1], Hang{Key: "hanging"})
	toC := askAsync(a, onC, Hang{Key: "on c"})
	gb.waitStarted(t, "answered")
	gb.waitStarted(t, "hanging")
	gc.waitStarted(t, "on c")
	gb.release("answered")
	first := outcome(t, "the Ask b answered", answered)

	n.Kill(b)
	if r := outcome(t, "the Ask b never answered", hanging); !errors.Is(r.err, ErrPeerFailed) {
		t.Fatalf("the Ask b never answered: %v, %v; want ErrPeerFailed", r.v, r.err)
	}
	if first.err != nil {
		t.Fatalf("the Ask b answered before it failed: %v; want its reply", first.err)
	}
	if got := a.Stats().RequestsFailedWithPeer; got != 1 {
		t.Fatalf("Stats.RequestsFailedWithPeer = %d, want 1", got)
	}
	pendingStill(t, "the Ask to c, after b failed", toC)
	gc.release("on c")
	if r := outcome(t, "the Ask to c", toC); r.err != nil {
		t.Fatalf("the Ask to c: %v; want its reply (c is live)", r.err)
	}
}

// A failure fact about run R of a host ends exactly the requests whose
// message was last handed to R (and those handed to the host while the
// view did not list it), each once; a reply that took its request first
// wins; a request handed to R after the fact — the two crossed — ends at
// once.
func TestAFailureFactEndsExactlyTheRequestsHandedToThatRunOnce(t *testing.T) {
	h := startHost(t, Config{Name: "a", Logger: quietLogger()}, counterKind(newGates()))
	rq := &h.requests
	member := func(name string, gen uint64) membership.Member {
		return membership.Member{Name: name, LeaseGen: gen, State: membership.Serving}
	}
	h.peers.view.apply(membership.Event{Type: membership.Sync, Members: []membership.Member{member("x", 1), member("y", 1)}})
	type req struct {
		to     peerRun
		fail   bool // ended by the fact about x run 1
		answer bool // a reply comes first
	}
	reqs := []req{
		{to: peerRun{"x", 1}, fail: true},
		{to: peerRun{"x", 1}, answer: true},
		{to: peerRun{"x", 0}, fail: true}, // handed on while the view did not list x
		{to: peerRun{"x", 2}},             // a newer run of x
		{to: peerRun{"y", 1}},
		{}, // on this host
	}
	ops := make([]payload.OpID, len(reqs))
	ps := make([]*pending, len(reqs))
	for i, r := range reqs {
		ops[i], ps[i] = payload.NewOpID(), pendings.Get().(*pending)
		rq.add(ops[i], ps[i])
		if r.to.name != "" {
			rq.handedTo(ops[i], r.to)
		}
		if r.answer {
			rq.complete(ops[i], reply{})
		}
	}
	for _, r := range h.peers.view.apply(membership.Event{Type: membership.Expired, Member: member("x", 1)}) {
		rq.failRun(r)
		rq.failRun(r) // a second scan finds nothing more
	}
	for i, r := range reqs {
		switch {
		case r.fail:
			if len(ps[i].ch) != 1 {
				t.Fatalf("request to %v: %d terminals, want 1", r.to, len(ps[i].ch))
			}
			if got := <-ps[i].ch; !errors.Is(got.err, ErrPeerFailed) {
				t.Fatalf("request to %v ended with %v, want ErrPeerFailed", r.to, got.err)
			}
		case r.answer:
			if got := <-ps[i].ch; got.err != nil {
				t.Fatalf("request to %v answered before the fact ended with %v, want its reply", r.to, got.err)
			}
		default:
			if len(ps[i].ch) != 0 || rq.take(ops[i]) == nil {
				t.Fatalf("request to %v was ended by a fact about x run 1", r.to)
			}
		}
	}
	// The fact and a hand-over crossed: the run is failed already. (What
	// is handed to x now that the view lists no run of it is handed to
	// its failed run.)
	if got := h.peers.view.runOf("x"); got != (peerRun{"x", 1}) {
		t.Fatalf("the run of x after its failure: %v, want its failed run 1", got)
	}
	op, p := payload.NewOpID(), pendings.Get().(*pending)
	rq.add(op, p)
	rq.handedTo(op, h.peers.view.runOf("x"))
	if len(p.ch) != 1 {
		t.Fatal("a request handed to a run already failed did not end at once")
	}
	if got := <-p.ch; !errors.Is(got.err, ErrPeerFailed) {
		t.Fatalf("a request handed to a run already failed ended with %v, want ErrPeerFailed", got.err)
	}
	if got := h.Stats().RequestsFailedWithPeer; got != 3 {
		t.Fatalf("Stats.RequestsFailedWithPeer = %d, want 3", got)
	}
}

// A request of this host queued at a local owner that a move then carries
// to another host (in the move record, past relay-ready) was handed to
// that host: it ends with ErrPeerFailed when that host fails.
func TestARequestAMoveCarriedToAHostThatFailsEndsWithErrPeerFailed(t *testing.T) {
	n := NewNetwork(nil)
	ga, gb := newGates(), newGates()
	cfg := func(name string) Config {
		return n.With(Config{Name: name, RequestTimeout: longWait, Logger: quietLogger()})
	}
	a := startHost(t, cfg("a"), hangKind(ga))
	b := startHost(t, cfg("b"), hangKind(gb))
	waitViews(t, a, b)
	ref := objectsOn(t, a, n.Store(), 1)[0]
	if err := Tell(bg, a, ref, Block{Key: "f1"}); err != nil {
		t.Fatal(err)
	}
	ga.waitStarted(t, "f1")
	if err := Tell(bg, a, ref, Block{Key: "f2"}); err != nil { // busy again when the seal comes
		t.Fatal(err)
	}
	moved := askAsync(a, ref, Hang{Key: "moved"}) // queued: captured by the move
	waitFor(t, "the Ask to be queued behind f2", func() bool { return a.Stats().QueuedApplication >= 2 })
	if err := relocateAtF2sEnd(t, n, a, ga, ref, "b"); err != nil {
		t.Fatal(err)
	}
	gb.waitStarted(t, "moved")
	pendingStill(t, "the Ask the move carried to b", moved)
	n.Kill(b)
	if r := outcome(t, "the Ask the move carried to b", moved); !errors.Is(r.err, ErrPeerFailed) {
		t.Fatalf("the Ask the move carried to b: %v, %v; want ErrPeerFailed", r.v, r.err)
	}
	if got := a.Stats().RequestsFailedWithPeer; got != 1 {
		t.Fatalf("Stats.RequestsFailedWithPeer = %d, want 1", got)
	}
}
