package actor

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// Past an object's reorder bound its host pushes back on the sender:
// the sender's outside Tells wait (none is refused: the wait here is
// shorter than SendTimeout) instead of piling up at the owner, nothing
// is released out of order or given up on, and when the older message
// arrives everything runs in order and the sender resumes.
func TestTheReorderBoundPushesBackOnTheSender(t *testing.T) {
	n := NewNetwork(nil)
	const bound, total = 20, 20_000
	hs := startSeqHosts(t, n, Config{ReorderBound: bound, SendTimeout: time.Minute}, "a", "x", "b")
	a, b := hs["a"], hs["b"]
	// a's message 1 takes a detour through x, whose link holds it; the
	// rest go straight to b and wait there for it.
	ref := detour(t, n, a, b)
	var sent atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for i := 3; i <= total; i++ {
			if err := Tell(bg, a, ref, SeqMsg{Seq: i}); err != nil {
				errc <- err
				return
			}
			sent.Add(1)
		}
		errc <- nil
	}()
	waitFor(t, "the sender to be pushed back", func() bool { return a.Stats().PressureWaits > 0 })
	// Paused: once what was on the link has arrived, what b holds stops
	// growing (a fact waited for: the same count across a pause, however
	// slow the machine), far below what a would send.
	var held int
	waitFor(t, "what b holds to stop growing", func() bool {
		before := b.Stats().HeldOutOfOrder
		time.Sleep(50 * time.Millisecond)
		held = b.Stats().HeldOutOfOrder
		return held == before
	})
	if st := b.Stats(); held >= total-1 || st.GapsClosed != 0 || st.OverBound == 0 {
		t.Fatalf("b while a is pushed back: held %d (a sent %d of %d), %d given up on, %d over the bound; want a hold below %d, none given up, some over the bound",
			held, sent.Load(), total-1, st.GapsClosed, st.OverBound, total-1)
	}
	n.Heal("a", "x")
	if err := <-errc; err != nil {
		t.Fatalf("a Tell while pushed back: %v", err)
	}
	var got []int
	waitFor(t, "every message to run", func() bool {
		s, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{})
		got = s
		return err == nil && len(s) == total+1
	})
	for i, v := range got {
		if v != i {
			t.Fatalf("ran %d at position %d (of %v); want every message in order", v, i, got)
		}
	}
	if st := b.Stats(); st.GapsClosed != 0 || st.Late != 0 || st.HeldOutOfOrder != 0 {
		t.Fatalf("b: %d given up on, %d late, %d held; want none", st.GapsClosed, st.Late, st.HeldOutOfOrder)
	}
	waitFor(t, "a to be told to resume", func() bool { return a.pressure.len() == 0 })
}

// A send pushed back for longer than SendTimeout fails with ErrPushedBack
// (a DeadlineExceeded) and was not sent: sending the same message again
// after the older one arrived runs it once, in its place.
func TestAPushedBackSendFailsWithErrPushedBackAndSendingAgainIsSafe(t *testing.T) {
	n := NewNetwork(nil)
	const bound = 20
	hs := startSeqHosts(t, n, Config{ReorderBound: bound, SendTimeout: 50 * time.Millisecond}, "a", "x", "b")
	a, b := hs["a"], hs["b"]
	ref := detour(t, n, a, b)
	// Past the bound, b pushes back: a Tell waits, then fails.
	next, last := 3, 3+2*bound
	var err error
	for ; ; next++ {
		if next == last {
			waitFor(t, "b to push back on a", func() bool { return a.pressure.len() > 0 })
		}
		if err = Tell(bg, a, ref, SeqMsg{Seq: next}); err != nil {
			break
		}
		if next == last {
			t.Fatalf("Tell #%d returned nil while b pushed back on a", next)
		}
	}
	if !errors.Is(err, ErrPushedBack) || !errors.Is(err, DeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Tell #%d while pushed back: %v; want ErrPushedBack, a DeadlineExceeded", next, err)
	}
	n.Heal("a", "x")
	waitFor(t, "a to be told to resume", func() bool { return a.pressure.len() == 0 })
	total := next + 100
	for i := next; i <= total; i++ { // #next again: it was not sent
		if err := Tell(bg, a, ref, SeqMsg{Seq: i}); err != nil {
			t.Fatalf("Tell #%d after the resume: %v", i, err)
		}
	}
	var got []int
	waitFor(t, "every message to run", func() bool {
		s, err := Ask[GetSeqs, []int](bg, b, ref, GetSeqs{})
		got = s
		return err == nil && len(s) >= total+1
	})
	if len(got) != total+1 {
		t.Fatalf("ran %d messages: %v; want %d", len(got), got, total+1)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("ran %d at position %d (of %v); want every message once, in order", v, i, got)
		}
	}
}

// An owner's pauses and resumes reach the sender in the order the owner
// decided them: a resume never overtakes the pause it ends. Eight
// goroutines decide, at random, that the sender is past the bound or
// relieved, and yield before sending; when they are done, the sender is
// paused exactly when the owner counts it as pushed. Sent as each decider
// left the lock, a resume could arrive first and leave the sender paused
// for good while the owner had let it go.
func TestAnOwnersPausesAndResumesReachTheSenderInTheOrderTheyWereDecided(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	n := NewNetwork(nil)
	b := startSeqHosts(t, n, Config{}, "b")["b"]
	ref := Ref{"seq", "o"}
	if err := Tell(bg, b, ref, SeqMsg{Seq: 0}); err != nil {
		t.Fatal(err)
	}
	o := b.owners.kinds["seq"].local("o")
	if o == nil {
		t.Fatal("the object is not active on b")
	}
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	o.seqMu.Lock()
	o.yieldBeforePush = runtime.Gosched
	o.seqMu.Unlock()
	for round := range 200 {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(round*8+g)))
				for range 20 {
					o.seqMu.Lock()
					var queued bool
					if rng.IntN(2) == 0 {
						queued = o.pushBackLocked([]byte(b.name))
					} else {
						queued = o.relievedLocked(true)
					}
					o.seqMu.Unlock()
					runtime.Gosched()
					if queued {
						o.sendPushes()
					}
				}
			}()
		}
		wg.Wait()
		o.seqMu.Lock()
		_, pushed := o.pushed[b.name]
		o.seqMu.Unlock()
		if paused := b.pressure.wait(obj) != nil; paused != pushed {
			t.Fatalf("round %d: the sender is paused: %v, the owner counts it as pushed: %v", round, paused, pushed)
		}
	}
}

// An object is paused for this host's senders while any host that asked
// for a pause has not resumed it; a host's failure ends its pauses, and
// this host's close ends all.
func TestAPauseHoldsUntilEveryHostThatAskedForItResumes(t *testing.T) {
	var p pressureSet
	obj, other := relocation.Object{Kind: "k", ID: "1"}, relocation.Object{Kind: "k", ID: "2"}
	p.pause(obj, "a", true)
	p.pause(obj, "b", true)
	p.pause(other, "b", true)
	ch := p.wait(obj)
	p.resume(obj, "a")
	if p.wait(obj) == nil || closed(ch) {
		t.Fatal("resumed by a while b's pause is on")
	}
	p.resume(obj, "c") // never paused it
	if p.wait(obj) == nil {
		t.Fatal("resumed by a host that never paused it")
	}
	p.resume(obj, "b")
	if p.wait(obj) != nil || !closed(ch) {
		t.Fatal("still paused after both hosts resumed")
	}
	p.pause(obj, "a", true)
	p.resumeBy("b") // b failed: its pause of other ends, a's of obj stays
	if p.wait(other) != nil || p.wait(obj) == nil || p.len() != 1 {
		t.Fatalf("after b failed: other paused %v, obj paused %v, %d paused", p.wait(other) != nil, p.wait(obj) != nil, p.len())
	}
	p.pause(other, "c", true)
	p.resumeBy("") // this host closes
	if p.len() != 0 || p.wait(obj) != nil || p.wait(other) != nil {
		t.Fatalf("after the close: %d paused", p.len())
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// One host may have at most maxPausesPerPeer objects paused here: past it
// a pause is refused (reported false) and nothing is kept for it; a pause
// it already has on, this host's own pauses, and another host's are not
// refused; a resume or its failure makes room again.
func TestAHostMayPauseAtMostMaxPausesPerPeerObjectsHere(t *testing.T) {
	var p pressureSet
	obj := func(i int) relocation.Object { return relocation.Object{Kind: "k", ID: itoa(i)} }
	for i := range maxPausesPerPeer {
		if !p.pause(obj(i), "x", true) {
			t.Fatalf("pause %d of x refused below the bound", i)
		}
	}
	if p.pause(obj(maxPausesPerPeer), "x", true) || p.wait(obj(maxPausesPerPeer)) != nil {
		t.Fatal("a pause of x past maxPausesPerPeer was taken")
	}
	if !p.pause(obj(0), "x", true) {
		t.Fatal("a pause x already has on was refused")
	}
	if !p.pause(obj(maxPausesPerPeer), "y", true) || !p.pause(obj(maxPausesPerPeer+1), "self", false) {
		t.Fatal("another host's pause, or this host's own, was refused")
	}
	p.resume(obj(0), "x")
	if !p.pause(obj(maxPausesPerPeer+2), "x", true) {
		t.Fatal("x's pause refused after one of its pauses ended")
	}
	p.resumeBy("x")
	if p.len() != 2 || !p.pause(obj(0), "x", true) {
		t.Fatalf("after x failed: %d paused (want y's and this host's), x's pauses refused", p.len())
	}
}

// A pause from a peer is taken only for an object this host sends to (it
// stamped a message for it lately): a member's pauses of objects this host
// sends nothing to — 10,000 of them — are dropped, counted, and keep
// nothing; its pause of an object this host does send to is taken. Before,
// every pause was kept for as long as its sender was up: 400,000 of them
// took a node from 27 to 360 MB.
func TestAPauseIsTakenOnlyForAnObjectThisHostSendsTo(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger(), Observer: obs}), counterKind(newGates()))
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), counterKind(newGates()))
	waitViews(t, a, b)
	x := rawLink(t, n, "x")
	pause := func(obj relocation.Object) {
		t.Helper()
		if err := x.Send("a", transport.Item{Kind: transport.Control, Data: appendControl(nil, &pressureItem{obj: obj, paused: true})}); err != nil {
			t.Fatal(err)
		}
	}
	const strangers = 10_000
	for i := range strangers {
		pause(relocation.Object{Kind: "counter", ID: "never-" + itoa(i)})
	}
	waitFor(t, "the pauses of objects a sends nothing to dropped", func() bool { return obs.snapshot()[RejectProtocol] == strangers })
	if got := a.pressure.len(); got != 0 {
		t.Fatalf("%d objects paused on a by pauses of objects it sends nothing to", got)
	}
	// The control: an object a sends to (on b).
	ref := Ref{"counter", "sent-to"}
	if err := Tell(bg, b, ref, Inc{By: 1}); err != nil { // activates on b
		t.Fatal(err)
	}
	if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	a.in.onPressure("b", &pressureItem{obj: relocation.Object{Kind: ref.Kind, ID: ref.ID}, paused: true}) // from its owner
	waitFor(t, "the owner's pause of the object a sends to taken", func() bool { return a.pressure.len() == 1 })
}

// A pause is taken only from the object's owner: a member's pause of an
// object a host sends to but another member owns is refused, counted,
// whether the host's routes name the owner or the Location Store must
// (the routes may lag a move: the pause can come before the forwarder's
// route hint). The owner's pause is taken either way, and ends once the
// host learns that another host owns the object. Before, a member's one
// 30-byte pause made all of a gateway's sends to an object it did not own
// fail for as long as the member stayed up.
func TestAPauseIsTakenOnlyFromTheObjectsOwner(t *testing.T) {
	n := NewNetwork(nil)
	obs := &rejections{}
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger(), Observer: obs}), counterKind(newGates()))
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), counterKind(newGates()))
	waitViews(t, a, b)
	x := rawLink(t, n, "x")
	ref := Ref{"counter", "on-b"}
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	if err := Tell(bg, b, ref, Inc{By: 1}); err != nil { // activates on b
		t.Fatal(err)
	}
	if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // a sends to it: a route to b, a live stream
		t.Fatal(err)
	}
	if e, ok := a.routes.lookup(obj); !ok || e.Host != "b" {
		t.Fatalf("a's route to %v is %+v, %v: want b", obj, e, ok)
	}
	// A member that does not own it: refused though a sends to it.
	if err := x.Send("a", transport.Item{Kind: transport.Control, Data: appendControl(nil, &pressureItem{obj: obj, paused: true})}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "x's pause refused", func() bool { return obs.snapshot()[RejectProtocol] == 1 })
	if got := a.pressure.len(); got != 0 {
		t.Fatalf("%d objects paused on a by a member that owns none of them", got)
	}
	// Its owner, named by a's routes: taken at once.
	a.in.onPressure("b", &pressureItem{obj: obj, paused: true})
	if a.pressure.wait(obj) == nil {
		t.Fatal("the owner's pause, its route known, was not taken")
	}
	a.in.onPressure("b", &pressureItem{obj: obj})
	if a.pressure.len() != 0 {
		t.Fatal("the owner's resume did not end its pause")
	}
	// Its owner while a's route names another host: the store says b.
	row, err := a.store.Get(bg, obj)
	if err != nil {
		t.Fatal(err)
	}
	a.routes.update(obj, "x", row.OwnerGen+1)
	a.in.onPressure("b", &pressureItem{obj: obj, paused: true})
	waitFor(t, "the owner's pause taken on the store's word", func() bool { return a.pressure.wait(obj) != nil })
	// The routes naming another owner than the pause's sender end it.
	a.in.endStalePauses()
	if a.pressure.wait(obj) != nil {
		t.Fatal("b's pause outlived a's routes naming another owner")
	}
	if got := obs.snapshot()[RejectProtocol]; got != 1 {
		t.Fatalf("%d pauses refused, want x's one", got)
	}
}
