package actor

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Ledger is a persistent object's state in these tests.
type Ledger struct {
	N     int
	Notes int // notices received (Notify)
}

type Add struct {
	By     int
	Notify string // if set, a Notify goes to this ledger from the turn
}
type Notify struct{}
type Peek struct{}
type AddThenAsk struct {
	By int
	To string // a ledger asked for its count from the handler
}

// ledgerKind is a persistent kind; factories counts its factory's calls.
func ledgerKind(factories *atomic.Int64) *Kind[Ledger] {
	k := NewKind("ledger", func(ctx *Context, id string) (*Ledger, error) {
		if factories != nil {
			factories.Add(1)
		}
		return &Ledger{}, nil
	})
	HandleRequest(k, func(ctx *Context, l *Ledger, m Add) (int, error) {
		l.N += m.By
		if m.Notify != "" {
			if err := Tell(ctx, ctx.Host(), Ref{"ledger", m.Notify}, Notify{}); err != nil {
				return 0, err
			}
		}
		return l.N, nil
	})
	Handle(k, func(ctx *Context, l *Ledger, _ Notify) error { l.Notes++; return nil })
	HandleRequest(k, func(ctx *Context, l *Ledger, _ Peek) (Ledger, error) {
		ctx.StateUnchanged()
		return *l, nil
	})
	HandleRequest(k, func(ctx *Context, l *Ledger, m AddThenAsk) (int, error) {
		l.N += m.By
		other, err := Ask[Peek, Ledger](ctx, ctx.Host(), Ref{"ledger", m.To}, Peek{})
		return other.N, err
	})
	k.PersistStateJSON()
	return k
}

// holdingStates is a MemoryStore whose state writes can be held: each
// WriteStates call waits while the store is held.
type holdingStates struct {
	*relocation.MemoryStore
	mu      sync.Mutex
	gate    chan struct{} // nil: not held
	waiting atomic.Int64  // calls waiting now
}

func (s *holdingStates) hold() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *holdingStates) release() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *holdingStates) WriteStates(ctx context.Context, ws []relocation.StateWrite) ([]int, error) {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		s.waiting.Add(1)
		<-g
		s.waiting.Add(-1)
	}
	return s.MemoryStore.WriteStates(ctx, ws)
}

func stored(t *testing.T, ss relocation.StateStore, id string) (Ledger, uint64) {
	t.Helper()
	st, err := ss.LoadState(bg, relocation.Object{Kind: "ledger", ID: id})
	if err != nil {
		t.Fatalf("LoadState(%s) = %v", id, err)
	}
	var l Ledger
	if err := json.Unmarshal(st.Data, &l); err != nil {
		t.Fatalf("stored state of %s: %v", id, err)
	}
	return l, st.OwnerGen
}

// heldLedger starts a host with a persistent ledger kind on a holding
// state store, makes ledger x durable at N 1, then holds the store's
// writes.
func heldLedger(t *testing.T) (*Host, *relocation.MemoryStore, *holdingStates) {
	t.Helper()
	ms := relocation.NewMemoryStore(nil)
	ss := &holdingStates{MemoryStore: ms}
	h := startHost(t, Config{Name: "a", Store: ms, StateStore: ss, Logger: quietLogger()}, ledgerKind(nil))
	t.Cleanup(ss.release) // before the host's Close (cleanups run last first): a failed test leaves no write held
	if n, err := Ask[Add, int](bg, h, Ref{"ledger", "x"}, Add{By: 1}); err != nil || n != 1 {
		t.Fatalf("first Add = %d, %v", n, err)
	}
	ss.hold()
	return h, ms, ss
}

type askResult struct {
	n   int
	err error
}

func askAdd(h *Host, id string, m Add) chan askResult {
	ch := make(chan askResult, 1)
	go func() {
		n, err := Ask[Add, int](bg, h, Ref{"ledger", id}, m)
		ch <- askResult{n, err}
	}()
	return ch
}

// Output gate: a turn's reply, and a message its handler sent, leave only
// once the turn's write is durable; a later turn that changed nothing
// waits for it too, and writes nothing.
func TestATurnsOutputsLeaveOnlyOnceItsWriteIsDurable(t *testing.T) {
	h, _, ss := heldLedger(t)
	add := askAdd(h, "x", Add{By: 2, Notify: "y"})
	waitFor(t, "the write of the second Add to reach the store", func() bool { return ss.waiting.Load() == 1 })
	peek := make(chan Ledger, 1)
	go func() {
		l, _ := Ask[Peek, Ledger](bg, h, Ref{"ledger", "x"}, Peek{})
		peek <- l
	}()
	// The reply, the notice and the peek's reply wait in x's gate.
	waitFor(t, "three outputs held", func() bool { return h.Stats().OutputsHeld == 3 })
	select {
	case r := <-add:
		t.Fatalf("the Add's reply left before its write was durable: %+v", r)
	case <-peek:
		t.Fatal("a later turn's reply overtook the write before it")
	default:
	}
	if l, _ := stored(t, ss, "x"); l.N != 1 {
		t.Fatalf("stored N = %d while the write is held, want 1", l.N)
	}
	// y has not been told: a fresh y would have been activated by it.
	if o := h.owners.kinds["ledger"].local("y"); o != nil {
		t.Fatal("the notice to y left before x's write was durable")
	}
	writes := h.Stats().StateWrites
	ss.release()
	if r := <-add; r.err != nil || r.n != 3 {
		t.Fatalf("second Add = %+v, want 3", r)
	}
	if l := <-peek; l.N != 3 {
		t.Fatalf("peek = %+v, want N 3", l)
	}
	waitFor(t, "y to get its notice", func() bool {
		l, err := Ask[Peek, Ledger](bg, h, Ref{"ledger", "y"}, Peek{})
		return err == nil && l.Notes == 1
	})
	if l, _ := stored(t, ss, "x"); l.N != 3 {
		t.Fatalf("stored N = %d, want 3", l.N)
	}
	// The Peek wrote nothing: x's second Add and y's Notify are the writes.
	s := h.Stats()
	if got := s.StateWrites - writes; got != 2 {
		t.Errorf("%d writes after the release, want 2 (x's Add, y's notice; not the Peek)", got)
	}
	if s.OutputsHeld != 0 {
		t.Errorf("OutputsHeld = %d at rest", s.OutputsHeld)
	}
}

// An object whose state was written activates with it: the factory runs
// only for an object that never had one. Stop writes the final state.
func TestAPersistentObjectActivatesWithItsLastDurableState(t *testing.T) {
	ms := relocation.NewMemoryStore(nil)
	var factories atomic.Int64
	a := startHost(t, Config{Name: "a", Store: ms, Logger: quietLogger()}, ledgerKind(&factories))
	for range 5 {
		if _, err := Ask[Add, int](bg, a, Ref{"ledger", "x"}, Add{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Stop(bg); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := startHost(t, Config{Name: "b", Store: ms, Logger: quietLogger()}, ledgerKind(&factories))
	if l, err := Ask[Peek, Ledger](bg, b, Ref{"ledger", "x"}, Peek{}); err != nil || l.N != 5 {
		t.Fatalf("x on b = %+v, %v; want N 5", l, err)
	}
	if n := factories.Load(); n != 1 {
		t.Fatalf("the factory ran %d times, want once (for the first activation only)", n)
	}
}

// A write of a former owner is fenced: the activation ends, what it held
// fails (Unavailable), and the stored state keeps the newer owner's.
func TestAFencedWriteEndsTheActivationAndFailsWhatItHeld(t *testing.T) {
	h, ms, ss := heldLedger(t)
	add := askAdd(h, "x", Add{By: 2})
	waitFor(t, "the write to reach the store", func() bool { return ss.waiting.Load() == 1 })
	// Meanwhile the object gets a newer owner (as a takeover after a
	// pause past the lease would give it).
	obj := relocation.Object{Kind: "ledger", ID: "x"}
	row, err := ms.Get(bg, obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.RenewLease(bg, "b", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.NewOwner(bg, obj, row.Ownership, "b"); err != nil {
		t.Fatal(err)
	}
	ss.release()
	r := <-add
	if !errors.Is(r.err, payload.Unavailable) || !errors.Is(r.err, errFenced) {
		t.Fatalf("the fenced turn's Ask = %+v, want errFenced (Unavailable)", r)
	}
	if l, gen := stored(t, ss, "x"); l.N != 1 || gen != row.OwnerGen {
		t.Fatalf("stored %+v by owner generation %d, want N 1 by %d", l, gen, row.OwnerGen)
	}
	waitFor(t, "the fenced activation to end", func() bool { return h.owners.kinds["ledger"].local("x") == nil })
	if s := h.Stats(); s.StateFenced != 1 || s.OutputsDropped < 1 {
		t.Fatalf("StateFenced %d, OutputsDropped %d; want 1 and at least 1", s.StateFenced, s.OutputsDropped)
	}
}

// A store outage: outputs wait and the writes are retried; nothing
// acknowledged is lost and the turns keep their order.
func TestAStateStoreOutageHoldsOutputsAndLosesNothing(t *testing.T) {
	ms := relocation.NewMemoryStore(nil)
	h := startHost(t, Config{Name: "a", Store: ms, Logger: quietLogger()}, ledgerKind(nil))
	if _, err := Ask[Add, int](bg, h, Ref{"ledger", "x"}, Add{By: 1}); err != nil {
		t.Fatal(err)
	}
	down := payload.NewError(payload.Unavailable, "test", "the state store is down")
	ms.FailStateWrites(func([]relocation.StateWrite) error { return down })
	var adds []chan askResult
	for range 5 {
		adds = append(adds, askAdd(h, "x", Add{By: 1}))
	}
	waitFor(t, "the writes to be retried", func() bool { return h.Stats().StateWriteErrors >= 3 })
	for i, ch := range adds {
		select {
		case r := <-ch:
			t.Fatalf("Add %d answered during the outage: %+v", i, r)
		default:
		}
	}
	ms.FailStateWrites(nil)
	seen := map[int]bool{}
	for _, ch := range adds {
		r := <-ch
		if r.err != nil {
			t.Fatalf("Add after the outage = %v", r.err)
		}
		seen[r.n] = true
	}
	for n := 2; n <= 6; n++ {
		if !seen[n] {
			t.Fatalf("the Adds answered %v, want each of 2..6 once", seen)
		}
	}
	if l, _ := stored(t, ms, "x"); l.N != 6 {
		t.Fatalf("stored N = %d, want 6", l.N)
	}
}

// An Ask from a persistent handler first makes the state durable: what
// it asks never depends on state a crash could take back.
func TestAnAskFromAPersistentHandlerWaitsForTheStateToBeDurable(t *testing.T) {
	h, _, ss := heldLedger(t)
	done := make(chan error, 1)
	go func() {
		_, err := Ask[AddThenAsk, int](bg, h, Ref{"ledger", "x"}, AddThenAsk{By: 10, To: "y"})
		done <- err
	}()
	waitFor(t, "x's mid-turn write to reach the store", func() bool { return ss.waiting.Load() == 1 })
	if o := h.owners.kinds["ledger"].local("y"); o != nil {
		t.Fatal("the handler's Ask left before x's state was durable")
	}
	ss.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l, _ := stored(t, ss, "x"); l.N != 11 {
		t.Fatalf("stored N = %d, want 11", l.N)
	}
}

// A move of a persistent object: the source's writes are durable before
// it captures; the target writes under its new owner generation.
func TestAPersistentObjectMovesAndItsNewOwnerWrites(t *testing.T) {
	n := NewNetwork(nil)
	cfg := func(name string) Config {
		return n.With(Config{Name: name, Logger: quietLogger()})
	}
	a := startHost(t, cfg("a"), ledgerKind(nil))
	b := startHost(t, cfg("b"), ledgerKind(nil))
	waitViews(t, a, b)
	ref := Ref{"ledger", "m"}
	ss := n.Store().(relocation.StateStore)
	for i := range 50 {
		if _, err := Ask[Add, int](bg, a, ref, Add{By: 1}); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
	_, gen := stored(t, ss, "m")
	if err := a.Relocate(bg, ref, "b"); err != nil {
		t.Fatal(err)
	}
	if l, _ := stored(t, ss, "m"); l.N != 50 {
		t.Fatalf("stored N after the move = %d, want 50", l.N)
	}
	if got, err := Ask[Add, int](bg, a, ref, Add{By: 1}); err != nil || got != 51 {
		t.Fatalf("Add after the move = %d, %v", got, err)
	}
	l, gen2 := stored(t, ss, "m")
	if l.N != 51 || gen2 != gen+1 {
		t.Fatalf("stored %+v by owner generation %d, want N 51 by %d", l, gen2, gen+1)
	}
}

// Start refuses a persistent kind on a host with no state store.
func TestAPersistentKindNeedsAStateStore(t *testing.T) {
	h, err := NewHost(Config{Name: "a", Store: storeOnly{relocation.NewMemoryStore(nil)}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_ = h.Register(ledgerKind(nil))
	if err := h.Start(); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Start = %v, want InvalidOperation naming the missing state store", err)
	}
}

// storeOnly hides every method but the Location Store's.
type storeOnly struct{ relocation.Store }

// Every write of a persistent kind leaves a non-persistent one untouched:
// its turns hold nothing and write nothing.
func TestANonPersistentKindHoldsAndWritesNothing(t *testing.T) {
	h := startHost(t, Config{Name: "a", Logger: quietLogger()}, counterKind(newGates()))
	for range 10 {
		if _, err := Ask[Get, int](bg, h, Ref{"counter", "c"}, Get{}); err != nil {
			t.Fatal(err)
		}
	}
	if s := h.Stats(); s.StateWrites != 0 || s.StateFlushes != 0 || s.OutputsHeld != 0 {
		t.Fatalf("stats %+v: a kind that does not persist wrote or held", s)
	}
	if o := h.owners.kinds["counter"].local("c"); o == nil || o.gate != nil {
		t.Fatal("a non-persistent owner has a gate")
	}
}

// An encoded request (how pgbridge delivers a row and settles it on the
// outcome) to a persistent one-way handler completes only once the turn's
// write is durable: a row is never settled on a state a crash could take
// back.
func TestAnEncodedRequestsOutcomeWaitsForItsTurnsWrite(t *testing.T) {
	h, _, ss := heldLedger(t)
	done := make(chan error, 1)
	go func() {
		_, err := h.Deliver(bg, Ref{"ledger", "x"}, Encoded{Type: TypeName[Notify](), ContentType: "application/json", Body: []byte(`{}`)})
		done <- err
	}()
	waitFor(t, "the notice's write to reach the store", func() bool { return ss.waiting.Load() == 1 })
	waitFor(t, "the outcome to be held", func() bool { return h.Stats().OutputsHeld == 1 })
	select {
	case err := <-done:
		t.Fatalf("the encoded request completed (%v) before its turn's write was durable", err)
	default:
	}
	ss.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l, _ := stored(t, ss, "x"); l.Notes != 1 {
		t.Fatalf("stored %+v, want the notice", l)
	}
}
