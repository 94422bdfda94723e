package tests

// A slow world: the relocation property (relocation_test.go) and a few
// runs of their own on links that pause, with a kind whose Capture and
// Restore are slow, on a starved process, with a burst larger than the
// reorder buffer's bound, and with a host killed. While every host is up,
// a slow move or a slow path is not a failure: nothing may be given up on
// (Stats.GapsClosed) nor run late (Stats.Late) — a gap in a sender's
// messages closes only on a fact (a skip notice, or the membership
// reporting a host gone), never on a timer, and the reorder buffer's
// bound pushes back on its sender instead of releasing out of order
// (docs/architecture.md, "Order, routing and transports").
//
// Each test draws its random choices from a seed it logs; -slow.seed=N
// replays one (the seed fixes the choices — the pauses, the sleeps, the
// senders' and movers' picks — not the interleaving, which real timing
// decides). -long runs each for longer.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

var slowSeed = flag.Uint64("slow.seed", 0, "slow_test.go: the seed of the slow world's random choices (0: one from the clock; each test logs its seed)")

// slowSeedFor returns the seed of t's random choices, and logs it with the
// command that replays it.
func slowSeedFor(t *testing.T) uint64 {
	t.Helper()
	seed := *slowSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	race := ""
	if testutil.Race {
		race = " -race"
	}
	t.Logf("seed %d (replay: go test%s ./tests -run '^%s$' -slow.seed=%d)", seed, race, t.Name(), seed)
	return seed
}

// slowFor returns short, or soak under -long.
func slowFor(short, soak time.Duration) time.Duration {
	if *long {
		return soak
	}
	return short
}

// slowLinks wraps an Attacher (the in-process network) so that every link
// pauses: the goroutine that delivers a link's items, from one host to
// another, waits a random pause in [lo, hi] before a batch. An item that
// comes after the link has run freely for as long as its last pause waits
// a new pause, and the items queued behind it on the transport wait with
// it (the transport's own queue, so its flow control holds back senders
// from outside handlers as a slow network's would); then they flow until
// the next pause. Items keep their order and nothing else changes: the
// transport's guarantees hold, only time passes. (inproc's own Delay makes
// each item wait alone, one at a time: a link then carries 1/Delay items
// a second, not a slow network's throughput.)
//
// With trace set, every item a host sends is shown to it first, and again
// (sent) once Send has returned.
type slowLinks struct {
	inner  transport.Attacher
	lo, hi time.Duration // 0, 0: no pauses
	seed   uint64
	trace  func(from, to string, it transport.Item) (sent func(err error))

	pauses atomic.Int64 // how many
	paused atomic.Int64 // their sum, in ns
}

func (s *slowLinks) Attach(name string, h transport.Handler) (transport.Transport, error) {
	if s.hi > 0 {
		h = &pausingHandler{links: s, local: name, h: h, peers: map[string]*pausingPeer{}}
	}
	tr, err := s.inner.Attach(name, h)
	if err != nil || s.trace == nil {
		return tr, err
	}
	return &tracedTransport{Transport: tr, trace: s.trace}, nil
}

func (s *slowLinks) String() string {
	n := s.pauses.Load()
	if n == 0 {
		return "no pauses"
	}
	return fmt.Sprintf("%d pauses of %v on average", n, (time.Duration(s.paused.Load()) / time.Duration(n)).Round(100*time.Microsecond))
}

// pausingHandler pauses the deliveries to one host (see slowLinks).
type pausingHandler struct {
	links *slowLinks
	local string
	h     transport.Handler

	mu    sync.Mutex
	peers map[string]*pausingPeer // by sending peer; guarded by mu
}

type pausingPeer struct {
	rng  *rand.Rand // guarded by the handler's mu
	free time.Time  // the link runs freely until then; guarded by the handler's mu
}

var pauseSeed = maphash.MakeSeed()

func (x *pausingHandler) Deliver(from string, it transport.Item) {
	lo, hi := x.links.lo, x.links.hi
	x.mu.Lock()
	p := x.peers[from]
	if p == nil {
		// Each link draws its pauses from a stream of its own.
		p = &pausingPeer{rng: rand.New(rand.NewPCG(x.links.seed, maphash.String(pauseSeed, from+"\x00"+x.local)))}
		x.peers[from] = p
	}
	var d time.Duration
	if now := time.Now(); now.After(p.free) {
		d = lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
		p.free = now.Add(2 * d) // the pause, then as long again running freely
	}
	x.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
		x.links.pauses.Add(1)
		x.links.paused.Add(int64(d))
	}
	x.h.Deliver(from, it)
}

func (x *pausingHandler) Returned(to string, it transport.Item) { x.h.Returned(to, it) }
func (x *pausingHandler) Event(e transport.Event)               { x.h.Event(e) }

// tracedTransport shows every item its host sends to a trace.
type tracedTransport struct {
	transport.Transport
	trace func(from, to string, it transport.Item) (sent func(err error))
}

func (x *tracedTransport) Send(to string, it transport.Item) error {
	sent := x.trace(x.Local(), to, it) // before: an Owned item's bytes are the transport's once sent
	err := x.Transport.Send(to, it)
	if sent != nil {
		sent(err)
	}
	return err
}

// slowState is a PreserveState adapter for tallies (JSON, as
// PreserveStateJSON) whose Capture and Restore each sleep a random time in
// [lo, hi] — a big state, a slow encoder. Restore runs on the target once
// the move record arrived, on the move's lane, Capture on the source in
// the object's last turn there: the move, and the object, wait (the link
// from source to target does not).
type slowState struct {
	lo, hi time.Duration

	mu  sync.Mutex
	rng *rand.Rand // guarded by mu

	calls atomic.Int64
	slept atomic.Int64 // ns
}

func newSlowState(seed uint64, lo, hi time.Duration) *slowState {
	return &slowState{lo: lo, hi: hi, rng: rand.New(rand.NewPCG(seed, 0x51088))}
}

func (s *slowState) sleep() {
	s.mu.Lock()
	d := s.lo + time.Duration(s.rng.Int64N(int64(s.hi-s.lo)+1))
	s.mu.Unlock()
	time.Sleep(d)
	s.calls.Add(1)
	s.slept.Add(int64(d))
}

// kind returns tallyKind with the slow adapter.
func (s *slowState) kind() *actor.Kind[tally] {
	k := tallyKind()
	k.PreserveState(func(st *tally) ([]byte, error) {
		s.sleep()
		return payload.JSON.Encode(nil, st)
	}, func(_ *actor.Context, _ string, data []byte) (*tally, error) {
		s.sleep()
		st := new(tally)
		return st, payload.JSON.Decode(data, st)
	})
	return k
}

func (s *slowState) String() string {
	n := s.calls.Load()
	if n == 0 {
		return "no Capture or Restore"
	}
	return fmt.Sprintf("%d Captures and Restores, %v each on average", n, (time.Duration(s.slept.Load()) / time.Duration(n)).Round(time.Millisecond))
}

// starve returns a starve function for relocationRun: the process runs on
// one CPU (GOMAXPROCS(1)) shared with busy goroutines that spin (the
// scheduler preempts them as it preempts any goroutine), so the hosts get
// a fraction of one CPU. Its restore stops them and restores GOMAXPROCS.
func starve(busy int) func() (restore func()) {
	return func() func() {
		prev := runtime.GOMAXPROCS(1)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range busy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
				}
			}()
		}
		return func() {
			stop.Store(true)
			wg.Wait()
			runtime.GOMAXPROCS(prev)
		}
	}
}

// TestSlowLinksRelocationLosesDuplicatesAndReordersNothing: the relocation
// property — four hosts, numbered tells and asks from six senders, four
// goroutines moving random objects, a drain — with every link pausing a
// random 1–50 ms per batch of items. No host fails: nothing lost, run
// twice or out of order, and no host gives up on a gap or runs a message
// late.
func TestSlowLinksRelocationLosesDuplicatesAndReordersNothing(t *testing.T) {
	seed := slowSeedFor(t)
	links := &slowLinks{lo: time.Millisecond, hi: 50 * time.Millisecond, seed: seed}
	defer func() { t.Logf("links: %v", links) }()
	relocationProperty(t, relocationRun{hosts: 4, objects: 300, senders: 2, movers: 4, duration: slowFor(3*time.Second, 60*time.Second),
		seed: seed, strictOrder: true, readers: 16,
		wrap: func(a transport.Attacher) transport.Attacher { links.inner = a; return links }})
}

// TestSlowCaptureAndRestoreRelocationLosesDuplicatesAndReordersNothing:
// the relocation property with a kind whose Capture and Restore each take
// a random 100 ms–2 s: a move seals its object for seconds, and the
// target's Restore holds up the move meanwhile (its relays and cutover
// wait on the move's lane behind it; the link delivers on), so the
// object's messages wait in the holds. Few objects, so that the drain's
// moves end in a few seconds.
func TestSlowCaptureAndRestoreRelocationLosesDuplicatesAndReordersNothing(t *testing.T) {
	seed := slowSeedFor(t)
	state := newSlowState(seed, 100*time.Millisecond, 2*time.Second)
	defer func() { t.Logf("state: %v", state) }()
	relocationProperty(t, relocationRun{hosts: 4, objects: 24, senders: 2, movers: 3, duration: slowFor(3*time.Second, 60*time.Second),
		seed: seed, strictOrder: true, kind: state.kind})
}

// TestStarvedRelocationLosesDuplicatesAndReordersNothing: the relocation
// property on a starved process — one CPU (GOMAXPROCS(1)) shared with four
// goroutines that spin for the whole run — so that every step, every
// link and every timer of the hosts comes late.
func TestStarvedRelocationLosesDuplicatesAndReordersNothing(t *testing.T) {
	seed := slowSeedFor(t)
	objects := 300
	if testutil.Race {
		objects = 100
	}
	relocationProperty(t, relocationRun{hosts: 4, objects: objects, senders: 2, movers: 4, duration: slowFor(3*time.Second, 60*time.Second),
		seed: seed, strictOrder: true, starve: starve(4)})
}

// TestBurstBeyondTheReorderBoundDuringMovesIsNotReordered: the relocation
// property with a burst: one sender Tells 25,000 numbered messages — more
// than the reorder buffer holds for one sender (route.DefaultMaxHeld,
// 10,000) — to one object as fast as it can, no Ask pacing it, while the
// object is relocated back and forth between two other hosts for as long
// as the burst lasts (and the other senders, movers and the drain go on).
// The bound pushes back; it releases nothing out of order.
func TestBurstBeyondTheReorderBoundDuringMovesIsNotReordered(t *testing.T) {
	seed := slowSeedFor(t)
	burst := 25_000
	if *long {
		burst = 250_000
	}
	relocationProperty(t, relocationRun{hosts: 4, objects: 100, senders: 2, movers: 2, duration: slowFor(2*time.Second, 30*time.Second),
		seed: seed, strictOrder: true, burst: burst})
}

// TestABurstDuringSlowMovesIsNotReorderedWhileEveryHostIsUp is the
// regression: one sender host bursts 20,000 numbered Tells to one object,
// as fast as it can, while another goroutine relocates the object 50 times
// between two other hosts, every move slowed — the kind's Capture and
// Restore each take a random 10–100 ms, and every link pauses 1–50 ms per
// batch. The burst begins as one of the first moves hands over (its target
// declares relay-ready; then up to 10 ms), when the sender's
// messages still go to the old owner, which forwards them, and its newer
// ones soon go straight to the new owner: the new owner holds the newer
// ones until the forwarded ones arrive — more than the reorder buffer's
// bound (route.DefaultMaxHeld, 10,000) when the forwarded ones lag. Every
// host stays up: every message runs once, in order, and no host gives up
// on a gap — neither on a timer (Config.GapTimeout) nor past the bound.
// Past the bound the owner pushes back on the sender's host; a send that
// waits longer than SendTimeout for that (ErrPushedBack) or for room on the
// link (ErrSendTimeout) fails unsent, and is sent again.
//
// With -long: 200,000 tells and 500 moves.
func TestABurstDuringSlowMovesIsNotReorderedWhileEveryHostIsUp(t *testing.T) {
	seed := slowSeedFor(t)
	tells, moves := 20_000, 50
	if *long {
		tells, moves = 200_000, 500
	}
	rng := rand.New(rand.NewPCG(seed, 0xb0257))
	startAt := 1 + rng.IntN(min(10, moves)) // the handover the burst begins at
	offset := time.Duration(rng.Int64N(int64(10 * time.Millisecond)))
	ctx := context.Background()
	net := localnet.New(localnet.Options{})
	links := &slowLinks{inner: net.Transport, lo: time.Millisecond, hi: 50 * time.Millisecond, seed: seed}
	state := newSlowState(seed, 10*time.Millisecond, 100*time.Millisecond)
	byName := map[string]*actor.Host{}
	var hosts []*actor.Host
	var sampled sync.WaitGroup
	sampleStop := make(chan struct{})
	defer func() {
		close(sampleStop)
		sampled.Wait()
		for _, h := range hosts {
			h.Close()
		}
		testutil.CheckNoGoroutines(t)
	}()
	for _, name := range []string{"sender", "b", "c"} {
		h, err := actor.NewHost(actor.Config{Name: name, Transport: links, Store: net.Store, Membership: net.Membership,
			Logger: quietLogger(), CutoverWait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Register(state.kind()); err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
		byName[name] = h
	}
	sender, b, c := hosts[0], hosts[1], hosts[2]
	obj := actor.Ref{Kind: "tally", ID: "burst"}
	if _, err := actor.Ask[readTally, tally](ctx, b, obj, readTally{}); err != nil { // it activates on b
		t.Fatal(err)
	}
	var maxHeld atomic.Int64 // the most messages a host held out of order, sampled
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			select {
			case <-sampleStop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for _, h := range hosts {
				if n := int64(h.Stats().HeldOutOfOrder); n > maxHeld.Load() {
					maxHeld.Store(n)
				}
			}
		}
	}()

	// The handovers: a target's relay-ready.
	var handovers atomic.Int64
	begin := make(chan struct{})
	net.SetRecordHook(func(from, to string, rec relocation.Record) bool {
		if _, ok := rec.(*relocation.RelayReady); ok && handovers.Add(1) == int64(startAt) {
			time.AfterFunc(offset, func() { close(begin) })
		}
		return true
	})
	var sent atomic.Int64
	var pushedBack atomic.Int64 // sends refused unsent (refusedUnsent), sent again
	var burstTook time.Duration
	var movesDuring atomic.Int64 // moves that ended while the burst was being sent
	senderDone := make(chan struct{})
	moverDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		select {
		case <-begin:
		case <-moverDone: // fewer handovers than expected (the mover failed)
			return
		}
		began := time.Now()
		for seq := 1; seq <= tells; seq++ {
			err := actor.Tell(ctx, sender, obj, numbered{Sender: "burst", Seq: seq})
			if refusedUnsent(err) {
				pushedBack.Add(1) // not sent: the number is sent again
				seq--
				continue
			}
			if err != nil {
				t.Errorf("Tell #%d: %v", seq, err)
				return
			}
			sent.Store(int64(seq))
		}
		burstTook = time.Since(began)
	}()

	var took []time.Duration
	began := time.Now()
	func() {
		defer close(moverDone)
		for i := 0; i < moves; i++ {
			row, err := net.Store.Get(ctx, relocation.Object{Kind: obj.Kind, ID: obj.ID})
			if err != nil {
				t.Errorf("store: %v", err)
				return
			}
			src := byName[row.Host]
			dst := c
			if src == c {
				dst = b
			}
			mctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			start := time.Now()
			err = src.Relocate(mctx, obj, dst.Name())
			cancel()
			if err != nil {
				t.Errorf("move %d, %s to %s: %v", i+1, src.Name(), dst.Name(), err)
				return
			}
			took = append(took, time.Since(start))
			if n := sent.Load(); n > 0 && n < int64(tells) {
				movesDuring.Add(1)
			}
		}
	}()
	movesTook := time.Since(began)
	<-senderDone
	if t.Failed() {
		return
	}
	if sent.Load() != int64(tells) {
		t.Fatalf("the burst never began: %d handovers, it was to begin at the %dth", handovers.Load(), startAt)
	}

	// Read through the sender's host: its read is numbered after its
	// tells, so it runs after all of them.
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	var st tally
	var err error
	for {
		st, err = actor.Ask[readTally, tally](rctx, sender, obj, readTally{})
		if !refusedUnsent(err) || rctx.Err() != nil {
			break
		}
		pushedBack.Add(1) // not sent: asked again
	}
	cancel()
	if err != nil {
		for _, h := range hosts {
			t.Logf("%s: %+v", h.Name(), h.Stats())
		}
		t.Fatalf("reading the object after %d tells (%d refused unsent and sent again): %v", sent.Load(), pushedBack.Load(), err)
	}
	slices.Sort(took)
	t.Logf("%d tells in %v from handover %d + %v (%d moves ended meanwhile); %d moves in %v, each %v to %v, median %v; at most %d held out of order (sampled); %d sends refused unsent (pushed back, or no room within SendTimeout) and sent again; state: %v; links: %v",
		tells, burstTook.Round(time.Millisecond), startAt, offset.Round(time.Millisecond), movesDuring.Load(), len(took), movesTook.Round(time.Millisecond),
		took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), maxHeld.Load(), pushedBack.Load(), state, links)
	if n := len(st.Bad); n > 0 {
		t.Errorf("%d messages ran out of order, the first: %v", n, st.Bad[:min(n, 10)])
	}
	if got := st.Count["burst"]; got != tells || st.Last["burst"] != tells {
		t.Errorf("%d of %d messages ran, the last #%d (lost or run twice)", got, tells, st.Last["burst"])
	}
	for _, h := range hosts {
		if s := h.Stats(); s.GapsClosed != 0 || s.Late != 0 {
			t.Errorf("%s: %d sequence numbers given up on (GapsClosed), %d messages run late (Late), %d held out of order now; every host is up: %+v",
				h.Name(), s.GapsClosed, s.Late, s.HeldOutOfOrder, s)
		}
	}
}

// TestSlowLinksWithAHostKilledCloseGapsOnlyOnItsFailure: the relocation
// property — numbered tells and asks from four senders on two hosts, random
// moves among three hosts, a fourth host drained — on links that pause
// 1–20 ms per batch, and half way through one host that holds objects and
// messages (it sends nothing itself) is killed: its process dies, what it
// held and what was on its links is lost, and the membership reports it
// gone. Every host records what it runs in one journal (the hosts share
// the process, so the killed host's runs before its crash count though its
// objects' state dies with it); a trace of the transports records every
// numbered message sent to or from the killed host (a send to it that
// failed because it was gone too), and when it took part in a move of an
// object (a move record to or from it, which carries its object's queued
// and held messages).
//
// What a crash allows, and what is checked:
//   - Nothing runs twice, ever.
//   - Until the kill begins nothing is given up on: every host's
//     Stats.GapsClosed and Stats.Late are 0, and no sender's message runs
//     past a gap or after a newer one of its own.
//   - A message that never ran "was held by the killed host": it was sent
//     (or tried) to it or from it, or its object had a move record to or
//     from it after the message was sent. (An Ask that failed is exempt: its sender knows
//     it may not have run.)
//   - Every run past a gap (sequence numbers skipped) comes after the kill
//     began, and its gap holds a message held by the killed host (or an
//     Ask that failed): no gap closes for a message every live host could
//     still deliver.
//   - Every message run after a newer one of its sender (late) comes after
//     the kill began, and is counted: the runs seen late are at most the
//     sum of the hosts' Stats.Late.
//   - Afterwards every object answers through every sending host (a read
//     numbered after that host's messages: every gap before it closed) and
//     no host holds a message out of order.
func TestSlowLinksWithAHostKilledCloseGapsOnlyOnItsFailure(t *testing.T) {
	seed := slowSeedFor(t)
	const objects, perHost, movers = 200, 2, 2
	duration := slowFor(3*time.Second, 30*time.Second)
	ctx := context.Background()
	net := localnet.New(localnet.Options{})
	const killedName = "h3"
	jr := &journal{killed: killedName, runs: map[journalKey][]journalRun{}}
	tr := &killTrace{killed: killedName, msgs: map[journalKey]map[int]bool{}, moves: map[string][]int64{}}
	links := &slowLinks{inner: net.Transport, lo: time.Millisecond, hi: 20 * time.Millisecond, seed: seed, trace: tr.trace}

	var liveMu sync.Mutex
	live := map[string]*actor.Host{}
	host := func(name string) *actor.Host {
		liveMu.Lock()
		defer liveMu.Unlock()
		return live[name]
	}
	var hosts []*actor.Host
	for _, name := range []string{"h1", "h2", killedName, "h4"} {
		// GapTimeout 1 s: how long a gap a failure fact covers still
		// waits for what is on live links (and, before the gaps waited
		// for facts, how long any gap waited) — short, so that the senders'
		// Asks behind such gaps end within the run.
		h, err := actor.NewHost(actor.Config{Name: name, Transport: links, Store: net.Store, Membership: net.Membership,
			Logger: quietLogger(), CutoverWait: 2 * time.Second, GapTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Register(journalKind(jr)); err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
		live[name] = h
	}
	var closeHung atomic.Bool // the killed host's Close never returned
	defer func() {
		for _, h := range hosts {
			if h.Name() == killedName && closeHung.Load() {
				continue
			}
			h.Close()
		}
		if !closeHung.Load() {
			testutil.CheckNoGoroutines(t)
		}
	}()
	sending, killed, drained := hosts[:2], hosts[2], hosts[3]
	ref := func(i int) actor.Ref { return actor.Ref{Kind: "journal", ID: strconv.Itoa(i)} }
	for i := 0; i < objects; i++ { // spread over every host
		if _, err := actor.Ask[readJournal, int](ctx, hosts[i%len(hosts)], ref(i), readJournal{}); err != nil {
			t.Fatal(err)
		}
	}

	type sender struct {
		name   string
		host   *actor.Host
		sent   []int     // per object: the last number sent
		at     [][]int64 // per object and number-1: when its send began (ns)
		failed []map[int]bool
		since  atomic.Int64 // messages sent since the kill began
	}
	var senders []*sender
	for _, h := range sending {
		for s := 0; s < perHost; s++ {
			senders = append(senders, &sender{name: h.Name() + "/" + strconv.Itoa(s), host: h,
				sent: make([]int, objects), at: make([][]int64, objects), failed: make([]map[int]bool, objects)})
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var tells, asks, askFailed, tellRefused atomic.Int64
	runStart := time.Now()
	for si, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(si), 7^seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(objects)
				seq := s.sent[i] + 1
				s.at[i] = append(s.at[i][:seq-1], time.Now().UnixNano())
				if rng.IntN(8) == 0 {
					// An Ask whose request or reply dies with the killed
					// host waits out its deadline: short, once it is dead.
					deadline := 5 * time.Second
					if jr.killing.Load() {
						deadline = 2 * time.Second
					}
					actx, cancel := context.WithTimeout(ctx, deadline)
					got, err := actor.Ask[numberedAsk, int](actx, s.host, ref(i), numberedAsk{Sender: s.name, Seq: seq})
					cancel()
					switch {
					case err == nil && got == seq:
						asks.Add(1)
					case err != nil && jr.killing.Load():
						// It may or may not have run (its reply, or the
						// message, may have died with the host): the
						// number is used, and the sender knows.
						askFailed.Add(1)
						if s.failed[i] == nil {
							s.failed[i] = map[int]bool{}
						}
						s.failed[i][seq] = true
					default:
						t.Errorf("%s: Ask #%d to object %d = %d, %v (before the kill)", s.name, seq, i, got, err)
						return
					}
				} else if err := actor.Tell(ctx, s.host, ref(i), numbered{Sender: s.name, Seq: seq}); err != nil {
					if !jr.killing.Load() {
						t.Errorf("%s: Tell #%d to object %d: %v (before the kill)", s.name, seq, i, err)
						return
					}
					tellRefused.Add(1) // refused: it will not run; the number is sent again
					continue
				} else {
					tells.Add(1)
				}
				s.sent[i] = seq
				if jr.killing.Load() {
					s.since.Add(1)
				}
			}
		}()
	}

	var moved, moveFailed atomic.Int64
	moverStop := make(chan struct{})
	var mwg sync.WaitGroup
	for m := 0; m < movers; m++ {
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			rng := rand.New(rand.NewPCG(uint64(m), 99^seed))
			targets := []*actor.Host{hosts[0], hosts[1], killed}
			for {
				select {
				case <-moverStop:
					return
				default:
				}
				i := rng.IntN(objects)
				row, err := net.Store.Get(ctx, relocation.Object{Kind: "journal", ID: strconv.Itoa(i)})
				if err != nil {
					continue
				}
				src, dst := host(row.Host), targets[rng.IntN(len(targets))]
				if src == nil || src == dst || src == drained || host(dst.Name()) == nil {
					continue
				}
				deadline := 20 * time.Second
				if jr.killing.Load() {
					deadline = 5 * time.Second // a move with the dead host may wait out its context
				}
				mctx, cancel := context.WithTimeout(ctx, deadline)
				err = src.Relocate(mctx, ref(i), dst.Name())
				cancel()
				switch {
				case err == nil:
					moved.Add(1)
				case errors.Is(err, actor.ErrNotLocal), errors.Is(err, actor.ErrMoveInProgress), errors.Is(err, actor.ErrShuttingDown),
					errors.Is(err, actor.ErrAlreadyThere):
				case jr.killing.Load():
					moveFailed.Add(1) // a move with the killed host, or one the kill cut short
				default:
					t.Errorf("Relocate %d from %s to %s: %v (before the kill)", i, src.Name(), dst.Name(), err)
				}
			}
		}()
	}

	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-stop:
		}
	}
	sleep(duration / 3)
	if err := drained.Drain(ctx); err != nil {
		t.Errorf("drain: %v", err)
	}
	liveMu.Lock()
	delete(live, drained.Name())
	liveMu.Unlock()
	sleep(duration / 6)

	// Before the kill no host has given up on anything.
	for _, h := range hosts {
		if s := h.Stats(); s.GapsClosed != 0 || s.Late != 0 {
			t.Errorf("%s before the kill: %d sequence numbers given up on, %d run late; every host is up", h.Name(), s.GapsClosed, s.Late)
		}
	}
	var ownedByKilled int
	for i := 0; i < objects; i++ {
		if row, err := net.Store.Get(ctx, relocation.Object{Kind: "journal", ID: strconv.Itoa(i)}); err == nil && row.Host == killedName {
			ownedByKilled++
		}
	}
	jr.killing.Store(true)
	killedAt := time.Now()
	liveMu.Lock()
	delete(live, killedName)
	liveMu.Unlock()
	net.Kill(killedName) // its process dies; the membership and the store see its lease end
	closed := make(chan struct{})
	go func() {
		killed.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		closeHung.Store(true)
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("the killed host's Close has not returned after 30 s; goroutines:\n%s", buf)
	}
	sleep(duration / 2)
	// Every sender goes on after the kill — one whose Ask died with the
	// host first waits out its deadline (5 s, for one sent before the
	// kill) — a while longer for those that sent little since.
	soft, hard := time.Now().Add(5*time.Second), killedAt.Add(10*time.Second)
	for _, s := range senders {
		for n := s.since.Load(); time.Now().Before(hard) && (n == 0 || n < 150 && time.Now().Before(soft)); n = s.since.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if s.since.Load() == 0 {
			t.Errorf("%s sent nothing in the %v after the kill", s.name, hard.Sub(killedAt))
		}
	}
	close(moverStop)
	mwg.Wait()
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	// Every object, read through every sending host (after that host's
	// own messages: the read waits until every gap before it closed), all
	// at once.
	readErrs := make([]error, objects*len(sending))
	var rwg sync.WaitGroup
	for i := range objects {
		for hi, h := range sending {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if _, err := actor.Ask[readJournal, int](rctx, h, ref(i), readJournal{}); err != nil {
					readErrs[i*len(sending)+hi] = fmt.Errorf("reading object %d through %s: %w", i, h.Name(), err)
				}
			}()
		}
	}
	rwg.Wait()
	readsTook := time.Since(runStart) - duration
	for _, err := range readErrs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}

	var lateStat, gapsStat int64
	for _, h := range hosts {
		s := h.Stats()
		lateStat += s.Late
		gapsStat += s.GapsClosed
		if h != killed && h != drained && s.HeldOutOfOrder != 0 {
			t.Errorf("%s: %d messages still held out of order", h.Name(), s.HeldOutOfOrder)
		}
	}
	report := func() {
		for _, h := range hosts {
			t.Logf("%s: %+v", h.Name(), h.Stats())
		}
	}

	var ran, lost, lostFailedAsks, jumps, skipped, lateRuns, runsOnKilled int
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	jr.mu.Lock()
	for _, s := range senders {
		for i := 0; i < objects; i++ {
			key := journalKey{object: strconv.Itoa(i), sender: s.name}
			held := func(seq int) bool { return tr.held(key, seq, s.at[i][seq-1]) }
			seen := map[int]bool{}
			last := 0
			for _, r := range jr.runs[key] {
				ran++
				if r.host == killedName {
					runsOnKilled++
				}
				switch {
				case seen[r.seq]:
					problem("object %d: %s's #%d ran twice (on %s)", i, s.name, r.seq, r.host)
				case r.seq > s.sent[i]:
					problem("object %d: %s's #%d ran, but it sent up to #%d", i, s.name, r.seq, s.sent[i])
				case r.seq < last:
					lateRuns++
					if !r.afterKill {
						problem("object %d: %s's #%d ran after #%d on %s before the kill", i, s.name, r.seq, last, r.host)
					}
				case r.seq > last+1:
					jumps++
					skipped += r.seq - last - 1
					if !r.afterKill {
						problem("object %d: %s's #%d ran after #%d on %s before the kill (a gap closed while every host was up)", i, s.name, r.seq, last, r.host)
					}
					holds := false
					for g := last + 1; g < r.seq && !holds; g++ {
						holds = held(g) || s.failed[i][g] // a failed Ask may have been dropped (its deadline passed): its sender knows
					}
					if !holds {
						problem("object %d: %s's #%d ran after #%d on %s: the gap between held no message the killed host held, nor a failed Ask", i, s.name, r.seq, last, r.host)
					}
				}
				seen[r.seq] = true
				last = max(last, r.seq)
			}
			for seq := 1; seq <= s.sent[i]; seq++ {
				if seen[seq] {
					continue
				}
				if s.failed[i][seq] {
					lostFailedAsks++
					continue
				}
				lost++
				if !held(seq) {
					problem("object %d: %s's #%d never ran, and the killed host never held it", i, s.name, seq)
				}
			}
		}
	}
	jr.mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if int64(lateRuns) > lateStat {
		t.Errorf("%d messages ran after a newer one of their sender, the hosts counted %d (Stats.Late)", lateRuns, lateStat)
	}
	var since []int64
	for _, s := range senders {
		since = append(since, s.since.Load())
	}
	t.Logf("%d tells, %d asks (%d failed after the kill), %d tells refused after the kill; %d moves, %d failed after the kill; %d objects on %s when it was killed, %v into the run; sent after the kill, by sender: %v",
		tells.Load(), asks.Load(), askFailed.Load(), tellRefused.Load(), moved.Load(), moveFailed.Load(), ownedByKilled, killedName, killedAt.Sub(runStart).Round(time.Millisecond), since)
	t.Logf("%d runs (%d on %s before it died); lost with it: %d messages (and %d failed asks); %d runs past a gap (%d numbers skipped), %d runs late; hosts counted %d given up, %d late; traffic and reads ended %v after the run's planned end; links: %v",
		ran, runsOnKilled, killedName, lost, lostFailedAsks, jumps, skipped, lateRuns, gapsStat, lateStat, readsTook.Round(time.Millisecond), links)
	if t.Failed() {
		report()
	}
}

// journal records every numbered message any host runs, in the order they
// run (one object runs one turn at a time, wherever it is).
type journal struct {
	killed  string
	killing atomic.Bool // the kill has begun: runs on the killed host no longer count

	mu   sync.Mutex
	runs map[journalKey][]journalRun // guarded by mu
}

type journalKey struct{ object, sender string }

type journalRun struct {
	seq       int
	host      string
	afterKill bool
}

func (j *journal) run(c *actor.Context, sender string, seq int) {
	host := c.Host().Name()
	after := j.killing.Load()
	if after && host == j.killed {
		return // the killed host's process is dead: what its goroutines still do never happened
	}
	j.mu.Lock()
	k := journalKey{object: c.Self().ID, sender: sender}
	j.runs[k] = append(j.runs[k], journalRun{seq: seq, host: host, afterKill: after})
	j.mu.Unlock()
}

// journaled is a journal object's state: how many messages it ran (moved
// with it; lost with a crashed owner).
type journaled struct {
	N int `json:"n"`
}

type readJournal struct{}

func journalKind(j *journal) *actor.Kind[journaled] {
	k := actor.NewKind("journal", func(*actor.Context, string) (*journaled, error) { return &journaled{}, nil })
	actor.Handle(k, func(ctx *actor.Context, st *journaled, m numbered) error {
		j.run(ctx, m.Sender, m.Seq)
		st.N++
		return nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, st *journaled, m numberedAsk) (int, error) {
		j.run(ctx, m.Sender, m.Seq)
		st.N++
		return m.Seq, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, st *journaled, _ readJournal) (int, error) { return st.N, nil })
	k.PreserveStateJSON()
	return k
}

// killTrace records, from the hosts' sends, what the killed host held: the
// numbered messages sent to it (an attempt counts: once it is gone, its
// failure decides where they go) or from it, and when move records of each
// object went to or from it.
type killTrace struct {
	killed string

	mu    sync.Mutex
	msgs  map[journalKey]map[int]bool // guarded by mu
	moves map[string][]int64          // by object id: when (ns); guarded by mu
}

var (
	numberedType    = []byte(actor.TypeName[numbered]())
	numberedAskType = []byte(actor.TypeName[numberedAsk]())
)

func (k *killTrace) trace(from, to string, it transport.Item) func(error) {
	if from != k.killed && to != k.killed {
		return nil
	}
	switch it.Kind {
	case transport.Frame, transport.Bounce:
		hv, n, err := payload.DecodeHeader(it.Data)
		if err != nil || (string(hv.Type()) != string(numberedType) && string(hv.Type()) != string(numberedAskType)) {
			return nil
		}
		var m numbered
		if payload.JSON.Decode(it.Data[n:], &m) != nil {
			return nil
		}
		key := journalKey{object: string(hv.TargetID()), sender: m.Sender}
		return func(err error) {
			if err != nil && from == k.killed {
				return // not sent
			}
			// A send to the killed host counts even if it failed (it was
			// gone): the message went where that host's failure decides.
			k.mu.Lock()
			if k.msgs[key] == nil {
				k.msgs[key] = map[int]bool{}
			}
			k.msgs[key][m.Seq] = true
			k.mu.Unlock()
		}
	case transport.Record:
		obj, _, err := relocation.DecodeRecord(it.Data)
		if err != nil {
			return nil
		}
		at := time.Now().UnixNano()
		return func(err error) {
			if err != nil {
				return
			}
			k.mu.Lock()
			k.moves[obj.ID] = append(k.moves[obj.ID], at)
			k.mu.Unlock()
		}
	}
	return nil
}

// held reports whether the killed host held message seq of key, sent at
// sentAt: it was sent to (or towards) or from it, or a move record of its
// object went to or from it after the message was sent.
func (k *killTrace) held(key journalKey, seq int, sentAt int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.msgs[key][seq] {
		return true
	}
	for _, at := range k.moves[key.object] {
		if at >= sentAt {
			return true
		}
	}
	return false
}
