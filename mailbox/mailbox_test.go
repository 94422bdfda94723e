package mailbox

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berthrt/berth/payload"
)

// manual is a dispatcher that keeps scheduled drains until the test runs them.
type manual struct {
	mu    sync.Mutex
	fns   []func()
	throu int
}

func (d *manual) Schedule(fn func()) { d.mu.Lock(); d.fns = append(d.fns, fn); d.mu.Unlock() }
func (d *manual) Throughput() int    { return d.throu }

// runAll runs scheduled drains until none is left.
func (d *manual) runAll() {
	for {
		d.mu.Lock()
		if len(d.fns) == 0 {
			d.mu.Unlock()
			return
		}
		fn := d.fns[0]
		d.fns = d.fns[1:]
		d.mu.Unlock()
		fn()
	}
}

func (d *manual) pending() int { d.mu.Lock(); defer d.mu.Unlock(); return len(d.fns) }

// goDispatcher runs each drain on a new goroutine, like protoactor's default.
type goDispatcher struct{ wg *sync.WaitGroup }

func (d goDispatcher) Schedule(fn func()) {
	d.wg.Add(1)
	go func() { defer d.wg.Done(); fn() }()
}
func (goDispatcher) Throughput() int { return 300 }

// recorder is a MessageInvoker that records what ran.
type recorder struct {
	mu      sync.Mutex
	ran     []any // Control values
	running atomic.Int32
	overlap atomic.Bool
	onTurn  func(e *Envelope)
}

func (r *recorder) InvokeSystemMessage(any)         {}
func (r *recorder) EscalateFailure(reason, msg any) {}
func (r *recorder) InvokeUserMessage(m any) {
	if r.running.Add(1) != 1 {
		r.overlap.Store(true)
	}
	e := m.(*Envelope)
	r.mu.Lock()
	r.ran = append(r.ran, e.Control)
	r.mu.Unlock()
	if r.onTurn != nil {
		r.onTurn(e)
	}
	r.running.Add(-1)
}

func (r *recorder) got() []any { r.mu.Lock(); defer r.mu.Unlock(); return append([]any(nil), r.ran...) }

func newTestMailbox(app, life Limits) (*Mailbox, *manual, *recorder) {
	m := New(app, life, nil)
	d := &manual{throu: 1000}
	r := &recorder{}
	m.RegisterHandlers(r, d)
	return m, d, r
}

func ctl(lane Lane, v any) *Envelope {
	e := NewEnvelope()
	e.Lane = lane
	e.Control = v
	return e
}

func TestLaneItemLimitAndFailedAdmissionChangesNothing(t *testing.T) {
	m, d, r := newTestMailbox(Limits{Items: 3, Bytes: 1 << 20}, Limits{})
	for i := 0; i < 3; i++ {
		if err := m.Admit(ctl(Application, i)); err != nil {
			t.Fatal(err)
		}
	}
	rejected := ctl(Application, "rejected")
	if err := m.Admit(rejected); !errors.Is(err, ErrFull) || !errors.Is(err, payload.CapacityExceeded) {
		t.Fatalf("4th admission = %v, want ErrFull (CapacityExceeded)", err)
	}
	rejected.Release() // the caller keeps a rejected envelope
	if d.pending() != 1 {
		t.Fatalf("%d drains scheduled, want exactly 1 (by whoever filled the empty queue)", d.pending())
	}
	d.runAll()
	next := ctl(Application, 3)
	if err := m.Admit(next); err != nil {
		t.Fatal(err)
	}
	if next.Seq != 3 {
		t.Fatalf("sequence after a failed admission = %d, want 3: the rejection must not consume a number", next.Seq)
	}
	d.runAll()
	if got := r.got(); len(got) != 4 || got[3] != 3 {
		t.Fatalf("ran %v", got)
	}
}

func TestLaneByteLimitCountsPayloadPlusOverheadUntilTurnEnds(t *testing.T) {
	var p payload.Pool
	reg := payload.NewRegistry()
	reg.Freeze()
	msg := func(n int) *Envelope {
		h := payload.Header{Target: payload.Target{Scope: payload.ScopeObject, Name: "k", ID: "1"}, Op: payload.NewOpID()}
		pm, err := payload.NewMessage(&p, reg, h, make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		e := NewEnvelope()
		e.Msg = pm
		return e
	}
	first := msg(1000)
	limit := first.Size()*2 + 10 // room for two items of this size, not three
	m, d, r := newTestMailbox(Limits{Items: 100, Bytes: limit}, Limits{})
	if err := m.Admit(first); err != nil {
		t.Fatal(err)
	}
	if err := m.Admit(msg(1000)); err != nil {
		t.Fatal(err)
	}
	third := msg(1000)
	if err := m.Admit(third); !errors.Is(err, ErrFull) {
		t.Fatalf("third = %v, want ErrFull", err)
	}
	// While a turn runs, its bytes stay reserved: a third item still does
	// not fit; after it ends, it does.
	r.onTurn = func(e *Envelope) {
		if e == first {
			if err := m.Admit(third); !errors.Is(err, ErrFull) {
				t.Errorf("admission during the turn = %v, want ErrFull (bytes reserved until the turn ends)", err)
			}
		}
	}
	d.runAll()
	if err := m.Admit(third); err != nil {
		t.Fatalf("admission after the turns = %v", err)
	}
	huge := msg(int(limit))
	if err := m.Admit(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("item larger than the lane = %v, want ErrTooLarge", err)
	}
	huge.Release()
	d.runAll()
}

func TestLifecycleRunsFirstAtMostEightInARow(t *testing.T) {
	m, d, r := newTestMailbox(Limits{}, Limits{})
	for i := 0; i < 5; i++ {
		if err := m.Admit(ctl(Application, "A")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if err := m.Admit(ctl(Lifecycle, "L")); err != nil {
			t.Fatal(err)
		}
	}
	d.runAll()
	var got string
	for _, v := range r.got() {
		got += v.(string)
	}
	want := "LLLLLLLLA" + "LLLLLLLLA" + "LLLL" + "AAA"
	if got != want {
		t.Fatalf("turn order\n got %s\nwant %s", got, want)
	}
}

func TestOneTurnAtATimeAndPerSenderOrder(t *testing.T) {
	m := New(Limits{Items: 1 << 20, Bytes: 1 << 40}, Limits{}, nil)
	var wg sync.WaitGroup
	r := &recorder{}
	m.RegisterHandlers(r, goDispatcher{&wg})
	const senders, each = 8, 2000
	var sendWG sync.WaitGroup
	for s := 0; s < senders; s++ {
		sendWG.Add(1)
		go func() {
			defer sendWG.Done()
			for i := 0; i < each; i++ {
				if err := m.Admit(ctl(Application, [2]int{s, i})); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	sendWG.Wait()
	wg.Wait()
	if r.overlap.Load() {
		t.Fatal("two turns of one owner ran at the same time")
	}
	next := make([]int, senders)
	got := r.got()
	if len(got) != senders*each {
		t.Fatalf("ran %d items, want %d", len(got), senders*each)
	}
	for _, v := range got {
		p := v.([2]int)
		if p[1] != next[p[0]] {
			t.Fatalf("sender %d: item %d ran when %d was due", p[0], p[1], next[p[0]])
		}
		next[p[0]]++
	}
}

func TestSealHoldsArrivalsAndDrainReturnsQueueInOrderWithoutRunning(t *testing.T) {
	m, d, r := newTestMailbox(Limits{}, Limits{})
	for i := 0; i < 3; i++ {
		m.Admit(ctl(Application, i))
	}
	m.Seal()
	for i := 3; i < 5; i++ {
		if err := m.Admit(ctl(Application, i)); err != nil {
			t.Fatalf("arrival while sealed = %v; it must be held, not rejected", err)
		}
	}
	m.Admit(ctl(Lifecycle, "control"))
	d.runAll()
	if got := r.got(); len(got) != 1 || got[0] != "control" {
		t.Fatalf("while sealed ran %v; only lifecycle items may run", got)
	}
	queued, held := m.Drain()
	if len(queued) != 3 || len(held) != 2 {
		t.Fatalf("drain = %d queued, %d held; want 3 and 2", len(queued), len(held))
	}
	for i, e := range append(queued, held...) {
		if e.Control != i || e.Seq != uint64(i) {
			t.Fatalf("item %d = %v (seq %d): order lost", i, e.Control, e.Seq)
		}
	}
	// Abort: put everything back in the original order and reopen.
	m.Admit(ctl(Application, 5)) // held after the drain
	m.Reopen(append(queued, held...))
	d.runAll()
	got := r.got()[1:]
	for i, v := range got {
		if v != i {
			t.Fatalf("after reopen ran %v, want 0..5 in order", got)
		}
	}
	if len(got) != 6 {
		t.Fatalf("after reopen ran %v", got)
	}
}

func TestCloseReturnsEverythingAndRefusesArrivals(t *testing.T) {
	m, d, r := newTestMailbox(Limits{}, Limits{})
	m.Admit(ctl(Application, "a1"))
	m.Admit(ctl(Lifecycle, "l1"))
	m.Seal()
	m.Admit(ctl(Application, "h1"))
	left := m.Close()
	if len(left) != 3 || left[0].Control != "l1" || left[1].Control != "a1" || left[2].Control != "h1" {
		t.Fatalf("Close returned %v", left)
	}
	for _, e := range left {
		e.Release()
	}
	late := ctl(Application, "late")
	if err := m.Admit(late); !errors.Is(err, ErrClosed) || !errors.Is(err, payload.NotFound) {
		t.Fatalf("admission after Close = %v, want ErrClosed", err)
	}
	late.Release()
	d.runAll()
	if len(r.got()) != 0 || !m.Closed() {
		t.Fatal("a closed mailbox ran items")
	}
}

func TestAdmitOrWaitSignalsRoom(t *testing.T) {
	m, d, _ := newTestMailbox(Limits{Items: 1, Bytes: 1 << 20}, Limits{})
	m.Admit(ctl(Application, 0))
	e := ctl(Application, 1)
	room, err := m.AdmitOrWait(e)
	if !errors.Is(err, ErrFull) || room == nil {
		t.Fatalf("AdmitOrWait on a full lane = %v, %v", room, err)
	}
	select {
	case <-room:
		t.Fatal("room signaled before any room freed")
	default:
	}
	d.runAll()
	select {
	case <-room:
	default:
		t.Fatal("room not signaled after the queued item ran")
	}
	if _, err := m.AdmitOrWait(e); err != nil {
		t.Fatal(err)
	}
	d.runAll()
}

func TestOverflowAdmissionIgnoresLaneLimits(t *testing.T) {
	m, d, r := newTestMailbox(Limits{Items: 1, Bytes: 1 << 20}, Limits{})
	m.Admit(ctl(Application, 0))
	if err := m.AdmitOverflow(ctl(Application, 1)); err != nil {
		t.Fatalf("AdmitOverflow = %v", err)
	}
	d.runAll()
	if len(r.got()) != 2 {
		t.Fatal("overflow item did not run")
	}
}

func TestEnvelopeReleaseReturnsPermitAndReleasesMessage(t *testing.T) {
	p := NewPermits(1, nil)
	if !p.TryAcquire() {
		t.Fatal("no permit")
	}
	e := NewEnvelope()
	e.HoldPermit(p)
	if !e.HasPermit() || p.InUse() != 1 {
		t.Fatal("permit not held")
	}
	e.Release()
	if p.InUse() != 0 {
		t.Fatal("Release did not return the permit")
	}
	mustPanic(t, "second Release", func() { e.Release() })
}

func TestYieldsAfterThroughputAndStaysScheduled(t *testing.T) {
	m, d, r := newTestMailbox(Limits{}, Limits{})
	d.throu = 2
	for i := 0; i < 5; i++ {
		m.Admit(ctl(Application, i))
	}
	d.mu.Lock()
	fn := d.fns[0]
	d.fns = nil
	d.mu.Unlock()
	fn()
	if len(r.got()) != 2 || d.pending() != 1 {
		t.Fatalf("after one drain: ran %d, rescheduled %d; want 2 and 1", len(r.got()), d.pending())
	}
	d.runAll()
	if len(r.got()) != 5 {
		t.Fatal("items lost across yields")
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}
