package actor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
)

// Stop and Drain whose context ends first follow net/http's
// Server.Shutdown: they return the context's error promptly and the host
// does not close — it keeps serving what it has not handed on — a later
// call finishes, and only Close drops work, counted in
// Stats.DroppedOnClose. Host a sends flat out (Tell and Ask, numbered per
// sender and object) to objects on host b; one object of b runs a handler
// that waits for the test, so that b cannot finish before its deadline
// whatever the machine's speed, and numbered Tells from b itself wait
// behind it.

// StopInc is a numbered Tell: the Seq-th message of Sender to object Obj.
type StopInc struct{ Obj, Sender, Seq int }

// stopBlockerObj and stopLocalSender name the blocking object and b's own
// sender in StopInc.
const (
	stopBlockerObj  = -1
	stopLocalSender = 100
	stopObjects     = 50
	stopSenders     = 8
	stopBehind      = 25 // numbered Tells queued behind the blocking handler
	stopDeadline    = 300 * time.Millisecond
)

// stopLate is how far past its deadline a cut-short Stop or Drain may
// return, beyond the scheduler's own delay in waking a goroutine then
// (wakeLate): 100 ms, more under the race detector, which slows every
// goroutine down several times.
func stopLate() time.Duration {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return 250 * time.Millisecond
			}
		}
	}
	return 100 * time.Millisecond
}

// wakeLate starts a goroutine that waits for ctx as Stop does, and returns
// a function that tells how late after the deadline it woke: the
// scheduler's own delay on this machine at that moment, on top of which
// stopLate bounds Stop's (another process loading the machine delays
// both alike).
func wakeLate(ctx context.Context, start time.Time, deadline time.Duration) func() time.Duration {
	woke := make(chan time.Duration, 1)
	go func() {
		<-ctx.Done()
		woke <- time.Since(start) - deadline
	}()
	return func() time.Duration { return <-woke }
}

type stopRig struct {
	t       *testing.T
	seed    uint64
	movable bool
	a, b    *Host
	g       *gates
	bLog    *testutil.Buffer

	mu       sync.Mutex
	ran      map[StopInc]int // guarded by mu
	ranOnB   map[int]int     // runs on b, by sender; guarded by mu
	last     map[[2]int]int  // (object, sender) → last Seq run; guarded by mu
	disorder string          // the first message that ran out of order; guarded by mu

	accepted   atomic.Int64
	halted     chan struct{}
	wg         sync.WaitGroup
	accMu      sync.Mutex
	acceptedBy [][]StopInc // per sender, in the order accepted; guarded by accMu after the senders end
	badMu      sync.Mutex
	bad        error // a send error a sender cannot act on; guarded by badMu
}

// newStopRig starts hosts a and b; sendTimeout is how long a's senders wait
// for b to hand an object on once it leaves.
func newStopRig(t *testing.T, movable bool, sendTimeout time.Duration) *stopRig {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := &stopRig{t: t, seed: seed, movable: movable, g: newGates(), bLog: &testutil.Buffer{},
		ran: map[StopInc]int{}, ranOnB: map[int]int{}, last: map[[2]int]int{}, halted: make(chan struct{}),
		acceptedBy: make([][]StopInc, stopSenders)}
	kind := func() Registrable {
		k := NewKind("stop", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
		Handle(k, func(ctx *Context, c *Counter, m StopInc) error {
			c.N++
			r.mu.Lock()
			r.ran[m]++
			if ctx.Host().Name() == "b" {
				r.ranOnB[m.Sender]++
			}
			k := [2]int{m.Obj, m.Sender}
			if m.Seq <= r.last[k] && r.disorder == "" {
				r.disorder = fmt.Sprintf("object %d: message %d of sender %d ran after its message %d", m.Obj, m.Seq, m.Sender, r.last[k])
			}
			r.last[k] = m.Seq
			r.mu.Unlock()
			return nil
		})
		HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
		Handle(k, func(ctx *Context, c *Counter, m Block) error { r.g.block(ctx, m.Key); return nil })
		if movable {
			k.PreserveStateJSON()
		}
		return k
	}
	n := NewNetwork(nil)
	// A gap closes only after a host's failure, and then after GapTimeout:
	// an hour, so that a message lost on the way without a skip notice
	// would hold its successors, and the test would see them not run.
	cfg := n.With(Config{Logger: quietLogger(), GapTimeout: time.Hour, SendTimeout: sendTimeout})
	ca, cb := cfg, cfg
	ca.Name, cb.Name = "a", "b"
	cb.Logger = slog.New(slog.NewTextHandler(r.bLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r.a = startHost(t, ca, kind())
	r.b = startHost(t, cb, kind())
	waitViews(t, r.a, r.b)
	for i := 0; i < stopObjects; i++ { // they live on b
		if _, err := Ask[Get, int](bg, r.b, stopRef(i), Get{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Ask[Get, int](bg, r.b, stopRef(stopBlockerObj), Get{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func stopRef(i int) Ref {
	if i == stopBlockerObj {
		return Ref{"stop", "blocker"}
	}
	return Ref{"stop", itoa(i)}
}

// send starts a's senders: flat out, even ones Tell only, odd ones Ask
// one time in eight.
func (r *stopRig) send() {
	for s := 0; s < stopSenders; s++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			rng := rand.New(rand.NewPCG(r.seed, uint64(s)))
			next := make([]int, stopObjects)
			var acc []StopInc
			defer func() {
				r.accMu.Lock()
				r.acceptedBy[s] = acc
				r.accMu.Unlock()
			}()
			for {
				select {
				case <-r.halted:
					return
				default:
				}
				i := rng.IntN(stopObjects)
				var err error
				if s%2 == 1 && rng.IntN(8) == 0 {
					ctx, cancel := context.WithTimeout(bg, 30*time.Second)
					_, err = Ask[Get, int](ctx, r.a, stopRef(i), Get{})
					cancel()
				} else {
					next[i]++
					m := StopInc{Obj: i, Sender: s, Seq: next[i]}
					if err = Tell(bg, r.a, stopRef(i), m); err == nil {
						acc = append(acc, m)
						r.accepted.Add(1)
					}
				}
				// While b leaves, a send to an object it has not handed on
				// waits in its sender and may fail in vain (Unavailable,
				// or a send timeout): an error the sender can act on.
				if err != nil && !errors.Is(err, payload.Unavailable) && !errors.Is(err, payload.DeadlineExceeded) {
					r.badMu.Lock()
					r.bad = err
					r.badMu.Unlock()
				}
			}
		}()
	}
}

// halt stops the senders and waits for them.
func (r *stopRig) halt() {
	select {
	case <-r.halted:
	default:
		close(r.halted)
	}
	r.wg.Wait()
}

// block starts the blocking handler on b's blocker object and queues
// stopBehind numbered Tells from b behind it.
func (r *stopRig) block() {
	t := r.t
	if err := Tell(bg, r.b, stopRef(stopBlockerObj), Block{Key: "stop"}); err != nil {
		t.Fatal(err)
	}
	r.g.waitStarted(t, "stop")
	for seq := 1; seq <= stopBehind; seq++ {
		if err := Tell(bg, r.b, stopRef(stopBlockerObj), StopInc{Obj: stopBlockerObj, Sender: stopLocalSender, Seq: seq}); err != nil {
			t.Fatal(err)
		}
	}
}

// starve keeps every processor busy with spinning goroutines (three per
// P) until the returned function is called.
func starve() (end func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < 3*runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// ranCount returns how many numbered Tells ran (counting repeats), and
// how many of them ran on b from sender.
func (r *stopRig) ranCount(sender int) (all, onB int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.ran {
		all += n
	}
	return all, r.ranOnB[sender]
}

// cutShort runs b.Stop (or b.Drain) with a short deadline while a sends
// flat out and the blocker holds b, the machine starved or not, and
// checks that it returns its context's error promptly and leaves b
// serving, leaving as it got to.
func (r *stopRig) cutShort(drain, starved bool) {
	t := r.t
	waitFor(t, "load on b", func() bool { return r.accepted.Load() > 2000 })
	r.block()
	if starved {
		defer starve()()
	}
	call, stopOrDrain := "Stop", r.b.Stop
	if drain {
		call, stopOrDrain = "Drain", r.b.Drain
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(bg, start.Add(stopDeadline))
	defer cancel()
	ref := wakeLate(ctx, start, stopDeadline)
	err := stopOrDrain(ctx)
	took := time.Since(start)
	late, woke := took-stopDeadline, ref()
	t.Logf("%s cut short after %v (deadline %v; a goroutine waiting for it woke %v late): %v", call, took, stopDeadline, woke, err)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, DeadlineExceeded) {
		t.Fatalf("%s: %v; want the context's error (kind DeadlineExceeded)", call, err)
	}
	if late-woke > stopLate() {
		t.Errorf("%s returned %v after its deadline, a goroutine waiting for it woke %v after it (at most %v more)", call, late, woke, stopLate())
	}
	select {
	case <-r.b.Done():
		t.Fatalf("%s closed the host when its context ended", call)
	default:
	}
	if ds := r.b.DrainState(); r.movable || drain {
		if ds != Relocating && ds != Draining {
			t.Fatalf("drain state %v after the cut-short %s; want relocating or draining", ds, call)
		}
	} else if err := Tell(bg, r.b, stopRef(0), StopInc{Obj: 0, Sender: stopLocalSender + 1, Seq: 1}); !errors.Is(err, ShuttingDown) {
		t.Fatalf("a Tell on b after the cut-short Stop: %v; want ShuttingDown (the host stays stopping)", err)
	}
	// Peers place nothing new on b: it is draining in the membership.
	waitFor(t, "a to see b draining", func() bool {
		m, ok := r.a.peers.view.member("b")
		return ok && m.State == membership.Draining
	})
}

// check waits until every accepted Tell ran, then checks that each ran
// exactly once, in order per sender and object, that none ran that was
// not accepted and that, for objects that move, their state went with
// them.
func (r *stopRig) check() {
	t := r.t
	r.halt()
	r.badMu.Lock()
	bad := r.bad
	r.badMu.Unlock()
	if bad != nil {
		t.Fatalf("a send failed with an error the sender cannot act on: %v", bad)
	}
	accepted := map[StopInc]bool{}
	perObj := map[int]int{}
	for _, acc := range r.acceptedBy {
		for _, m := range acc {
			accepted[m] = true
			perObj[m.Obj]++
		}
	}
	for seq := 1; seq <= stopBehind; seq++ {
		accepted[StopInc{Obj: stopBlockerObj, Sender: stopLocalSender, Seq: seq}] = true
		perObj[stopBlockerObj]++
	}
	waitFor(t, "every accepted Tell to run", func() bool { n, _ := r.ranCount(0); return n >= len(accepted) })
	for i := 0; i < stopObjects; i++ { // each object's queue has run: nothing more can come
		if _, err := Ask[Get, int](bg, r.a, stopRef(i), Get{}); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	lost, dup, phantom := 0, 0, 0
	for m := range accepted {
		switch n := r.ran[m]; {
		case n == 0:
			lost++
		case n > 1:
			dup += n - 1
		}
	}
	for m, n := range r.ran {
		if !accepted[m] {
			phantom += n
		}
	}
	if lost+dup+phantom > 0 {
		t.Fatalf("%d Tells accepted: %d never ran, %d ran twice, %d ran that were not accepted", len(accepted), lost, dup, phantom)
	}
	if r.disorder != "" {
		t.Fatal(r.disorder)
	}
	if r.movable {
		r.mu.Unlock()
		for i := stopBlockerObj; i < stopObjects; i++ {
			n, err := Ask[Get, int](bg, r.a, stopRef(i), Get{})
			if err != nil || n != perObj[i] {
				r.mu.Lock()
				t.Fatalf("object %d counts %d Tells (err %v); %d ran: its state did not go with it\n%s", i, n, err, perObj[i], r.movesOf(stopRef(i)))
			}
		}
		r.mu.Lock()
	}
	t.Logf("%d Tells accepted and run once each", len(accepted))
}

// movesOf describes, for a failure, the moves of ref on a and b, b's log
// and both hosts' lease figures.
func (r *stopRig) movesOf(ref Ref) string {
	var b strings.Builder
	for _, h := range []*Host{r.a, r.b} {
		for _, m := range h.RecentMoves(0) {
			if m.Ref == ref {
				fmt.Fprintf(&b, "move %d %s→%s %v: %s (%s)\n", m.Seq, m.From, m.To, m.Ended.Sub(m.Started), m.Outcome, m.Reason)
			}
		}
		st := h.Stats()
		fmt.Fprintf(&b, "%s: jeopardies %d, lapses %d, taken over %d\n", h.Name(), st.Jeopardies, st.LeaseLapses, st.TakenOver)
	}
	return b.String() + "b's log:\n" + r.bLog.String()
}

// TestStopCutShortByItsContextKeepsServingAndAStopAgainFinishes: Stop with
// a short deadline, under flat-out remote senders, idle or with the
// machine starved, returns its context's error within 100 ms of the
// deadline, the host keeps serving (the objects run their queued
// messages), a second Stop finishes, and every accepted Tell runs exactly
// once.
func TestStopCutShortByItsContextKeepsServingAndAStopAgainFinishes(t *testing.T) {
	for _, movable := range []bool{false, true} {
		for _, starved := range []bool{false, true} {
			name := map[bool]string{false: "objects deactivate", true: "objects move"}[movable] + "/" +
				map[bool]string{false: "idle", true: "starved"}[starved]
			t.Run(name, func(t *testing.T) { stopAgain(t, movable, false, starved) })
		}
	}
}

// TestDrainCutShortByItsContextKeepsServingAndADrainAgainFinishes is the
// same with Drain.
func TestDrainCutShortByItsContextKeepsServingAndADrainAgainFinishes(t *testing.T) {
	for _, starved := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "starved"}[starved], func(t *testing.T) { stopAgain(t, true, true, starved) })
	}
}

func stopAgain(t *testing.T, movable, drain, starved bool) {
	// a's senders wait for b's objects while b leaves, however long the
	// machine takes to get to the second Stop: a send that gave up would
	// leave a gap whose skip notice b, leaving, cannot take, and the
	// sender's later messages to that object would wait behind it.
	r := newStopRig(t, movable, time.Minute)
	defer r.halt() // also when the test fails: before the hosts close
	r.send()
	r.cutShort(drain, starved)
	r.g.release("stop")
	if !movable {
		// The host keeps serving: the messages queued behind the blocker
		// run there once it returns.
		waitFor(t, "the blocker's queue to run on b", func() bool { _, onB := r.ranCount(stopLocalSender); return onB == stopBehind })
	}
	// (Where objects move, the move the cut-short drain asked for of the
	// blocker goes on now that its turn ended: the second Stop begins
	// while it runs, and must wait for it rather than deactivate the
	// object under it.)
	call, stopOrDrain := "Stop", r.b.Stop
	if drain {
		call, stopOrDrain = "Drain", r.b.Drain
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second) // a hang, not a measurement
	defer cancel()
	start := time.Now()
	if err := stopOrDrain(ctx); err != nil {
		t.Fatalf("second %s: %v", call, err)
	}
	t.Logf("second %s took %v", call, time.Since(start))
	select {
	case <-r.b.Done():
	default:
		t.Fatalf("second %s returned nil and the host is not closed", call)
	}
	if drain && r.b.DrainState() != Stopped {
		t.Fatalf("drain state %v after the drain; want stopped", r.b.DrainState())
	}
	// The senders go on: the objects now live on a.
	after := r.accepted.Load()
	waitFor(t, "sends to succeed after the stop", func() bool { return r.accepted.Load() > after+1000 })
	r.check()
	if n := r.b.Stats().DroppedOnClose; n != 0 {
		t.Fatalf("Stats.DroppedOnClose = %d after a Stop that returned nil", n)
	}
}

// TestCloseAfterAStopCutShortCountsWhatItDrops: Close after a Stop or
// Drain whose context ended drops what the host still holds — here the
// Tells queued behind the blocking handler — counts it in
// Stats.DroppedOnClose (accepted minus run) and logs the count; every
// other accepted Tell ran once.
func TestCloseAfterAStopCutShortCountsWhatItDrops(t *testing.T) {
	for _, tc := range []struct {
		name           string
		movable, drain bool
	}{{"Stop, objects deactivate", false, false}, {"Stop, objects move", true, false}, {"Drain", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStopRig(t, tc.movable, time.Second) // a's senders give up on b's objects soon: b never hands them on
			defer r.halt()
			r.send()
			r.cutShort(tc.drain, false)
			r.halt()
			// b has nothing left but the blocker's queue, and messages it
			// holds out of order, once everything else sent to the other
			// objects ran. (A message a refused while b left, after a later
			// one got through, leaves a gap that b, leaving, cannot hear
			// the skip notice of: the later one waits at b until b hands
			// its object on — or, here, until Close drops it.)
			var acc int
			for _, a := range r.acceptedBy {
				acc += len(a)
			}
			waitFor(t, "b to hold nothing but the blocker's queue and messages held out of order", func() bool {
				n, _ := r.ranCount(0)
				st := r.b.Stats()
				return n+st.HeldOutOfOrder >= acc && st.QueuedApplication == stopBehind && st.PermitWaiters == 0 &&
					st.PermitsInUse == stopBehind
			})
			held := r.b.Stats().HeldOutOfOrder
			if err := r.b.Close(); err != nil {
				t.Fatal(err)
			}
			ran, _ := r.ranCount(0)
			accepted := acc + stopBehind
			if got := r.b.Stats().DroppedOnClose; got != int64(accepted-ran) || got != int64(stopBehind+held) {
				t.Fatalf("Stats.DroppedOnClose = %d; %d Tells accepted, %d ran, %d queued behind the blocker and %d held (want %d dropped)",
					got, accepted, ran, stopBehind, held, accepted-ran)
			}
			t.Logf("Close dropped %d: %d queued behind the blocker, %d held out of order", stopBehind+held, stopBehind, held)
			if want := "dropped=" + itoa(stopBehind+held); !strings.Contains(r.bLog.String(), want) {
				t.Fatalf("Close logged no %q at Warn:\n%s", want, r.bLog.String())
			}
		})
	}
}

// TestStopCutShortOnAStandaloneHostKeepsItsQueue: a standalone host whose
// Stop's context ends while a handler blocks keeps the request queued
// behind it; a second Stop runs it once the handler returns, or Close
// ends it with ShuttingDown and counts it in Stats.DroppedOnClose. Every
// payload is released once either way.
func TestStopCutShortOnAStandaloneHostKeepsItsQueue(t *testing.T) {
	for _, then := range []string{"stop again", "close"} {
		t.Run(then, func(t *testing.T) {
			g := newGates()
			l := newLedger()
			h, _ := NewHost(Config{OnPayloadRelease: l.Observe, Logger: quietLogger()})
			h.Register(counterKind(g))
			h.Start()
			Tell(bg, h, Ref{"counter", "a"}, Block{Key: "gate"})
			g.waitStarted(t, "gate")
			got := make(chan error, 1)
			go func() { _, err := Ask[Get, int](bg, h, Ref{"counter", "a"}, Get{}); got <- err }()
			waitFor(t, "queued", func() bool { return h.Stats().QueuedApplication == 1 })
			ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
			defer cancel()
			if err := h.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, DeadlineExceeded) {
				t.Fatalf("Stop = %v, want the context's error (kind DeadlineExceeded)", err)
			}
			select {
			case <-h.Done():
				t.Fatal("the cut-short Stop closed the host")
			case err := <-got:
				t.Fatalf("the cut-short Stop ended the queued request: %v", err)
			default:
			}
			if err := Tell(bg, h, Ref{"counter", "b"}, Inc{}); !errors.Is(err, ShuttingDown) {
				t.Fatalf("send after the cut-short Stop = %v; want ShuttingDown (the host stays stopping)", err)
			}
			if then == "close" {
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				if err := <-got; !errors.Is(err, ShuttingDown) {
					t.Fatalf("queued request after Close = %v; want ShuttingDown", err)
				}
				if n := h.Stats().DroppedOnClose; n != 1 {
					t.Fatalf("Stats.DroppedOnClose = %d; want 1 (the queued request)", n)
				}
			} else {
				g.release("gate")
				if err := h.Stop(bg); err != nil {
					t.Fatalf("second Stop: %v", err)
				}
				if err := <-got; err != nil {
					t.Fatalf("queued request after the second Stop: %v; want its reply", err)
				}
				if n := h.Stats().DroppedOnClose; n != 0 {
					t.Fatalf("Stats.DroppedOnClose = %d after a Stop that returned nil", n)
				}
			}
			checkNoHostGoroutines(t)
			l.CheckExactlyOnce(t, h.Stats().Payload.Buffers)
		})
	}
}

// StopRelay asks a handler to send N numbered Tells to object ID of kind
// "stop".
type StopRelay struct {
	ID string
	N  int
}

// relayKind is a kind whose handler sends StopRelay's Tells, counting the
// ones accepted; ran counts the StopIncs its objects run.
func relayKind(name string, accepted, ran *atomic.Int64) *Kind[Counter] {
	k := NewKind(name, func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m StopRelay) error {
		for i := 1; i <= m.N; i++ {
			if err := Tell(ctx, ctx.Host(), Ref{"stop", m.ID}, StopInc{Seq: i}); err != nil {
				return err
			}
			accepted.Add(1)
		}
		return nil
	})
	return k
}

// TestCloseCountsHandlersSendsWaitingForAPermit: a handler's sends that
// wait for a job permit when Close comes were accepted (Tell returned
// nil): Close counts them in Stats.DroppedOnClose with the queued ones.
func TestCloseCountsHandlersSendsWaitingForAPermit(t *testing.T) {
	g := newGates()
	var accepted, ran, relayed atomic.Int64
	k := NewKind("stop", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m Block) error { g.block(ctx, m.Key); return nil })
	Handle(k, func(ctx *Context, c *Counter, m StopInc) error { ran.Add(1); return nil })
	// Three permits: the two Tells queued behind the blocked handler hold
	// two, the relay's message takes the third and gives it back as its
	// handler starts; the handler's first send takes it again, the other
	// two wait in its outbox.
	h := startHost(t, Config{MaxQueuedApplicationJobs: 3, Logger: quietLogger()}, k, relayKind("relay", &relayed, &ran))
	blocker := Ref{"stop", "x"}
	if err := Tell(bg, h, blocker, Block{Key: "x"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "x")
	for i := 1; i <= 2; i++ {
		if err := Tell(bg, h, blocker, StopInc{Seq: i}); err != nil {
			t.Fatal(err)
		}
		accepted.Add(1)
	}
	if err := Tell(bg, h, Ref{"relay", "r"}, StopRelay{ID: "x", N: 3}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relay's three sends", func() bool { return relayed.Load() == 3 })
	waitFor(t, "a send waiting for a permit", func() bool {
		st := h.Stats()
		return st.PermitWaiters == 1 && st.QueuedApplication == 3 && st.PermitsInUse == 3
	})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	want := accepted.Load() + relayed.Load() - ran.Load()
	if got := h.Stats().DroppedOnClose; got != want || got != 5 {
		t.Fatalf("Stats.DroppedOnClose = %d; %d Tells accepted, %d ran: want %d (3 queued, 2 waiting for a permit)",
			got, accepted.Load()+relayed.Load(), ran.Load(), want)
	}
}

// TestCloseCountsHandlersSendsWaitingForALeavingHost: a handler's send to
// an object whose host is leaving and has not handed it on waits in the
// sending host (up to SendTimeout); Close of the sending host meanwhile
// counts it in Stats.DroppedOnClose.
func TestCloseCountsHandlersSendsWaitingForALeavingHost(t *testing.T) {
	n := NewNetwork(nil)
	var relayed, ran atomic.Int64
	kind := func() Registrable {
		k := NewKind("stop", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
		Handle(k, func(ctx *Context, c *Counter, m StopInc) error { ran.Add(1); return nil })
		return k
	}
	cfg := n.With(Config{Logger: quietLogger(), SendTimeout: time.Minute})
	ca, cb := cfg, cfg
	ca.Name, cb.Name = "a", "b"
	a := startHost(t, ca, kind(), relayKind("relay", &relayed, &ran))
	b := startHost(t, cb, kind(), relayKind("relay", &relayed, &ran))
	waitViews(t, a, b)
	if err := Tell(bg, b, Ref{"stop", "x"}, StopInc{}); err != nil { // x lives on b
		t.Fatal(err)
	}
	waitFor(t, "x to run on b", func() bool { return ran.Load() == 1 })
	b.drainer.beginLeave() // as a Stop whose context ended leaves it: x not handed on
	waitFor(t, "a to see b leave", func() bool { return a.peers.view.leavingOrGone("b") })
	if err := Tell(bg, a, Ref{"relay", "r"}, StopRelay{ID: "x", N: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relay's sends to wait for b", func() bool {
		a.admit.deferred.mu.Lock()
		defer a.admit.deferred.mu.Unlock()
		return relayed.Load() == 2 && len(a.admit.deferred.list) == 2
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := a.Stats().DroppedOnClose; got != 2 || ran.Load() != 1 {
		t.Fatalf("Stats.DroppedOnClose = %d, %d ran; want the 2 deferred sends dropped, none run", got, ran.Load()-1)
	}
}

// TestDrainCutShortKeepsTheObjectsItCouldNotMove: a Drain whose context
// ends while its moves are under way (the link to the other host is slow)
// aborts them and leaves their objects where they are, serving with their
// state: none is deactivated for want of time, and the host stays
// relocating (peers go on sending to those objects). A second Drain moves
// them, state and all.
func TestDrainCutShortKeepsTheObjectsItCouldNotMove(t *testing.T) {
	n := NewNetwork(nil)
	var deactivated atomic.Int64
	kind := func() Registrable {
		k := NewKind("stop", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
		Handle(k, func(ctx *Context, c *Counter, m StopInc) error { c.N++; return nil })
		HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
		k.OnDeactivate(func(context.Context, string, *Counter) { deactivated.Add(1) })
		k.PreserveStateJSON()
		return k
	}
	cfg := n.With(Config{Logger: quietLogger()})
	ca, cb := cfg, cfg
	ca.Name, cb.Name = "a", "b"
	a := startHost(t, ca, kind())
	b := startHost(t, cb, kind())
	waitViews(t, a, b)
	const objects = 20
	for i := 0; i < objects; i++ {
		for seq := 1; seq <= i+1; seq++ { // object i counts i+1
			if err := Tell(bg, b, stopRef(i), StopInc{Obj: i, Seq: seq}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < objects; i++ {
		if n, err := Ask[Get, int](bg, b, stopRef(i), Get{}); err != nil || n != i+1 {
			t.Fatalf("object %d: %d, %v", i, n, err)
		}
	}
	n.Delay("a", "b", 100*time.Millisecond) // a move takes several round trips
	const deadline = 150 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithDeadline(bg, start.Add(deadline))
	defer cancel()
	ref := wakeLate(ctx, start, deadline)
	err := b.Drain(ctx)
	took := time.Since(start)
	n.Delay("a", "b", 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v after %v; want the context's error", err, took)
	}
	if late, woke := took-deadline, ref(); late-woke > stopLate() {
		t.Errorf("Drain returned %v after its deadline, a goroutine waiting for it woke %v after it (at most %v more)", late, woke, stopLate())
	}
	if ds := b.DrainState(); ds != Relocating {
		t.Fatalf("drain state %v after the cut-short drain; want relocating (its objects are still here)", ds)
	}
	for i := 0; i < objects; i++ { // a sends to them as before
		if err := Tell(bg, a, stopRef(i), StopInc{Obj: i, Seq: i + 2}); err != nil {
			t.Fatalf("Tell from a to object %d on b after the cut-short drain: %v", i, err)
		}
	}
	moved := 0
	for i := 0; i < objects; i++ {
		loc, err := b.Locate(bg, stopRef(i))
		if err != nil {
			t.Fatal(err)
		}
		if loc.Host != "b" {
			moved++ // its move had passed the point of no return
		}
		if n, err := Ask[Get, int](bg, a, stopRef(i), Get{}); err != nil || n != i+2 {
			t.Fatalf("object %d counts %d (err %v); want %d: its state was not kept", i, n, err, i+2)
		}
	}
	if d := deactivated.Load(); d != 0 || moved == objects {
		t.Fatalf("after the cut-short drain: %d objects deactivated (want 0), %d of %d moved (want some left)", d, moved, objects)
	}
	t.Logf("the cut-short drain moved %d of %d objects in %v", moved, objects, took)
	if err := b.Drain(bg); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	for i := 0; i < objects; i++ {
		if n, err := Ask[Get, int](bg, a, stopRef(i), Get{}); err != nil || n != i+2 {
			t.Fatalf("object %d counts %d after the drain (err %v); want %d", i, n, err, i+2)
		}
	}
	if d := deactivated.Load(); d != 0 {
		t.Fatalf("%d objects deactivated by the drains; want 0 (all moved)", d)
	}
}

// syncBuffer is the tests' concurrency-safe buffer.
type syncBuffer = testutil.Buffer
