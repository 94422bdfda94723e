package schedule

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testkinds"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/relocation"
)

var (
	scheduleSeed     = flag.Int64("schedule.seed", 0, "TestSchedules: run only the schedule of this seed")
	scheduleBase     = flag.Int64("schedule.base", 20_260_000, "TestSchedules: the seed of the first schedule")
	scheduleCount    = flag.Int("schedule.count", 1000, "TestSchedules: how many schedules to run (seeds base, base+1, ...)")
	scheduleParallel = flag.Int("schedule.parallel", 8, "TestSchedules: how many schedules run at once")
)

// scheduleLogger drops every record without formatting it.
var scheduleLogger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 4}))

// The schedules run the property test's kind (internal/testkinds).

// schedPlan is everything a seed decides about a schedule.
type schedPlan struct {
	seed     int64
	hosts    int
	objects  int
	home     []int // the host each object activates on
	askEvery int   // every askEvery-th message of a sender to an object is an Ask
	senders  []schedSender
	delays   []schedDelay // set before any message
	moves    []schedMove  // in order
	total    int          // messages of all senders
}

type schedSender struct {
	name  string
	host  int
	count int   // messages per object
	order []int // the object of each message, count times each object
}

type schedDelay struct {
	a, b int
	d    time.Duration
}

type schedMove struct {
	after  int         // starts once this many messages were sent (all senders; past total: after the last)
	object int         // the object to move
	back   bool        // to the host the object last left, if it has left one that is not its owner
	pick   int         // else the pick-th host other than the owner
	delay  *schedDelay // a delay change made right before the move
}

func newSchedPlan(seed int64) *schedPlan {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5c4ed01e))
	p := &schedPlan{seed: seed, hosts: 3 + rng.IntN(2), objects: 2 + rng.IntN(3), askEvery: 4 + rng.IntN(7)}
	for range p.objects {
		p.home = append(p.home, rng.IntN(p.hosts))
	}
	lo, hi := 20, 40
	if testutil.Race { // the race detector slows every step several-fold
		lo, hi = 15, 30
	}
	nSenders := 3 + rng.IntN(4)
	for i := range nSenders {
		s := schedSender{name: "s" + strconv.Itoa(i), host: rng.IntN(p.hosts), count: lo + rng.IntN(hi-lo+1)}
		for o := range p.objects {
			for range s.count {
				s.order = append(s.order, o)
			}
		}
		rng.Shuffle(len(s.order), func(i, j int) { s.order[i], s.order[j] = s.order[j], s.order[i] })
		p.senders = append(p.senders, s)
		p.total += len(s.order)
	}
	randomDelay := func() time.Duration { return time.Duration(rng.IntN(301)) * time.Microsecond }
	for a := range p.hosts {
		for b := a + 1; b < p.hosts; b++ {
			if rng.IntN(2) == 0 {
				p.delays = append(p.delays, schedDelay{a: a, b: b, d: randomDelay()})
			}
		}
	}
	nMoves := 10 + rng.IntN(21)
	afters := make([]int, nMoves)
	for i := range afters {
		afters[i] = rng.IntN(p.total + p.total/10 + 1)
	}
	slices.Sort(afters)
	obj := rng.IntN(p.objects)
	for i := range nMoves {
		if rng.IntN(3) != 0 { // else the same object again: back and forth
			obj = rng.IntN(p.objects)
		}
		m := schedMove{after: afters[i], object: obj, back: rng.IntN(2) == 0, pick: rng.IntN(p.hosts - 1)}
		if rng.IntN(3) == 0 {
			a := rng.IntN(p.hosts)
			b := (a + 1 + rng.IntN(p.hosts-1)) % p.hosts
			d := randomDelay()
			if rng.IntN(4) == 0 {
				d = 0
			}
			m.delay = &schedDelay{a: a, b: b, d: d}
		}
		p.moves = append(p.moves, m)
	}
	return p
}

func (p *schedPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d hosts, %d objects (homes %v), ask every %d, %d moves, delays", p.hosts, p.objects, p.home, p.askEvery, len(p.moves))
	for _, d := range p.delays {
		fmt.Fprintf(&b, " h%d-h%d:%v", d.a, d.b, d.d)
	}
	b.WriteString("; senders")
	for _, s := range p.senders {
		fmt.Fprintf(&b, " %s@h%d×%d", s.name, s.host, s.count)
	}
	return b.String()
}

// scheduleReplay is the command that runs the schedule of seed again.
func scheduleReplay(seed int64) string {
	race := ""
	if testutil.Race {
		race = " -race"
	}
	return fmt.Sprintf("go test%s ./tests/schedule -run 'TestSchedules' -schedule.seed=%d", race, seed)
}

// schedResult is what a schedule did, for the summary.
type schedResult struct {
	moved, returned, refused int
	forwarded, relayed       int64 // over its hosts
	captured, bounced        int64
	took                     time.Duration
}

// TestSchedules runs seeded schedules (1,000 by default) over the
// in-process network: each seed decides 3–4 hosts, 2–4 objects with
// preserved state and where they activate, 3–6 senders bound to hosts and
// how many numbered messages each sends to each object (mostly Tell, every
// k-th an Ask that must answer its own number), random delays on some
// links that change during the run, and 10–30 moves of random objects,
// often back to the host they left, each started once the senders have sent
// a seeded number of messages. It runs at full speed, a few schedules at a
// time, and checks for each: every message ran exactly once and in order
// per sender, no host dropped a message, closed a gap, ran one late or
// still holds one, every host stops gracefully, and no goroutine is left.
//
// The seed reproduces the schedule — which host sends what, the delays,
// the moves — not the interleaving of the goroutines, which real timing
// decides: a failing seed may need several runs (-count) to fail again.
// Flags: -schedule.seed=N runs only that seed (under -race the schedules
// send fewer messages, so replay a seed with -race too), -schedule.base and
// -schedule.count choose the seeds (base, base+1, ...; the base is fixed by
// default, so CI runs the same 1,000 schedules every time),
// -schedule.parallel how many run at once. Schedules run in batches; the
// goroutine leak check runs after each batch, when all its hosts stopped.
func TestSchedules(t *testing.T) {
	var seeds []int64
	seedGiven := false
	flag.Visit(func(f *flag.Flag) { seedGiven = seedGiven || f.Name == "schedule.seed" })
	if seedGiven {
		seeds = []int64{*scheduleSeed}
		t.Logf("seed %d", *scheduleSeed)
	} else {
		for i := range *scheduleCount {
			seeds = append(seeds, *scheduleBase+int64(i))
		}
		t.Logf("base seed %d, %d schedules (race detector: %v)", *scheduleBase, len(seeds), testutil.Race)
	}
	par := max(1, *scheduleParallel)

	var (
		mu      sync.Mutex
		results []schedResult
		failed  []int64
	)
	start := time.Now()
	for b := 0; b < len(seeds); b += par {
		batch := seeds[b:min(b+par, len(seeds))]
		var wg sync.WaitGroup
		for _, seed := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Run("seed="+strconv.FormatInt(seed, 10), func(t *testing.T) {
					defer func() {
						if t.Failed() {
							mu.Lock()
							failed = append(failed, seed)
							mu.Unlock()
						}
					}()
					r := runSchedule(t, newSchedPlan(seed))
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				})
			}()
		}
		wg.Wait()
		// Every host of the batch has stopped: none of their goroutines
		// may be left.
		testutil.CheckNoGoroutines(batchTB{TB: t, seeds: batch})
		if len(failed) >= 20 {
			t.Fatalf("stopping after %d failed schedules", len(failed))
		}
	}
	var sum schedResult
	var took []time.Duration
	for _, r := range results {
		sum.moved += r.moved
		sum.returned += r.returned
		sum.refused += r.refused
		sum.forwarded += r.forwarded
		sum.relayed += r.relayed
		sum.captured += r.captured
		sum.bounced += r.bounced
		took = append(took, r.took)
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d schedules in %v (per schedule p50 %v, max %v): %d moves done (%d back to a host the object had left), %d refused; messages forwarded %d, captured in moves %d, relayed %d, bounced %d",
			len(results), time.Since(start).Round(time.Millisecond),
			took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
			sum.moved, sum.returned, sum.refused, sum.forwarded, sum.captured, sum.relayed, sum.bounced)
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		t.Errorf("%d of %d schedules failed, seeds %v", len(failed), len(seeds), failed)
	}
}

// batchTB names the seeds of a batch in the goroutine leak check's failure.
type batchTB struct {
	testing.TB
	seeds []int64
}

func (b batchTB) Fatalf(format string, args ...any) {
	b.TB.Helper()
	var replay []string
	for _, s := range b.seeds {
		replay = append(replay, fmt.Sprintf("seed=%d: %s", s, scheduleReplay(s)))
	}
	b.TB.Fatalf("goroutines left by one of the schedules of seeds %v (replay each):\n\t%s\n"+format,
		append([]any{b.seeds, strings.Join(replay, "\n\t")}, args...)...)
}

// runSchedule runs one schedule and checks it.
func runSchedule(t *testing.T, p *schedPlan) schedResult {
	began := time.Now()
	var res schedResult
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed=%d: %s\n\treplay: %s", p.seed, fmt.Sprintf(format, args...), scheduleReplay(p.seed))
	}
	fatalf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed=%d: %s\n\treplay: %s", p.seed, fmt.Sprintf(format, args...), scheduleReplay(p.seed))
	}
	ctx := context.Background()
	timeout := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }

	net := localnet.New(localnet.Options{})
	byName := map[string]*actor.Host{}
	hosts := make([]*actor.Host, p.hosts)
	// Host names are unique in the process (schedules run side by side).
	name := func(i int) string { return strconv.FormatInt(p.seed, 10) + "/h" + strconv.Itoa(i) }
	defer func() {
		for _, h := range hosts {
			if h != nil {
				h.Close() // after Stop: nothing to do; after a failure: stop at once
			}
		}
	}()
	for i := range hosts {
		h, err := actor.NewHost(actor.Config{Name: name(i), Transport: net.Transport, Store: net.Store, Membership: net.Membership, Logger: scheduleLogger, GapTimeout: 2 * time.Second})
		if err != nil {
			fatalf("%v", err)
		}
		if err := h.Register(testkinds.TallyKind()); err != nil {
			fatalf("%v", err)
		}
		if err := h.Start(); err != nil {
			fatalf("%v", err)
		}
		hosts[i] = h
		byName[h.Name()] = h
	}
	for _, d := range p.delays {
		net.Delay(name(d.a), name(d.b), d.d)
	}
	ref := func(o int) actor.Ref { return actor.Ref{Kind: "tally", ID: "o" + strconv.Itoa(o)} }
	for o, home := range p.home { // activate every object on its home host
		actx, cancel := timeout()
		_, err := actor.Ask[testkinds.ReadTally, testkinds.Tally](actx, hosts[home], ref(o), testkinds.ReadTally{})
		cancel()
		if err != nil {
			fatalf("activating object %d on %s: %v", o, name(home), err)
		}
	}
	report := func() {
		t.Logf("seed=%d plan: %v", p.seed, p)
		for _, h := range hosts {
			t.Logf("seed=%d %s: %+v", p.seed, h.Name(), h.Stats())
		}
	}

	// Senders: each sends its numbered messages in the seeded order.
	var (
		sent        atomic.Int64
		progress    = make(chan struct{}, 1)
		sendersDone = make(chan struct{})
		swg         sync.WaitGroup
		sendFailed  atomic.Bool
	)
	for _, s := range p.senders {
		swg.Add(1)
		go func() {
			defer swg.Done()
			h := hosts[s.host]
			seq := make([]int, p.objects)
			for _, o := range s.order {
				seq[o]++
				n := seq[o]
				actx, cancel := timeout()
				if n%p.askEvery == 0 {
					got, err := actor.Ask[testkinds.NumberedAsk, int](actx, h, ref(o), testkinds.NumberedAsk{Sender: s.name, Seq: n})
					if err != nil || got != n {
						cancel()
						sendFailed.Store(true)
						errorf("%s on %s: Ask #%d to object %d = %d, %v", s.name, h.Name(), n, o, got, err)
						return
					}
				} else if err := actor.Tell(actx, h, ref(o), testkinds.Numbered{Sender: s.name, Seq: n}); err != nil {
					cancel()
					sendFailed.Store(true)
					errorf("%s on %s: Tell #%d to object %d: %v", s.name, h.Name(), n, o, err)
					return
				}
				cancel()
				sent.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}

	// The mover: each move once enough messages were sent.
	moverDone := make(chan struct{})
	go func() {
		defer close(moverDone)
		left := make([]string, p.objects) // the host each object last left
		for _, m := range p.moves {
		wait:
			for sent.Load() < int64(m.after) {
				select {
				case <-progress:
				case <-sendersDone:
					break wait
				}
			}
			if m.delay != nil {
				net.Delay(name(m.delay.a), name(m.delay.b), m.delay.d)
			}
			row, err := net.Store.Get(ctx, relocation.Object{Kind: "tally", ID: ref(m.object).ID})
			if err != nil {
				errorf("store: object %d: %v", m.object, err)
				return
			}
			owner := row.Host
			target := left[m.object]
			back := m.back && target != "" && target != owner
			if !back {
				var others []string
				for i := range hosts {
					if name(i) != owner {
						others = append(others, name(i))
					}
				}
				target = others[m.pick%len(others)]
			}
			src := byName[owner]
			if src == nil {
				errorf("object %d: the store names owner %q, not a running host", m.object, owner)
				return
			}
			actx, cancel := timeout()
			err = src.Relocate(actx, ref(m.object), target)
			cancel()
			switch {
			case err == nil:
				res.moved++
				if back {
					res.returned++
				}
				left[m.object] = owner
			case errors.Is(err, actor.ErrMoveInProgress), errors.Is(err, actor.ErrNotLocal):
				res.refused++
			default:
				errorf("moving object %d from %s to %s: %v", m.object, owner, target, err)
			}
		}
	}()
	swg.Wait()
	close(sendersDone)
	<-moverDone
	if sendFailed.Load() {
		report()
		return res
	}

	// Every sender's last message to every object has run, in order, once.
	deadline := time.Now().Add(15 * time.Second)
	for o := range p.objects {
		via := hosts[o%len(hosts)]
		for {
			actx, cancel := timeout()
			st, err := actor.Ask[testkinds.ReadTally, testkinds.Tally](actx, via, ref(o), testkinds.ReadTally{})
			cancel()
			done := err == nil
			for _, s := range p.senders {
				done = done && st.Last[s.name] >= s.count
			}
			if done || time.Now().After(deadline) {
				if err != nil {
					errorf("reading object %d through %s: %v", o, via.Name(), err)
				}
				if len(st.Bad) > 0 {
					errorf("object %d: %d breaks of order: %v", o, len(st.Bad), st.Bad)
				}
				for _, s := range p.senders {
					if st.Last[s.name] != s.count || st.Count[s.name] != s.count {
						errorf("object %d: sender %s (on h%d) sent %d, its last run is #%d and %d ran (done waiting: %v)",
							o, s.name, s.host, s.count, st.Last[s.name], st.Count[s.name], done)
					}
				}
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	for _, h := range hosts {
		s := h.Stats()
		res.forwarded += s.Forwarded
		res.relayed += s.Relayed
		res.captured += s.Captured
		res.bounced += s.Bounced
		if s.Dropped != 0 || s.GapsClosed != 0 || s.Late != 0 || s.HeldOutOfOrder != 0 {
			errorf("%s: dropped %d, gaps closed %d, late %d, held out of order %d",
				h.Name(), s.Dropped, s.GapsClosed, s.Late, s.HeldOutOfOrder)
		}
	}
	if t.Failed() {
		report()
	}
	for _, h := range hosts {
		actx, cancel := timeout()
		if err := h.Stop(actx); err != nil {
			errorf("stopping %s: %v", h.Name(), err)
		}
		cancel()
	}
	res.took = time.Since(began)
	return res
}
