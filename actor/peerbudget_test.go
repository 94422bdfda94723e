package actor

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/relocation"
)

// Test kind for the per-peer budget: an object that records, per sender,
// the numbers it ran, and that a handler can block or use to flood
// another object.

type pbState struct{ Ran map[string][]int }

type PBRec struct {
	Sender string
	Seq    int
}

// PBAskRec is PBRec sent as a request.
type PBAskRec PBRec

type PBHold struct{ Key string }

type PBGet struct{}

// PBFlood makes its handler Tell To N numbered messages from sender
// Sender (a handler's sends never wait for a pause).
type PBFlood struct {
	To     Ref
	Sender string
	N      int
}

// PBAskVia makes its handler Ask To for Seq and report what it got.
type PBAskVia struct {
	To  Ref
	Seq int
}

type PBAskResult struct {
	Got     int
	Err     string
	Backlog bool // errors.Is(err, ErrPeerBacklog) && errors.Is(err, Unavailable)
}

func pbKind(g *gates) *Kind[pbState] {
	k := NewKind("pb", func(*Context, string) (*pbState, error) { return &pbState{Ran: map[string][]int{}}, nil })
	Handle(k, func(ctx *Context, s *pbState, m PBRec) error {
		s.Ran[m.Sender] = append(s.Ran[m.Sender], m.Seq)
		return nil
	})
	HandleRequest(k, func(ctx *Context, s *pbState, m PBAskRec) (int, error) {
		s.Ran[m.Sender] = append(s.Ran[m.Sender], m.Seq)
		return m.Seq, nil
	})
	Handle(k, func(ctx *Context, s *pbState, m PBHold) error { g.block(ctx, m.Key); return nil })
	HandleRequest(k, func(ctx *Context, s *pbState, _ PBGet) (map[string][]int, error) { return s.Ran, nil })
	Handle(k, func(ctx *Context, s *pbState, m PBFlood) error {
		for i := 1; i <= m.N; i++ {
			if err := Tell(ctx, ctx.Host(), m.To, PBRec{Sender: m.Sender, Seq: i}); err != nil {
				return err
			}
		}
		return nil
	})
	HandleRequest(k, func(ctx *Context, s *pbState, m PBAskVia) (PBAskResult, error) {
		got, err := Ask[PBAskRec, int](ctx, ctx.Host(), m.To, PBAskRec{Sender: "asker", Seq: m.Seq})
		r := PBAskResult{Got: got}
		if err != nil {
			r.Err = err.Error()
			r.Backlog = errors.Is(err, ErrPeerBacklog) && errors.Is(err, Unavailable)
		}
		return r, nil
	})
	return k
}

// pbHosts starts hosts a and b on links whose flow-control mark is high
// and whose every delivery waits delay;
// b has 4 job permits and keeps at most bound of a peer's messages.
func pbHosts(t *testing.T, high, bound int, delay time.Duration) (a, b *Host, g *gates) {
	t.Helper()
	n := &Network{localnet.New(localnet.Options{High: high})}
	n.Delay("a", "b", delay)
	g = newGates()
	b = startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), MaxQueuedApplicationJobs: 4,
		PeerInbound: mailbox.Limits{Items: bound, Bytes: 64 << 20}}), pbKind(g))
	a = startHost(t, n.With(Config{Name: "a", Logger: quietLogger(), SendTimeout: time.Minute}), pbKind(g))
	waitViews(t, a, b)
	waitFor(t, "b's window to reach a", func() bool { return a.peers.creditOf("b").winN.Load() == int64(bound/2) })
	return a, b, g
}

// blockOn activates object id on b and blocks its turn: b's four permits
// then go to the next four messages to it, and the rest of a peer's
// messages wait in that peer's budget.
func blockOn(t *testing.T, b *Host, g *gates, id string) Ref {
	t.Helper()
	ref := Ref{"pb", id}
	if err := Tell(bg, b, ref, PBHold{Key: id}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, id)
	return ref
}

func ranOf(t *testing.T, h *Host, ref Ref) map[string][]int {
	t.Helper()
	got, err := Ask[PBGet, map[string][]int](bg, h, ref, PBGet{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A peer's sends from outside the handlers wait for credit: what the peer
// sent and the host keeps never exceeds the window (half the host's
// bound), however slow the object; none is refused, and all run once, in
// order, when the object goes on.
func TestAPeersOutsideSendersWaitForCreditAndNoneIsRefused(t *testing.T) {
	for _, delay := range []time.Duration{0, 2 * time.Millisecond} {
		t.Run("delay="+delay.String(), func(t *testing.T) { outsideSendersWaitForCredit(t, delay) })
	}
}

// outsideSendersWaitForCredit is the test above on links that delay
// every delivery by delay (credit reports and asks included).
func outsideSendersWaitForCredit(t *testing.T, delay time.Duration) {
	const high, bound, total = 16, 64, 2000
	a, b, g := pbHosts(t, high, bound, delay)
	ref := blockOn(t, b, g, "o")
	var sent atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for i := 1; i <= total; i++ {
			if err := Tell(bg, a, ref, PBRec{Sender: "a", Seq: i}); err != nil {
				errc <- err
				return
			}
			sent.Add(1)
		}
		errc <- nil
	}()
	waitFor(t, "a's senders to wait for credit", func() bool { return a.Stats().PeerWaits > 0 })
	ib := b.in.inboundFrom("a")
	// What a sent is what b admitted (its four permits) and what it keeps
	// or has on its way: the window, half of b's bound.
	for range 20 {
		if n, kept := sent.Load(), keptOf(ib); n > bound/2+4 || kept > bound/2 {
			t.Fatalf("a sent %d messages while b was blocked, b keeps %d; want at most %d sent (the window and b's four permits), %d kept",
				n, kept, bound/2+4, bound/2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := b.Stats(); st.PeerRefused != 0 {
		t.Fatalf("b refused %d of a's messages; want none (a's outside senders were paused)", st.PeerRefused)
	}
	g.release("o")
	if err := <-errc; err != nil {
		t.Fatalf("a Tell while paused: %v", err)
	}
	var got []int
	defer func() {
		if t.Failed() {
			t.Logf("ran %d, last %v; b %+v; kept %d; a %+v", len(got), got[max(0, len(got)-5):], b.Stats(), keptOf(ib), a.Stats())
		}
	}()
	waitFor(t, "every message to run", func() bool {
		got = ranOf(t, b, ref)["a"]
		return len(got) >= total
	})
	for i, v := range got {
		if v != i+1 {
			t.Fatalf("ran %d at position %d; want every message once, in order (%d ran)", v, i, len(got))
		}
	}
	if st := b.Stats(); st.PeerRefused != 0 || st.GapsClosed != 0 {
		t.Fatalf("b: %d refused, %d gaps given up on; want none", st.PeerRefused, st.GapsClosed)
	}
	if kept := keptOf(ib); kept != 0 {
		t.Fatalf("b still counts %d of a's messages; want 0", kept)
	}
}

// An outside send that waits for credit longer than SendTimeout fails
// with ErrSendTimeout and was not sent: sending it again once the object
// went on runs it once, in its place.
func TestASendWithoutCreditFailsWithErrSendTimeoutAndSendingAgainIsSafe(t *testing.T) {
	n := &Network{localnet.New(localnet.Options{High: 16})}
	g := newGates()
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger(), MaxQueuedApplicationJobs: 4,
		PeerInbound: mailbox.Limits{Items: 64, Bytes: 64 << 20}}), pbKind(g))
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger(), SendTimeout: 50 * time.Millisecond}), pbKind(g))
	waitViews(t, a, b)
	waitFor(t, "b's window to reach a", func() bool { return a.peers.creditOf("b").winN.Load() == 32 })
	ref := blockOn(t, b, g, "o")
	next := 1
	var err error
	for ; next <= 10_000; next++ {
		if err = Tell(bg, a, ref, PBRec{Sender: "a", Seq: next}); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrSendTimeout) || !errors.Is(err, DeadlineExceeded) {
		t.Fatalf("Tell #%d to a host that has no credit for the sender: %v; want ErrSendTimeout", next, err)
	}
	g.release("o")
	waitFor(t, "credit for a", func() bool { return a.peers.creditOf("b").open(0) })
	total := next + 50
	for i := next; i <= total; i++ { // #next again: it was not sent
		if err := Tell(bg, a, ref, PBRec{Sender: "a", Seq: i}); err != nil {
			t.Fatalf("Tell #%d after the resume: %v", i, err)
		}
	}
	var got []int
	defer func() {
		if t.Failed() {
			t.Logf("ran %d: %v; b %+v", len(got), got, b.Stats())
		}
	}()
	waitFor(t, "every message to run", func() bool {
		got = ranOf(t, b, ref)["a"]
		return len(got) >= total
	})
	if len(got) != total || !slices.IsSorted(got) || got[0] != 1 || got[total-1] != total {
		t.Fatalf("ran %d messages (%v…); want 1..%d once, in order", len(got), got[:min(len(got), 10)], total)
	}
	if st := b.Stats(); st.PeerRefused != 0 {
		t.Fatalf("b refused %d of a's messages; want none", st.PeerRefused)
	}
}

// Sends that do not wait for a pause (a handler's) can reach the bound:
// past it the host refuses the peer's messages — counted, an Ask gets
// ErrPeerBacklog, a one-way message's skip notice takes its place — so
// that what it keeps of the peer stays bounded; what it took runs once,
// in order, and the refused ones leave no gap behind (a later message of
// the same sender runs without waiting for them).
func TestMessagesPastAPeersBudgetAreRefusedCountedAndLeaveNoGap(t *testing.T) {
	const bound, flood = 64, 1000
	a, b, g := pbHosts(t, 8192, bound, 0)
	ref := blockOn(t, b, g, "o")
	src := Ref{"pb", "src"} // an object on a (a send from a activates it there)
	if err := Tell(bg, a, src, PBFlood{To: ref, Sender: "h", N: flood}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to refuse a's messages past the bound", func() bool { return b.Stats().PeerRefused > 0 })
	ib := b.in.inboundFrom("a")
	ranOf(t, a, src) // the flood's turn ended: every message was sent
	waitFor(t, "the flood to be taken or refused", func() bool {
		_, out := a.peers.tr.Pending()
		in, _ := b.peers.tr.Pending()
		return out+in == 0
	})
	if kept := ib.budget.takenN.Load() - ib.budget.relN.Load() + ib.budget.skipN.Load(); kept > 2*bound {
		t.Fatalf("b keeps %d of a's messages; want at most %d (the bound and the skip notices' allowance)", kept, 2*bound)
	}
	// An Ask from a handler on a, past the bound: refused, and the asker
	// hears why.
	r, err := Ask[PBAskVia, PBAskResult](bg, a, Ref{"pb", "asker"}, PBAskVia{To: ref, Seq: 1})
	if err != nil || !r.Backlog {
		t.Fatalf("an Ask past b's budget for a: %+v, %v; want ErrPeerBacklog (Unavailable)", r, err)
	}
	refused := b.Stats().PeerRefused
	g.release("o")
	waitFor(t, "b to admit what it kept of a's", func() bool { return keptOf(ib) == 0 })
	// A later message of the same sender runs once what b took ran: the
	// refused ones left no gap for it to wait behind.
	if err := Tell(bg, a, src, PBFlood{To: ref, Sender: "late", N: 1}); err != nil {
		t.Fatal(err)
	}
	var ran map[string][]int
	defer func() {
		if t.Failed() {
			t.Logf("ran late %v, h %d %v…; b %+v; budget kept %d skip %d unkept %d", ran["late"], len(ran["h"]), ran["h"][:min(len(ran["h"]), 80)], b.Stats(),
				ib.budget.takenN.Load()-ib.budget.relN.Load(), ib.budget.skipN.Load(), ib.budget.unkeptN.Load())
		}
	}()
	waitFor(t, "the later message to run", func() bool { ran = ranOf(t, b, ref); return len(ran["late"]) == 1 })
	waitFor(t, "the flood's accepted messages to run", func() bool {
		ran = ranOf(t, b, ref)
		return int64(len(ran["h"]))+refused-1 >= flood // refused counts the Ask too
	})
	got := ran["h"]
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("a's handler's messages ran as %v; want each at most once, in order", got)
	}
	if int64(len(got))+refused-1 != flood {
		t.Fatalf("%d ran and %d refused of %d; want every one either", len(got), refused-1, flood)
	}
	if st := b.Stats(); st.GapsClosed != 0 || st.HeldOutOfOrder != 0 {
		t.Fatalf("b: %d gaps given up on, %d held; want none: the skip notices closed the refused ones' gaps", st.GapsClosed, st.HeldOutOfOrder)
	}
}

// The budget's arithmetic: one message always fits; past the bound
// nothing is counted; skip notices have an allowance as large again; what
// is settled is what was received and is no longer kept.
func TestPeerBudgetRefusesPastTheBoundAndSettlesWhatItNoLongerKeeps(t *testing.T) {
	b := newPeerBudget(mailbox.Limits{Items: 4, Bytes: 100}, nil)
	if !b.take(1000, false) {
		t.Fatal("a message larger than the bound in an empty budget: refused; want it taken")
	}
	if b.take(1, false) || b.take(1, true) {
		t.Fatal("past the bytes bound (twice it for a skip notice): taken; want refused")
	}
	if n, by := b.settled(); n != 0 || by != 0 {
		t.Fatalf("settled %d, %d while the one message received is kept; want 0, 0", n, by)
	}
	b.relN.Add(1) // its admission began (release, which also reports)
	b.relB.Add(1000)
	for i := 0; i < 4; i++ {
		if !b.take(1, false) {
			t.Fatalf("message %d of 4: refused", i+1)
		}
	}
	if b.take(1, false) {
		t.Fatal("message 5 of 4: taken; want refused")
	}
	if !b.take(1, true) {
		t.Fatal("a skip notice at the bound: refused; want it taken (its allowance)")
	}
	if n, by := b.settled(); n != 1 || by != 1000 {
		t.Fatalf("settled %d, %d; want 1, 1000 (the first message; skip notices count no receipt)", n, by)
	}
	// A new run of the peer: nothing is settled for it yet; what the old
	// run left here counts as settled when it leaves.
	b.restart()
	if n, by := b.settled(); n != 0 || by != 0 {
		t.Fatalf("settled %d, %d after a restart; want 0, 0", n, by)
	}
	b.relN.Add(1)
	b.relB.Add(1)
	if n, by := b.settled(); n != 1 || by != 1 {
		t.Fatalf("settled %d, %d after one of the old run's messages left; want 1, 1", n, by)
	}
}

// keptOf returns the messages ib's budget keeps (of those received).
func keptOf(ib *inbound) int64 { n, _ := ib.budget.kept(); return n }

// The credit's promise, as a seeded simulation of one sender and one
// receiver (no link in between), some frames settled at once (not kept):
// a sender that keeps to its credit is never refused — what it has at the receiver stays within the bound —
// and a sender without credit that asks for it is always told once the
// receiver has let go of what it kept (no report it waits for is held
// back by the step or the check cadence). Random bounds, message sizes up
// to the byte bound, random releases; the seed is printed.
func TestACreditReportAlwaysReachesAWaitingSenderAndItIsNeverRefused(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 3))
	for round := range 300 {
		lim := mailbox.Limits{Items: 2 + rng.IntN(300), Bytes: int64(16 + rng.IntN(100_000))}
		c := &peerCredit{}
		b := newPeerBudget(lim, c.apply)
		b.report(true) // the peer came up: the sender learns the window
		var kept []int64
		releaseOne := func() {
			b.release(kept[0], false)
			kept = kept[1:]
		}
		for step := range 2000 {
			n := int64(1 + rng.IntN(int(max(1, lim.Bytes/int64(lim.Items)))))
			if rng.IntN(5) == 0 {
				n = int64(1 + rng.IntN(int(lim.Bytes)))
			}
			if c.open(n) {
				c.sentN.Add(1)
				c.sentB.Add(n)
				if rng.IntN(6) == 0 { // a frame the receiver does not keep (a refused kind, a reply of a gone asker, …)
					b.unkept(n)
					continue
				}
				if !b.take(n, false) {
					t.Fatalf("round %d (bound %+v) step %d: a message of %d bytes sent within the credit was refused; %d kept",
						round, lim, step, n, len(kept))
				}
				kept = append(kept, n)
				continue
			}
			if c.ask() {
				b.asked()
			}
			for len(kept) > 0 && (rng.IntN(4) > 0 || !c.open(n)) {
				releaseOne()
				if c.open(n) && rng.IntN(2) == 0 {
					break
				}
			}
			if !c.open(n) {
				sn, sb := b.settled()
				t.Fatalf("round %d (bound %+v) step %d: the receiver keeps nothing, yet the sender has no credit for %d bytes: sent %d/%d, reported settled %d/%d, settled %d/%d",
					round, lim, step, n, c.sentN.Load(), c.sentB.Load(), c.setN.Load(), c.setB.Load(), sn, sb)
			}
		}
	}
}

// newPeerBudget returns an empty budget of bound lim that reports with
// send.
func newPeerBudget(lim mailbox.Limits, send func(*creditReport)) *peerBudget {
	b := &peerBudget{send: send}
	b.setLimits(lim)
	return b
}

// A message refused past the budget of the host that was to forward it
// leaves its skip notice on the same way: the object, on a third host,
// runs what was taken, once, in order, and waits for none of the refused
// ones.
func TestARefusedMessageOnItsWayElsewhereLeavesItsSkipNoticeOnTheWay(t *testing.T) {
	const bound, flood = 16, 300
	n := &Network{localnet.New(localnet.Options{High: 4})}
	g := newGates()
	start := func(name string, cfg Config) *Host {
		cfg.Name, cfg.Logger = name, quietLogger()
		return startHost(t, n.With(cfg), pbKind(g))
	}
	a := start("a", Config{})
	b := start("b", Config{SendTimeout: time.Minute, PeerInbound: mailbox.Limits{Items: bound, Bytes: 64 << 20}})
	c := start("c", Config{})
	waitViews(t, a, b, c)
	ref := Ref{"pb", "far"}
	if _, err := Ask[PBGet, map[string][]int](bg, c, ref, PBGet{}); err != nil { // activated on c
		t.Fatal(err)
	}
	// a routes to it through b, whose link to c is broken: b's forwards
	// wait for room there, and a's messages pile up in a's budget at b.
	// (The link between a and b is slow, so that every message of the
	// flood leaves a before b's hint that the object is on c comes back.)
	a.routes.learn(relocation.Object{Kind: "pb", ID: "far"}, "b", 0, false)
	n.Break("b", "c")
	n.Delay("a", "b", 100*time.Millisecond)
	src := Ref{"pb", "src"}
	if err := Tell(bg, a, src, PBFlood{To: ref, Sender: "h", N: flood}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to refuse a's messages past the bound", func() bool { return b.Stats().PeerRefused > 0 })
	ranOf(t, a, src) // the flood's turn ended: every message was sent
	n.Delay("a", "b", 0)
	n.Heal("b", "c")
	var ran map[string][]int
	waitFor(t, "every message taken to run", func() bool {
		ran = ranOf(t, c, ref)
		return int64(len(ran["h"]))+b.Stats().PeerRefused >= flood
	})
	got, refused := ran["h"], b.Stats().PeerRefused
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) || int64(len(got))+refused != flood {
		t.Fatalf("ran %d (%v…), refused %d of %d; want each either, the ones run once, in order", len(got), got[:min(len(got), 20)], refused, flood)
	}
	// The skip notices that went back to a reach c straight from it,
	// maybe ahead of the messages b still forwards: c holds them until
	// those came, and gives up on nothing.
	waitFor(t, "c to hold nothing", func() bool { return c.Stats().HeldOutOfOrder == 0 })
	if st := c.Stats(); st.GapsClosed != 0 || st.Late != 0 {
		t.Fatalf("c: %d gaps given up on, %d late; want none (the refused ones' skip notices came)", st.GapsClosed, st.Late)
	}
	t.Logf("%d ran, %d refused; b dropped %d (skip notices sent), a had %d bounced back", len(got), refused, b.Stats().Dropped, a.Stats().Bounced)
	// A later message of the same sender runs without waiting.
	if err := Tell(bg, a, src, PBFlood{To: ref, Sender: "late", N: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later message to run", func() bool { return len(ranOf(t, c, ref)["late"]) == 1 })
}
