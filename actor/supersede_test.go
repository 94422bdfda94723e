package actor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// restoreGateKind is the counter kind whose state moves; with gate set,
// the first Restore on the host waits for g's key "restore".
func restoreGateKind(g *gates, gate bool) *Kind[Counter] {
	k := counterKind(g)
	var restores atomic.Int64
	k.PreserveState(func(c *Counter) ([]byte, error) { return json.Marshal(c) },
		func(ctx *Context, _ string, data []byte) (*Counter, error) {
			if gate && restores.Add(1) == 1 {
				g.block(ctx, "restore")
			}
			c := &Counter{}
			return c, json.Unmarshal(data, c)
		})
	return k
}

// incomingMoves returns how many moves of obj from source are under way at
// h as their target, and how many of them have not opened or ended.
func incomingMoves(h *Host, source string, obj relocation.Object) (all, open int) {
	for _, d := range h.moves.allMoves() {
		if d.tgt != nil && d.peer == source && d.obj == obj {
			all++
			if !d.over.Load() {
				open++
			}
		}
	}
	return all, open
}

// TestALaterMoveOfAnObjectWaitsForTheEarlierOnesRecordsAtItsTarget: a
// move given up at its source after its Prepare (its Relocate cut short)
// leaves the target an Abort; when the next move of the object comes
// while that Abort still waits on the first move's lane (here: behind a
// slow Restore), the target takes the Abort first — the next move does
// not find the first one's incoming owner in its place and fail — and the
// object moves with every Tell in its state.
func TestALaterMoveOfAnObjectWaitsForTheEarlierOnesRecordsAtItsTarget(t *testing.T) {
	n := NewNetwork(nil)
	g := newGates()
	var once sync.Once
	release := func() { once.Do(func() { g.release("restore") }) }
	t.Cleanup(release)
	cfg := func(name string) Config {
		return Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}
	}
	a := startHost(t, cfg("a"), restoreGateKind(g, false))
	b := startHost(t, cfg("b"), restoreGateKind(g, true))
	waitViews(t, a, b)
	ref := Ref{"counter", "late"}
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	for range 10 {
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() { first <- a.Relocate(ctx, ref, "b") }()
	g.waitStarted(t, "restore") // the first move's Restore waits on b
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut-short Relocate: %v; want the context's error", err)
	}
	for range 5 { // the object runs on a again
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	second := make(chan error, 1)
	go func() { second <- a.Relocate(bg, ref, "b") }()
	// The second move's Prepare is at b (its Abort came before it, on the
	// first move's lane, behind the Restore) before the Restore goes on.
	var err2 error
	ended := false
	waitFor(t, "the second move's Prepare at b", func() bool {
		select {
		case err2 = <-second: // it failed at once (the check below says how)
			ended = true
			return true
		default:
		}
		all, _ := incomingMoves(b, "a", obj)
		return all == 2
	})
	release()
	if !ended {
		err2 = <-second
	}
	if err := err2; err != nil {
		t.Fatalf("the second Relocate: %v", err)
	}
	if c, err := Ask[Get, int](bg, a, ref, Get{}); err != nil || c != 15 {
		t.Fatalf("after the second move: count %d (%v); want 15", c, err)
	}
	// The first move's incoming owner, discarded, stops (asynchronously).
	waitFor(t, "one owner on b, none on a", func() bool { return b.Stats().OwnersActive == 1 && a.Stats().OwnersActive == 0 })
}

// TestALaterMoveOfAnObjectEndsAnEarlierOneItsSourceGaveUp: when a move's
// Abort never reaches its target (the link refused it), the next move of
// the object from the same source ends the first one at the target — its
// source gave it up before the next one began, and the Prepare says so —
// instead of finding its incoming owner in the way, and the first one's
// stale state never opens there.
func TestALaterMoveOfAnObjectEndsAnEarlierOneItsSourceGaveUp(t *testing.T) {
	n := NewNetwork(nil)
	g := newGates()
	cfg := func(name string) Config {
		return Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}
	}
	a := startHost(t, cfg("a"), restoreGateKind(g, false))
	b := startHost(t, cfg("b"), restoreGateKind(g, false))
	waitViews(t, a, b)
	ref := Ref{"counter", "lost-abort"}
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	for range 10 {
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
			t.Fatal(err)
		}
	}
	// The first move: its relay-ready and its Abort are lost, so its
	// source waits in prepared until its Relocate is cut short, and its
	// target waits in relay-ready.
	var mu sync.Mutex
	var firstMove relocation.MoveID
	var lost atomic.Int64
	n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := rec.(*relocation.Prepare); ok && firstMove == (relocation.MoveID{}) {
			firstMove = rec.MoveID()
		}
		switch rec.(type) {
		case *relocation.RelayReady, *relocation.Abort:
			if rec.MoveID() == firstMove {
				lost.Add(1)
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() { first <- a.Relocate(ctx, ref, "b") }()
	waitFor(t, "the first move's relay-ready (lost)", func() bool { return lost.Load() == 1 })
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut-short Relocate: %v; want the context's error", err)
	}
	waitFor(t, "the first move's Abort (lost)", func() bool { return lost.Load() == 2 })
	if _, open := incomingMoves(b, "a", obj); open != 1 {
		t.Fatalf("b has %d moves of the object under way; want the first one, in relay-ready", open)
	}
	for range 5 { // the object runs on a again
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Relocate(bg, ref, "b"); err != nil {
		t.Fatalf("the second Relocate: %v", err)
	}
	if c, err := Ask[Get, int](bg, a, ref, Get{}); err != nil || c != 15 {
		t.Fatalf("after the second move: count %d (%v); want 15", c, err)
	}
	// The first move's incoming owner, discarded, stops (asynchronously).
	waitFor(t, "one owner on b, none on a", func() bool { return b.Stats().OwnersActive == 1 && a.Stats().OwnersActive == 0 })
	if _, open := incomingMoves(b, "a", obj); open != 0 {
		t.Fatalf("b has %d moves of the object under way after the second one opened; want none", open)
	}
}

// TestADrainThatNoHostTakesAnObjectFromSaysItsStateEnded: when every host
// a drain tries refuses an object's move (here: an older application
// version), the object is deactivated — and for a kind whose in-memory
// state moves, that ending of its state is counted and logged at Warn,
// not silent: a line a second with how many objects (not a line per
// object), and each object named at Debug.
func TestADrainThatNoHostTakesAnObjectFromSaysItsStateEnded(t *testing.T) {
	const objects = 300
	n := NewNetwork(nil)
	var aLog syncBuffer
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, AppVersion: "2",
		Logger: slog.New(slog.NewTextHandler(&aLog, &slog.HandlerOptions{Level: slog.LevelDebug}))}, movableKind(newGates()))
	b := startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, AppVersion: "1",
		Logger: quietLogger()}, movableKind(newGates()))
	waitViews(t, a, b)
	ref := func(i int) Ref { return Ref{"counter", "refused-" + strconv.Itoa(i)} }
	for i := range objects {
		if err := Tell(bg, a, ref(i), Inc{By: 7}); err != nil { // activates on a
			t.Fatal(err)
		}
	}
	began := time.Now()
	if err := a.Stop(bg); err != nil {
		t.Fatal(err)
	}
	most := 2 + int(time.Since(began)/time.Second) // a line a second, and the close's
	if got := a.Stats().DrainStateDropped; got != objects {
		t.Fatalf("DrainStateDropped = %d; want %d (the objects b refused)\n%s", got, objects, aLog.String())
	}
	l := aLog.String()
	lines := regexp.MustCompile(`level=WARN msg="drain: no host took these objects; they are deactivated and their in-memory state ends" host=a objects=(\d+)`).FindAllStringSubmatch(l, -1)
	sum := 0
	for _, m := range lines {
		k, _ := strconv.Atoi(m[1])
		sum += k
	}
	if len(lines) == 0 || len(lines) > most || sum != objects {
		t.Fatalf("%d Warn lines (want 1 to %d) counting %d objects (want %d):\n%s", len(lines), most, sum, objects, l)
	}
	for i := range objects {
		if !strings.Contains(l, "object="+ref(i).String()) {
			t.Fatalf("a's Debug log does not name %s, whose state ended:\n%s", ref(i), l)
		}
	}
}

// refusingAttacher attaches hosts through at, whose links refuse (as past
// their bound) the first refuse relocation Aborts sent from host from.
type refusingAttacher struct {
	at      transport.Attacher
	from    string
	refuse  int64
	refused atomic.Int64
}

func (r *refusingAttacher) Attach(name string, h transport.Handler) (transport.Transport, error) {
	tr, err := r.at.Attach(name, h)
	if err != nil || name != r.from {
		return tr, err
	}
	return &refusingTransport{Transport: tr, r: r}, nil
}

type refusingTransport struct {
	transport.Transport
	r *refusingAttacher
}

func (t *refusingTransport) Send(to string, it transport.Item) error {
	if it.Kind == transport.Record {
		if _, rec, err := relocation.DecodeRecord(it.Data); err == nil {
			if _, ok := rec.(*relocation.Abort); ok && t.r.refused.Load() < t.r.refuse {
				t.r.refused.Add(1)
				return transport.ErrBacklog
			}
		}
	}
	return t.Transport.Send(to, it)
}

// TestAnAbortTheLinkRefusedIsSentAgain: a move given up at its source
// whose Abort the link refuses (past its bound) is not left under way at
// its target — which would commit, after its ReadyTimeout, the state it
// was given while the object runs on at the source: the source sends the
// Abort again until the link takes it.
func TestAnAbortTheLinkRefusedIsSentAgain(t *testing.T) {
	n := NewNetwork(nil)
	ra := &refusingAttacher{at: n.Transport, from: "a", refuse: 3}
	cfg := func(name string, at transport.Attacher) Config {
		return Config{Name: name, Transport: at, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}
	}
	a := startHost(t, cfg("a", ra), restoreGateKind(newGates(), false))
	b := startHost(t, cfg("b", n.Transport), restoreGateKind(newGates(), false))
	waitViews(t, a, b)
	ref := Ref{"counter", "refused-abort"}
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	for range 10 {
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
			t.Fatal(err)
		}
	}
	// The relay-ready is lost, so the source waits in prepared until its
	// Relocate is cut short, and the target waits in relay-ready.
	var lost atomic.Int64
	n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		if _, ok := rec.(*relocation.RelayReady); ok {
			lost.Add(1)
			return false
		}
		return true
	})
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() { first <- a.Relocate(ctx, ref, "b") }()
	waitFor(t, "the move's relay-ready (lost)", func() bool { return lost.Load() == 1 })
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut-short Relocate: %v; want the context's error", err)
	}
	waitFor(t, "the target to hear the Abort", func() bool { _, open := incomingMoves(b, "a", obj); return open == 0 })
	if got := ra.refused.Load(); got != 3 {
		t.Fatalf("the link refused %d Aborts; want 3 (then it took one)", got)
	}
	for range 5 { // the object runs on a
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := Ask[Get, int](bg, b, ref, Get{}); err != nil || c != 15 {
		t.Fatalf("count asked through b = %d (%v); want 15", c, err)
	}
	waitFor(t, "one owner on a, none on b", func() bool { return a.Stats().OwnersActive == 1 && b.Stats().OwnersActive == 0 })
}

// laterOwnerHosts starts hosts a, b and c with the counter kind whose
// state moves, a cutover wait no test run reaches (a target past
// relay-ready waits for its source's word), and an object on a with 10
// Tells run; b logs to bLog, each object's detail (Debug) too.
func laterOwnerHosts(t *testing.T, bLog *syncBuffer) (n *Network, a, b, c *Host, ref Ref) {
	t.Helper()
	n = NewNetwork(nil)
	g := newGates()
	cfg := func(name string) Config {
		return Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership,
			CutoverWait: time.Hour, Logger: quietLogger()}
	}
	a = startHost(t, cfg("a"), restoreGateKind(g, false))
	bc := cfg("b")
	bc.Logger = slog.New(slog.NewTextHandler(bLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b = startHost(t, bc, restoreGateKind(g, false))
	c = startHost(t, cfg("c"), restoreGateKind(g, false))
	waitViews(t, a, b, c)
	ref = Ref{"counter", "later-owner"}
	for range 10 {
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
			t.Fatal(err)
		}
	}
	return n, a, b, c, ref
}

// cutShort starts a move of ref from a to b and cuts its Relocate short
// once lost says the record the hook drops was dropped; it waits for the
// Relocate's end.
func cutShort(t *testing.T, a *Host, ref Ref, lost func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() { first <- a.Relocate(ctx, ref, "b") }()
	waitFor(t, "the first move's record lost", lost)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut-short Relocate: %v; want the context's error", err)
	}
}

// TestALaterOwnersMoveEndsAnEarlierMoveFromAnotherSourceBeforeRelayReady:
// a move from a to b is given up at a before relay-ready (its Relocate
// cut short) and its Abort is lost, leaving b's incoming owner in place;
// the object runs on, moves on to c, and c moves it to b. c's Prepare
// names a later owner than the first move's, which therefore can never
// commit: b ends it at once and c's move succeeds with every Tell in the
// state — it does not fail finding the first move's incoming owner there.
func TestALaterOwnersMoveEndsAnEarlierMoveFromAnotherSourceBeforeRelayReady(t *testing.T) {
	var bLog syncBuffer
	n, a, b, c, ref := laterOwnerHosts(t, &bLog)
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	var mu sync.Mutex
	var firstMove relocation.MoveID
	var lost atomic.Int64
	n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := rec.(*relocation.Prepare); ok && firstMove == (relocation.MoveID{}) {
			firstMove = rec.MoveID()
		}
		switch rec.(type) {
		case *relocation.Chunk, *relocation.Abort: // b waits for the record, assembling
			if rec.MoveID() == firstMove {
				lost.Add(1)
				return false
			}
		}
		return true
	})
	cutShort(t, a, ref, func() bool { return lost.Load() >= 1 })
	waitFor(t, "the first move's Abort (lost)", func() bool { return lost.Load() >= 2 })
	waitFor(t, "the first move under way at b", func() bool { _, open := incomingMoves(b, "a", obj); return open == 1 })
	for range 5 { // the object runs on a again
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Relocate(bg, ref, "c"); err != nil {
		t.Fatalf("a to c: %v", err)
	}
	if err := c.Relocate(bg, ref, "b"); err != nil {
		t.Fatalf("c to b, with the first move from a still under way at b: %v", err)
	}
	if got, err := Ask[Get, int](bg, a, ref, Get{}); err != nil || got != 15 {
		t.Fatalf("after the moves: count %d (%v); want 15", got, err)
	}
	if _, open := incomingMoves(b, "a", obj); open != 0 {
		t.Fatalf("b still has %d moves of the object from a under way", open)
	}
	// It ended because c's move named a later owner — not by its own
	// wait for the record (AssemblyTimeout), which would also end it.
	if l := bLog.String(); !strings.Contains(l, "a later owner") {
		t.Fatalf("b did not end the first move for the later owner's move; its log:\n%s", l)
	}
	waitFor(t, "one owner, on b", func() bool {
		return b.Stats().OwnersActive == 1 && a.Stats().OwnersActive == 0 && c.Stats().OwnersActive == 0
	})
}

// TestALaterOwnersMoveWaitsForAnEarlierMoveFromAnotherSourcePastRelayReady:
// as above, but b had sent the first move's relay-ready (lost on its way)
// and a's Abort waits on a broken link. Only that Abort says the first
// move's captured messages went back to a, so c's move to b waits for it
// — it neither fails nor lets b hand those messages on — and completes
// once the link heals and the Abort arrives.
func TestALaterOwnersMoveWaitsForAnEarlierMoveFromAnotherSourcePastRelayReady(t *testing.T) {
	var bLog syncBuffer
	n, a, b, c, ref := laterOwnerHosts(t, &bLog)
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	var mu sync.Mutex
	var firstMove relocation.MoveID
	var lost atomic.Int64
	n.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := rec.(*relocation.Prepare); ok && firstMove == (relocation.MoveID{}) {
			firstMove = rec.MoveID()
		}
		if _, ok := rec.(*relocation.RelayReady); ok && rec.MoveID() == firstMove {
			lost.Add(1)
			return false
		}
		return true
	})
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() { first <- a.Relocate(ctx, ref, "b") }()
	waitFor(t, "the first move's relay-ready (lost)", func() bool { return lost.Load() == 1 })
	n.Net.Transport.Break("a", "b") // what a sends b waits on the link (a session resends it), its Abort too
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut-short Relocate: %v; want the context's error", err)
	}
	for range 5 { // the object runs on a again
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Relocate(bg, ref, "c"); err != nil {
		t.Fatalf("a to c: %v", err)
	}
	second := make(chan error, 1)
	go func() { second <- c.Relocate(bg, ref, "b") }()
	waitFor(t, "c's move waiting at b for the first move's end", func() bool {
		for _, d := range b.moves.allMoves() {
			if d.tgt != nil && d.peer == "c" && d.waiting.Load() {
				return true
			}
		}
		return false
	})
	select {
	case err := <-second:
		t.Fatalf("c to b ended (%v) while the first move from a was under way at b past relay-ready", err)
	default:
	}
	if _, open := incomingMoves(b, "a", obj); open != 1 {
		t.Fatalf("b has %d moves of the object from a under way; want the first one, in relay-ready", open)
	}
	n.Net.Transport.Heal("a", "b")
	if err := <-second; err != nil {
		t.Fatalf("c to b, once a's Abort arrived: %v", err)
	}
	if got, err := Ask[Get, int](bg, a, ref, Get{}); err != nil || got != 15 {
		t.Fatalf("after the moves: count %d (%v); want 15", got, err)
	}
	waitFor(t, "one owner, on b", func() bool {
		return b.Stats().OwnersActive == 1 && a.Stats().OwnersActive == 0 && c.Stats().OwnersActive == 0
	})
}
