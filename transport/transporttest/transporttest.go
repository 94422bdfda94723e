// Package transporttest is the conformance suite every berth transport
// runs (the idea of hashicorp/raft's transport tests: one loop of rules,
// every implementation, the fake and the real ones). Run checks the
// invariants package transport states, one subtest per rule, named after
// it; each subtest starts its own hosts, closes them when it ends, and then
// checks that no goroutine of berth is left.
//
// The suite waits on what the handlers see, never on the clock: every wait
// ends when the awaited call arrives, or fails the test after 10 s.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport"
)

// Harness tells the suite how to run one transport.
type Harness struct {
	// Start starts a host named name whose items go to h and returns its
	// Transport. Hosts started in one subtest reach each other; the
	// suite closes them when the subtest ends (the harness may register
	// more cleanups with t). Names are unique within a Run.
	Start func(t *testing.T, name string, h transport.Handler) transport.Transport
	// Break breaks the links between hosts a and b, both ways; Heal
	// repairs them. Nil: the rules that need them skip, with a message.
	Break, Heal func(t *testing.T, a, b string)
}

// rule is one subtest of Run.
type rule struct {
	name string
	run  func(t *testing.T, s *suite)
}

// rules are the invariants, in the order Run checks them.
var rules = []rule{
	{"UpOnJoin", testUpOnJoin},
	{"OrderPerSender", testOrderPerSender},
	{"EachItemOnce", testEachItemOnce},
	{"DataNotShared", testDataNotShared},
	{"LeavingRefusesFrames", testLeavingRefusesFrames},
	{"UnknownPeer", testUnknownPeer},
	{"SendAfterClose", testSendAfterClose},
	{"DownUpOnBreakHeal", testDownUpOnBreakHeal},
	{"BreakLosesNothing", testBreakLosesNothing},
	{"GracefulCloseDeliversSent", testGracefulCloseDeliversSent},
	{"GracefulCloseReturnsFrames", testGracefulCloseReturnsFrames},
	{"CrashCloseSender", testCrashCloseSender},
	{"CrashCloseReceiver", testCrashCloseReceiver},
	{"CloseReclaimHandsBackWhatWasNotTaken", testCloseReclaimHandsBackWhatWasNotTaken},
	{"WaitRoomBlocksWhenFull", testWaitRoomBlocksWhenFull},
	{"NoGoroutineLeak", testNoGoroutineLeak},
}

// Run runs every rule over the transport h starts.
func Run(t *testing.T, h Harness) {
	if h.Start == nil {
		t.Fatal("transporttest: Harness.Start is nil")
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			// Registered first, so it runs after the hosts' cleanups.
			t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
			r.run(t, &suite{h: h, prefix: r.name + "-"})
		})
	}
}

// suite is one subtest's view of the harness.
type suite struct {
	h      Harness
	prefix string
}

// host is a started host with its recorder.
type host struct {
	name string
	tr   transport.Transport
	rec  *recorder
}

// start starts hosts named prefix+name with the given recorders and waits
// until every one has seen the others come up.
func (s *suite) start(t *testing.T, names []string, recs ...*recorder) []*host {
	t.Helper()
	hs := make([]*host, len(names))
	for i, n := range names {
		rec := newRecorder()
		if i < len(recs) && recs[i] != nil {
			rec = recs[i]
		}
		name := s.prefix + n
		tr := s.h.Start(t, name, rec)
		if tr == nil {
			t.Fatalf("Start(%s) returned nil", name)
		}
		if tr.Local() != name {
			t.Fatalf("Local() = %q, want %q", tr.Local(), name)
		}
		t.Cleanup(func() {
			// A held Deliver would keep a Close waiting.
			rec.unhold()
			if err := tr.Close(false); err != nil {
				t.Errorf("Close(%s): %v", name, err)
			}
		})
		hs[i] = &host{name: name, tr: tr, rec: rec}
	}
	for _, a := range hs {
		for _, b := range hs {
			if a != b {
				a.rec.awaitEvent(t, b.name, transport.Up)
			}
		}
	}
	return hs
}

func (s *suite) needBreak(t *testing.T) {
	if s.h.Break == nil || s.h.Heal == nil {
		t.Skip("the harness cannot break links (Harness.Break or Heal is nil)")
	}
}

// send sends it, failing t on an error.
func send(t testing.TB, from *host, to *host, it transport.Item) {
	t.Helper()
	if err := from.tr.Send(to.name, it); err != nil {
		t.Fatalf("%s.Send(%s, %v %q): %v", from.name, to.name, it.Kind, it.Data, err)
	}
}

// sendMixed sends from's items seq from..to-1 (kinds mixed).
func sendMixed(t testing.TB, from, to *host, lo, hi int) {
	t.Helper()
	for i := lo; i < hi; i++ {
		send(t, from, to, mixed(from.name, i))
	}
}

// awaitPendingZero waits until tr has nothing pending.
func awaitPendingZero(t testing.TB, h *host) {
	t.Helper()
	testutil.WaitFor(t, h.name+" Pending() == (0, 0)", func() bool {
		in, out := h.tr.Pending()
		return in == 0 && out == 0
	})
}

// closeAsync closes h in a goroutine; the channel is closed when Close
// returned (its error is checked).
func closeAsync(t *testing.T, h *host, graceful bool) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := h.tr.Close(graceful); err != nil {
			t.Errorf("Close(%s, %v): %v", h.name, graceful, err)
		}
	}()
	return done
}

// testUpOnJoin: hosts that join get Up for each other and list each other
// in Peers.
func testUpOnJoin(t *testing.T, s *suite) {
	hs := s.start(t, []string{"a", "b", "c"}) // start waits for the Up events
	for _, h := range hs {
		peers := h.tr.Peers()
		for _, o := range hs {
			has := false
			for _, p := range peers {
				has = has || p == o.name
			}
			if o != h && !has {
				t.Errorf("%s.Peers() = %v, lacks %s", h.name, peers, o.name)
			}
			if o == h && has {
				t.Errorf("%s.Peers() = %v lists itself", h.name, peers)
			}
		}
	}
}

// testOrderPerSender: several senders to one receiver, concurrently; each
// sender's items arrive in the order sent, kinds kept.
func testOrderPerSender(t *testing.T, s *suite) {
	const n = 3000
	hs := s.start(t, []string{"r", "s1", "s2", "s3"})
	r := hs[0]
	var wg sync.WaitGroup
	for _, snd := range hs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := snd.tr.Send(r.name, mixed(snd.name, i)); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, snd := range hs[1:] {
		checkSeq(t, snd.name, r.rec.awaitDelivered(t, snd.name, n), 0)
	}
}

// testEachItemOnce: every item sent is delivered once, none twice, both
// ways at once; nothing stays pending.
func testEachItemOnce(t *testing.T, s *suite) {
	const n = 2000
	hs := s.start(t, []string{"a", "b"})
	a, b := hs[0], hs[1]
	var wg sync.WaitGroup
	for _, p := range [][2]*host{{a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := p[0].tr.Send(p[1].name, mixed(p[0].name, i)); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, p := range [][2]*host{{a, b}, {b, a}} {
		got := p[1].rec.awaitDelivered(t, p[0].name, n)
		seen := make(map[int]bool, n)
		for _, it := range got {
			k := seqOf(t, p[0].name, it)
			if seen[k] {
				t.Fatalf("item %q delivered twice", it.Data)
			}
			seen[k] = true
		}
	}
	awaitPendingZero(t, a)
	awaitPendingZero(t, b)
	// Nothing more arrives: a marker sent last is the next item.
	send(t, a, b, item(transport.Control, a.name, n))
	got := b.rec.awaitDelivered(t, a.name, n+1)
	if len(got) != n+1 {
		t.Fatalf("%d items delivered, want %d", len(got), n+1)
	}
}

// testDataNotShared: the receiver's Data is never the sender's slice; the
// sender may reuse its buffer once Send returned.
func testDataNotShared(t *testing.T, s *suite) {
	const n = 100
	hs := s.start(t, []string{"a", "b"})
	a, b := hs[0], hs[1]
	buf := make([]byte, 6)
	for i := range n {
		copy(buf, fmt.Sprintf("v%05d", i))
		send(t, a, b, transport.Item{Kind: transport.Frame, Data: buf})
	}
	for i := range buf {
		buf[i] = 'X'
	}
	got := b.rec.awaitDelivered(t, a.name, n)
	for i, it := range got {
		if want := fmt.Sprintf("v%05d", i); string(it.Data) != want {
			t.Fatalf("item %d: got %q, want %q (the transport kept the sender's buffer)", i, it.Data, want)
		}
		if len(it.Data) > 0 && &it.Data[0] == &buf[0] {
			t.Fatalf("item %d: the receiver got the sender's slice", i)
		}
	}
}

// testLeavingRefusesFrames: once a peer leaves, frames and bounces to it
// are refused with ErrPeerLeaving and stay the caller's, untouched; other
// kinds still go; what was queued before is delivered; the leaving host
// still sends.
func testLeavingRefusesFrames(t *testing.T, s *suite) {
	const n = 100
	hs := s.start(t, []string{"a", "b"}, nil, holding())
	a, b := hs[0], hs[1]
	for i := range n {
		send(t, a, b, item(transport.Frame, a.name, i))
	}
	<-b.rec.entered // b holds the first frame; the others are queued
	b.tr.Leave()
	a.rec.awaitEvent(t, b.name, transport.Leaving)
	for _, k := range []transport.Kind{transport.Frame, transport.Bounce} {
		it := item(k, a.name, -1)
		orig := bytes.Clone(it.Data)
		err := a.tr.Send(b.name, it)
		if !errors.Is(err, transport.ErrPeerLeaving) || !transport.IsRetryable(err) {
			t.Fatalf("Send(%v) to a leaving peer: %v, want ErrPeerLeaving", k, err)
		}
		if !bytes.Equal(it.Data, orig) {
			t.Fatalf("a refused Send changed the item: %q, was %q", it.Data, orig)
		}
	}
	others := []transport.Kind{transport.Record, transport.Hint, transport.Control, transport.Reply}
	for i, k := range others {
		send(t, a, b, item(k, a.name, n+i))
	}
	b.rec.unhold()
	got := b.rec.awaitDelivered(t, a.name, n+len(others))
	for i, it := range got {
		want := transport.Frame
		if i >= n {
			want = others[i-n]
		}
		if it.Kind != want || seqOf(t, a.name, it) != i {
			t.Fatalf("item %d: got %v %q, want %v #%d", i, it.Kind, it.Data, want, i)
		}
	}
	send(t, b, a, item(transport.Frame, b.name, 0))
	a.rec.awaitDelivered(t, b.name, 1)
}

// testUnknownPeer: sends to a host that does not exist, or is gone, fail
// with ErrUnknownPeer and leave the item alone; WaitRoom returns at once.
func testUnknownPeer(t *testing.T, s *suite) {
	hs := s.start(t, []string{"a", "b"})
	a, b := hs[0], hs[1]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(to string) {
		t.Helper()
		it := item(transport.Frame, a.name, 0)
		err := a.tr.Send(to, it)
		if !errors.Is(err, transport.ErrUnknownPeer) || !transport.IsRetryable(err) {
			t.Fatalf("Send to %s: %v, want ErrUnknownPeer", to, err)
		}
		if string(it.Data) != a.name+"#0" {
			t.Fatalf("a refused Send changed the item: %q", it.Data)
		}
		if err := a.tr.WaitRoom(ctx, to); err != nil {
			t.Fatalf("WaitRoom(%s): %v, want nil at once", to, err)
		}
	}
	check(s.prefix + "nosuch")
	if err := b.tr.Close(true); err != nil {
		t.Fatal(err)
	}
	a.rec.awaitEvent(t, b.name, transport.Gone)
	check(b.name)
	for _, p := range a.tr.Peers() {
		if p == b.name {
			t.Fatalf("Peers() = %v lists the gone %s", a.tr.Peers(), b.name)
		}
	}
}

// testSendAfterClose: a closed transport refuses sends with ErrClosed;
// Close is idempotent; the peers get Gone.
func testSendAfterClose(t *testing.T, s *suite) {
	hs := s.start(t, []string{"a", "b"})
	a, b := hs[0], hs[1]
	if err := a.tr.Close(true); err != nil {
		t.Fatal(err)
	}
	err := a.tr.Send(b.name, item(transport.Record, a.name, 0))
	if !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	if transport.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = true", err)
	}
	for _, g := range []bool{true, false} {
		if err := a.tr.Close(g); err != nil {
			t.Fatalf("second Close(%v): %v", g, err)
		}
	}
	b.rec.awaitEvent(t, a.name, transport.Gone)
}

// testDownUpOnBreakHeal: both ends of a broken link get Down, and Up when
// it heals.
func testDownUpOnBreakHeal(t *testing.T, s *suite) {
	s.needBreak(t)
	hs := s.start(t, []string{"a", "b"})
	a, b := hs[0], hs[1]
	s.h.Break(t, a.name, b.name)
	a.rec.awaitEvent(t, b.name, transport.Down)
	b.rec.awaitEvent(t, a.name, transport.Down)
	s.h.Heal(t, a.name, b.name)
	for _, p := range [][2]*host{{a, b}, {b, a}} {
		p[0].rec.await(t, "Up after Down", func(log []entry) bool {
			d := indexEvent(log, p[1].name, transport.Down)
			return d >= 0 && indexEvent(log[d:], p[1].name, transport.Up) >= 0
		})
	}
}

// testBreakLosesNothing: items sent while a link is broken, of every kind,
// wait and arrive after Heal, in order, both ways.
func testBreakLosesNothing(t *testing.T, s *suite) {
	s.needBreak(t)
	const n = 200
	hs := s.start(t, []string{"a", "b"})
	a, b := hs[0], hs[1]
	sendMixed(t, a, b, 0, n)
	sendMixed(t, b, a, 0, n)
	s.h.Break(t, a.name, b.name)
	a.rec.awaitEvent(t, b.name, transport.Down)
	b.rec.awaitEvent(t, a.name, transport.Down)
	sendMixed(t, a, b, n, 2*n)
	sendMixed(t, b, a, n, 2*n)
	s.h.Heal(t, a.name, b.name)
	checkSeq(t, a.name, b.rec.awaitDelivered(t, a.name, 2*n), 0)
	checkSeq(t, b.name, a.rec.awaitDelivered(t, b.name, 2*n), 0)
}

// testCloseReclaimHandsBackWhatWasNotTaken (a transport.Reclaimer only):
// a host that closes with CloseReclaim gets back, per peer and in the order
// sent, every item its peers' handlers had not taken — each item is either
// delivered or handed back, and only an item the peer took may be both
// (its taking not reported yet) — and the items are the caller's. A peer
// whose link works gets Gone after the last item it took, and nothing
// after it.
func testCloseReclaimHandsBackWhatWasNotTaken(t *testing.T, s *suite) {
	s.needBreak(t)
	const n = 300
	hs := s.start(t, []string{"a", "b", "c"}, nil, holding())
	a, b, c := hs[0], hs[1], hs[2]
	rc, ok := a.tr.(transport.Reclaimer)
	if !ok {
		t.Skip("the transport is not a transport.Reclaimer")
	}
	// b's handler holds its first item; c takes n items, then its link
	// breaks and n more wait.
	sendMixed(t, a, b, 0, 2*n)
	sendMixed(t, a, c, 0, n)
	c.rec.awaitDelivered(t, a.name, n)
	s.h.Break(t, a.name, c.name)
	a.rec.awaitEvent(t, c.name, transport.Down)
	sendMixed(t, a, c, n, 2*n)
	<-b.rec.entered
	var back map[string][]transport.Item
	done := make(chan struct{})
	go func() {
		defer close(done)
		back = rc.CloseReclaim()
	}()
	b.rec.unhold()
	<-done
	log := b.rec.await(t, "Gone of the closed sender", func(log []entry) bool {
		return indexEvent(log, a.name, transport.Gone) >= 0
	})
	if g := indexEvent(log, a.name, transport.Gone); len(delivered(log[g:], a.name)) != 0 {
		t.Fatalf("%d items delivered to b after Gone", len(delivered(log[g:], a.name)))
	}
	for _, p := range []*host{b, c} {
		got := delivered(p.rec.snapshot(), a.name)
		checkSeq(t, a.name, got, 0)
		re := back[p.name]
		if len(got) == 2*n {
			continue // it took everything (b, released before the close took hold)
		}
		if len(re) == 0 {
			t.Fatalf("CloseReclaim handed back nothing for %s; it had taken %d of %d", p.name, len(got), 2*n)
		}
		from := seqOf(t, a.name, re[0])
		if from > len(got) {
			t.Fatalf("CloseReclaim handed back %s's items from #%d, but %s took only %d: #%d..#%d were neither taken nor handed back",
				p.name, from, p.name, len(got), len(got), from-1)
		}
		checkSeq(t, a.name, re, from)
		if end := from + len(re); end != 2*n {
			t.Fatalf("CloseReclaim handed back %s's items #%d..#%d of %d", p.name, from, end-1, 2*n)
		}
		for _, it := range re {
			if !it.Owned {
				t.Fatalf("a handed-back item is not the caller's (Owned): %q", it.Data)
			}
		}
	}
	if len(back[c.name]) == 0 {
		t.Fatal("nothing handed back for c, whose link was broken")
	}
	if again := rc.CloseReclaim(); len(again) != 0 {
		t.Fatalf("a second CloseReclaim handed back %d peers' items", len(again))
	}
	s.h.Heal(t, a.name, c.name)
}

// testGracefulCloseDeliversSent: what a host sent before its graceful
// Close is delivered, in order, and its peer's Gone comes after the last
// item.
func testGracefulCloseDeliversSent(t *testing.T, s *suite) {
	const n = 500
	hs := s.start(t, []string{"a", "b"}, nil, holding())
	a, b := hs[0], hs[1]
	sendMixed(t, a, b, 0, n)
	<-b.rec.entered // the rest is queued
	done := closeAsync(t, a, true)
	b.rec.unhold()
	<-done
	log := b.rec.await(t, "Gone of the closed sender", func(log []entry) bool {
		return indexEvent(log, a.name, transport.Gone) >= 0
	})
	g := indexEvent(log, a.name, transport.Gone)
	checkSeq(t, a.name, delivered(log[:g], a.name), 0)
	if k := len(delivered(log[:g], a.name)); k != n {
		t.Fatalf("%d items delivered before Gone, want %d", k, n)
	}
	if k := len(delivered(log[g:], a.name)); k != 0 {
		t.Fatalf("%d items delivered after Gone", k)
	}
	awaitPendingZero(t, b)
}

// closeWhileHeld sends n mixed items from a to b, whose handler holds the
// first one, and closes b (gracefully or not) while it holds it; b's
// handler is released once b's Close is under way (a learnt that b is
// gone) or done. It returns when a has seen Gone.
func closeWhileHeld(t *testing.T, a, b *host, n int, graceful bool) {
	t.Helper()
	sendMixed(t, a, b, 0, n)
	<-b.rec.entered
	done := closeAsync(t, b, graceful)
	a.rec.within(waitLimit, func(log []entry) bool {
		select {
		case <-done:
			return true
		default:
		}
		return indexEvent(log, b.name, transport.Gone) >= 0
	})
	b.rec.unhold()
	<-done
	a.rec.awaitEvent(t, b.name, transport.Gone)
}

// testGracefulCloseReturnsFrames: the frames and bounces queued to a host
// that closes gracefully, and not delivered, go back to their sender
// (Returned), in order, kinds kept; each frame is delivered or returned,
// once; other kinds are never returned.
func testGracefulCloseReturnsFrames(t *testing.T, s *suite) {
	const n = 300
	hs := s.start(t, []string{"a", "b"}, nil, holding())
	a, b := hs[0], hs[1]
	closeWhileHeld(t, a, b, n, true)
	back := returned(a.rec.snapshot(), b.name)
	got := delivered(b.rec.snapshot(), a.name)
	if len(back) == 0 {
		t.Fatalf("nothing returned; %d of %d items delivered", len(got), n)
	}
	checkSeq(t, a.name, got, 0)
	seen := map[int]bool{}
	for _, it := range got {
		seen[seqOf(t, a.name, it)] = true
	}
	last := -1
	for _, it := range back {
		k := seqOf(t, a.name, it)
		if want := mixed(a.name, k).Kind; it.Kind != want || (it.Kind != transport.Frame && it.Kind != transport.Bounce) {
			t.Fatalf("returned %v %q, want only frames and bounces, kinds kept", it.Kind, it.Data)
		}
		if seen[k] {
			t.Fatalf("item %q both delivered and returned (or returned twice)", it.Data)
		}
		if k <= last {
			t.Fatalf("returned out of order: #%d after #%d", k, last)
		}
		seen[k], last = true, k
	}
	for i := range n {
		if k := mixed(a.name, i).Kind; (k == transport.Frame || k == transport.Bounce) && !seen[i] {
			t.Fatalf("frame #%d neither delivered nor returned", i)
		}
	}
	awaitPendingZero(t, a)
}

// testCrashCloseSender: when a sender crashes, its peer gets Gone, receives
// at most an in-order prefix of what was sent and nothing after Gone, and
// nothing stays pending.
func testCrashCloseSender(t *testing.T, s *suite) {
	const n = 300
	hs := s.start(t, []string{"a", "b"}, nil, holding())
	a, b := hs[0], hs[1]
	sendMixed(t, a, b, 0, n)
	<-b.rec.entered
	done := closeAsync(t, a, false)
	b.rec.unhold()
	<-done
	log := b.rec.await(t, "Gone of the crashed sender", func(log []entry) bool {
		return indexEvent(log, a.name, transport.Gone) >= 0
	})
	g := indexEvent(log, a.name, transport.Gone)
	checkSeq(t, a.name, delivered(log[:g], a.name), 0)
	awaitPendingZero(t, b)
	if k := len(delivered(b.rec.snapshot()[g:], a.name)); k != 0 {
		t.Fatalf("%d items delivered after Gone", k)
	}
}

// testCrashCloseReceiver: when a receiver crashes, its peer gets Gone,
// nothing is returned, nothing stays pending, and sends to it fail.
func testCrashCloseReceiver(t *testing.T, s *suite) {
	const n = 300
	hs := s.start(t, []string{"a", "b"}, nil, holding())
	a, b := hs[0], hs[1]
	closeWhileHeld(t, a, b, n, false)
	awaitPendingZero(t, a)
	if back := returned(a.rec.snapshot(), b.name); len(back) != 0 {
		t.Fatalf("a crash returned %d items", len(back))
	}
	if err := a.tr.Send(b.name, item(transport.Frame, a.name, n)); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Fatalf("Send to the crashed peer: %v, want ErrUnknownPeer", err)
	}
}

// testWaitRoomBlocksWhenFull: with the receiver stuck, the link fills and
// WaitRoom blocks (with an ended ctx it returns the ctx's error); once the
// receiver drains, WaitRoom returns nil and everything arrives.
func testWaitRoomBlocksWhenFull(t *testing.T, s *suite) {
	const limit = 1 << 20
	hs := s.start(t, []string{"a", "b"}, nil, holding())
	a, b := hs[0], hs[1]
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.tr.WaitRoom(ended, b.name); err != nil {
		t.Fatalf("WaitRoom on an empty link: %v", err)
	}
	sent := 0
	for ; sent < limit; sent++ {
		if sent == 1 {
			<-b.rec.entered
		}
		if err := a.tr.WaitRoom(ended, b.name); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("WaitRoom on a full link: %v, want the ctx's error", err)
			}
			break
		}
		send(t, a, b, mixed(a.name, sent))
	}
	if sent == limit {
		t.Fatalf("WaitRoom never blocked in %d sends to a stuck receiver", limit)
	}
	waited := make(chan error, 1)
	go func() { waited <- a.tr.WaitRoom(context.Background(), b.name) }()
	b.rec.unhold()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitRoom after the receiver drained: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("WaitRoom still blocked after the receiver was released")
	}
	checkSeq(t, a.name, b.rec.awaitDelivered(t, a.name, sent), 0)
}

// testNoGoroutineLeak: after hosts that talked to each other close, some
// gracefully and some not, with items still queued, no goroutine is left.
func testNoGoroutineLeak(t *testing.T, s *suite) {
	const n = 500
	names := []string{"a", "b", "c", "d"}
	hs := s.start(t, names)
	for _, x := range hs {
		for _, y := range hs {
			if x != y {
				sendMixed(t, x, y, 0, n)
			}
		}
	}
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.tr.Close(i%2 == 0); err != nil {
				t.Errorf("Close(%s): %v", h.name, err)
			}
		}()
	}
	wg.Wait()
	testutil.CheckNoGoroutines(t)
}
