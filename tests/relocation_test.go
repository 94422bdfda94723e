package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testkinds"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// The kind the suites run (internal/testkinds), by the names the tests
// here use.
type (
	tally       = testkinds.Tally
	numbered    = testkinds.Numbered
	numberedAsk = testkinds.NumberedAsk
	readTally   = testkinds.ReadTally
	hangAsk     = testkinds.HangAsk
	padded      = testkinds.Padded
)

var (
	tallyKind  = testkinds.TallyKind
	padding    = testkinds.Padding
	hangingNow = &testkinds.Hanging
)

type relocationRun struct {
	hosts     int // hosts that send and take objects (the last one is drained)
	objects   int
	senders   int // per sending host
	movers    int // goroutines relocating random objects at once
	duration  time.Duration
	faultKill bool // a spare host takes moves and is killed before relay-ready
	faultLink bool // links break right after relay-ready, then heal
	network   bool // hosts talk over transport/tcp (TLS on loopback) instead of inproc; no faults
	postgres  bool // the Location Store and the membership are pgstore's, on a fresh database
	faultDB   bool // with postgres: the server restarts half way through the run
	faultCut  bool // with network: links between random pairs of hosts are cut for 50 ms, every 150 ms, during moves

	// A slow world (slow_test.go); the zero values change nothing.
	seed        uint64                                      // mixed into the senders' and movers' random streams (0: the fixed streams)
	wrap        func(transport.Attacher) transport.Attacher // wraps the hosts' transport (delayed links); faults still go to the inner one
	kind        func() *actor.Kind[tally]                   // each host's kind (nil: tallyKind), e.g. one whose Capture and Restore are slow
	starve      func() (restore func())                     // called before the hosts start; restore after they closed, before the goroutine check
	burst       int                                         // one more sender, on the first staying host, Tells this many numbered messages to one object as fast as it can while a mover relocates that object back and forth between two other staying hosts
	strictOrder bool                                        // no host closes a gap nor runs a message late (Stats.GapsClosed, Stats.Late): none fails
	readers     int                                         // the final reads run on this many goroutines (0, 1: one object after another)
}

// relocationProperty drives numbered traffic from several hosts while
// objects move at random and one host drains, then checks every object:
// per sender, every message ran exactly once and in order, every Ask
// completed once with its own answer, and no goroutine is left.
func relocationProperty(t *testing.T, cfg relocationRun) {
	ctx := context.Background()
	var unstarve func() // called before the goroutine check, or on an early return
	if cfg.starve != nil {
		unstarve = cfg.starve()
		defer func() {
			if unstarve != nil {
				unstarve()
			}
		}()
	}
	net := localnet.New(localnet.Options{})
	var attacher transport.Attacher = net.Transport
	if cfg.network {
		attacher = newTLSAttacher(tcp.Options{}) // each host its own listener on loopback, its own certificate
	}
	hostAttacher := attacher
	if cfg.wrap != nil {
		hostAttacher = cfg.wrap(attacher)
	}
	var store relocation.Store = net.Store
	var members membership.Membership = net.Membership
	var db *pgtest.DB
	var closeStore []func() // after the hosts, before the goroutine check
	if cfg.postgres {
		db = pgtest.New(t)
		if cfg.faultDB && db.Server == nil {
			t.Skip("BERTH_TEST_DATABASE_URL names a server this test cannot restart")
		}
		ps, pm, closePG := openPostgres(t, db.URL)
		closeStore = append(closeStore, closePG)
		store, members = ps, pm
	}
	var dbDown atomic.Bool // the server is restarting: store calls may fail
	var hosts []*actor.Host
	var liveMu sync.Mutex
	live := map[string]*actor.Host{} // the running hosts, by name
	host := func(name string) *actor.Host {
		liveMu.Lock()
		defer liveMu.Unlock()
		return live[name]
	}
	rejected := &rejectLog{}
	start := func(name string) *actor.Host {
		h, err := actor.NewHost(actor.Config{Name: name, Transport: hostAttacher, Store: store, Membership: members,
			Logger: quietLogger(), CutoverWait: 2 * time.Second, Observer: rejected})
		if err != nil {
			t.Fatal(err)
		}
		kind := tallyKind
		if cfg.kind != nil {
			kind = cfg.kind
		}
		h.Register(kind())
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		liveMu.Lock()
		live[name] = h
		liveMu.Unlock()
		return h
	}
	for i := 1; i <= cfg.hosts; i++ {
		hosts = append(hosts, start("h"+strconv.Itoa(i)))
	}
	var spare *actor.Host
	if cfg.faultKill {
		spare = start("spare")
	}
	defer func() {
		for _, h := range hosts {
			h.Close()
		}
		if spare != nil {
			spare.Close()
		}
		for i := len(closeStore) - 1; i >= 0; i-- {
			closeStore[i]()
		}
		if unstarve != nil {
			unstarve()
			unstarve = nil
		}
		testutil.CheckNoGoroutines(t)
	}()
	drained := hosts[len(hosts)-1]
	staying := hosts[:len(hosts)-1]
	ref := func(i int) actor.Ref { return actor.Ref{Kind: "tally", ID: strconv.Itoa(i)} }
	for i := 0; i < cfg.objects; i++ { // spread the objects over every host
		if _, err := actor.Ask[readTally, tally](ctx, hosts[i%len(hosts)], ref(i), readTally{}); err != nil {
			t.Fatal(err)
		}
	}

	type sender struct {
		name string
		host *actor.Host
		sent []int
	}
	var senders []*sender
	for _, h := range staying {
		for s := 0; s < cfg.senders; s++ {
			senders = append(senders, &sender{name: h.Name() + "/" + strconv.Itoa(s), host: h, sent: make([]int, cfg.objects)})
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var asks, tells, dbRefused atomic.Int64
	var pushedBack atomic.Int64 // sends refused unsent (refusedUnsent), sent again
	for si, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(si), 7^cfg.seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(cfg.objects)
				seq := s.sent[i] + 1
				if rng.IntN(8) == 0 {
					actx, cancel := context.WithTimeout(ctx, 20*time.Second)
					got, err := actor.Ask[numberedAsk, int](actx, s.host, ref(i), numberedAsk{Sender: s.name, Seq: seq})
					cancel()
					if err != nil && dbDown.Load() && errors.Is(err, payload.Unavailable) {
						dbRefused.Add(1) // the store is out of reach: refused, the sender knows
						continue
					}
					if refusedUnsent(err) {
						pushedBack.Add(1) // not sent: the number is sent again
						continue
					}
					if err != nil || got != seq {
						t.Errorf("%s: Ask #%d to object %d = %d, %v", s.name, seq, i, got, err)
						return
					}
					asks.Add(1)
				} else {
					if err := actor.Tell(ctx, s.host, ref(i), numbered{Sender: s.name, Seq: seq}); err != nil {
						if dbDown.Load() && errors.Is(err, payload.Unavailable) {
							dbRefused.Add(1)
							continue
						}
						if refusedUnsent(err) {
							pushedBack.Add(1)
							continue
						}
						t.Errorf("%s: Tell #%d to object %d: %v", s.name, seq, i, err)
						return
					}
					tells.Add(1)
				}
				s.sent[i] = seq
			}
		}()
	}

	// Faults: a record hook that acts on the move records it sees.
	var kills, breaks atomic.Int64
	var faultMu sync.Mutex
	var brokenMoves sync.Map
	killed := false
	if cfg.faultKill || cfg.faultLink {
		net.SetRecordHook(func(from, to string, rec relocation.Record) bool {
			switch rec.(type) {
			case *relocation.Prepare:
				if cfg.faultKill && to == "spare" {
					faultMu.Lock()
					first := !killed
					killed = true
					faultMu.Unlock()
					if first {
						kills.Add(1)
						// Before relay-ready: the move aborts, the object
						// resumes at its source.
						go func() {
							liveMu.Lock()
							delete(live, "spare")
							liveMu.Unlock()
							net.Kill("spare") // its process dies
							spare.Close()
						}()
					}
					return false
				}
			case *relocation.Relay, *relocation.Cutover:
				// After relay-ready: the link breaks, losing the relays
				// and the cutover, and heals a little later.
				// Once per move (its resend must get through before the
				// target's cutover wait ends: past it the target commits
				// without the lost relays, which then run late — a
				// documented limit, not what this test is about).
				if !cfg.faultLink {
					return true
				}
				if _, again := brokenMoves.LoadOrStore(rec.MoveID(), true); again {
					return true
				}
				if cfg.faultLink && breaks.Load() < 20 && !net.Broken(from, to) {
					breaks.Add(1)
					net.Break(from, to)
					go func() {
						time.Sleep(30 * time.Millisecond) // the outage
						net.Heal(from, to)
					}()
					return false
				}
			}
			return true
		})
	}

	// Link cuts over the network: both ends of a random pair, for 50 ms (the
	// session layer resends what was lost once the link is back; well
	// within CutoverWait, so no relay runs late).
	var cuts atomic.Int64
	cutStop := make(chan struct{})
	var cwg sync.WaitGroup
	if cfg.faultCut {
		ra := attacher.(*tlsAttacher)
		seed := time.Now().UnixNano()
		t.Logf("link cuts: seed %d", seed)
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), 5))
			tick := time.NewTicker(150 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-cutStop:
					return
				case <-tick.C:
				}
				a, b := staying[rng.IntN(len(staying))].Name(), staying[rng.IntN(len(staying))].Name()
				ta, tb := ra.Transport(a), ra.Transport(b)
				if a == b || ta == nil || tb == nil {
					continue
				}
				cuts.Add(1)
				ta.Cut(b, true)
				tb.Cut(a, true)
				select {
				case <-time.After(50 * time.Millisecond): // the outage
				case <-cutStop:
				}
				ta.Cut(b, false)
				tb.Cut(a, false)
			}
		}()
	}

	// Movers: random relocations among the staying hosts (and the spare).
	targets := append([]*actor.Host(nil), staying...)
	if spare != nil {
		targets = append(targets, spare)
	}
	var moved, aborted, refused atomic.Int64
	var abortMu sync.Mutex
	var abortErrs []string // the first aborted moves' errors, for a failure
	noteAbort := func(obj int, from, to string, err error) {
		aborted.Add(1)
		abortMu.Lock()
		if len(abortErrs) < 5 {
			abortErrs = append(abortErrs, fmt.Sprintf("object %d %s→%s: %v", obj, from, to, err))
		}
		abortMu.Unlock()
	}
	moverStop := make(chan struct{})
	var mwg sync.WaitGroup
	for m := 0; m < cfg.movers; m++ {
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			rng := rand.New(rand.NewPCG(uint64(m), 99^cfg.seed))
			for {
				select {
				case <-moverStop:
					return
				default:
				}
				i := rng.IntN(cfg.objects)
				row, err := store.Get(ctx, relocation.Object{Kind: "tally", ID: strconv.Itoa(i)})
				if err != nil {
					continue
				}
				src := host(row.Host)
				dst := targets[rng.IntN(len(targets))]
				if src == nil || src == dst || src == drained || host(dst.Name()) == nil {
					continue
				}
				switch err := src.Relocate(ctx, ref(i), dst.Name()); {
				case err == nil:
					moved.Add(1)
				case errors.Is(err, actor.ErrNotLocal), errors.Is(err, actor.ErrMoveInProgress), errors.Is(err, actor.ErrShuttingDown),
					errors.Is(err, actor.ErrAlreadyThere): // it moved to dst meanwhile
				case errors.Is(err, payload.Unavailable):
					noteAbort(i, src.Name(), dst.Name(), err) // the move aborted; the object resumed at its source (or the store was out of reach)
				default:
					refused.Add(1)
					if !cfg.faultKill { // with the spare killed, moves to it are refused (NotFound)
						t.Errorf("Relocate %d from %s to %s: %v", i, src.Name(), dst.Name(), err)
					}
				}
			}
		}()
	}

	// The burst: one more sender Tells cfg.burst numbered messages to one
	// object as fast as it can (no Ask paces it), while a mover of its own
	// relocates that object back and forth between two other staying hosts
	// until the burst has been sent.
	var burstDone chan struct{} // closed when the burst sender ends
	var burstMoves, burstSent atomic.Int64
	var burstTook time.Duration // written by the burst sender before burstDone
	burstObj := 1 % cfg.objects // activated on hosts[1], staying[1]
	if cfg.burst > 0 {
		if len(staying) < 3 {
			t.Fatal("a burst needs three staying hosts: the sender's and two to move its object between")
		}
		b := &sender{name: "burst", host: staying[0], sent: make([]int, cfg.objects)}
		senders = append(senders, b) // checked with the others
		burstDone = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(burstDone)
			began := time.Now()
			for seq := 1; seq <= cfg.burst; seq++ {
				if seq%256 == 0 {
					select {
					case <-stop: // the run ended without it (it failed)
						return
					default:
					}
				}
				err := actor.Tell(ctx, b.host, ref(burstObj), numbered{Sender: b.name, Seq: seq})
				if refusedUnsent(err) {
					pushedBack.Add(1) // not sent: the number is sent again
					seq--
					select {
					case <-stop:
						return
					default:
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: Tell #%d to object %d: %v", b.name, seq, burstObj, err)
					return
				}
				tells.Add(1)
				b.sent[burstObj] = seq
				burstSent.Store(int64(seq))
			}
			burstTook = time.Since(began)
		}()
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			x, y := staying[1], staying[2]
			for {
				select {
				case <-burstDone:
					return
				case <-moverStop:
					return
				default:
				}
				row, err := store.Get(ctx, relocation.Object{Kind: "tally", ID: ref(burstObj).ID})
				if err != nil {
					continue
				}
				src := host(row.Host)
				if src == nil || src == drained {
					time.Sleep(time.Millisecond) // mid-move, or being drained
					continue
				}
				dst := x
				if src == x {
					dst = y
				}
				switch err := src.Relocate(ctx, ref(burstObj), dst.Name()); {
				case err == nil:
					burstMoves.Add(1)
					moved.Add(1)
				case errors.Is(err, actor.ErrNotLocal), errors.Is(err, actor.ErrMoveInProgress), errors.Is(err, actor.ErrAlreadyThere):
					// a random mover moved it meanwhile
				case errors.Is(err, payload.Unavailable):
					noteAbort(burstObj, src.Name(), dst.Name(), err)
				default:
					refused.Add(1)
					t.Errorf("Relocate the burst's object %d from %s to %s: %v", burstObj, src.Name(), dst.Name(), err)
				}
			}
		}()
	}

	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-stop:
		}
	}
	wait(cfg.duration / 3)
	if err := drained.Drain(ctx); err != nil {
		t.Errorf("drain: %v", err)
	}
	if cfg.faultDB {
		// The store's server restarts: calls fail (Unavailable) for a
		// moment; hosts renew their leases after it, moves retry or abort.
		dbDown.Store(true)
		restart := time.Now()
		if err := db.Server.Restart(); err != nil {
			t.Fatalf("restarting Postgres: %v", err)
		}
		t.Logf("Postgres restarted in %v", time.Since(restart).Round(time.Millisecond))
		// Calls in flight when it came back may still fail: a moment's grace.
		time.AfterFunc(2*time.Second, func() { dbDown.Store(false) })
	}
	wait(cfg.duration / 2)
	if burstDone != nil {
		select {
		case <-burstDone:
		case <-time.After(2 * time.Minute):
			t.Errorf("the burst sender sent %d of %d messages in 2 minutes", burstSent.Load(), cfg.burst)
		}
	}
	close(cutStop)
	cwg.Wait()
	close(moverStop)
	mwg.Wait()
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	if cfg.faultLink {
		net.SetRecordHook(nil)
		for _, h := range staying {
			for _, o := range staying {
				if h != o {
					net.Heal(h.Name(), o.Name())
				}
			}
		}
	}

	// Every object, asked through every sending host (after that host's
	// own messages).
	var readAhead []tally // with cfg.readers: every object, read cfg.readers at a time
	if cfg.readers > 1 {
		readAhead = make([]tally, cfg.objects)
		errs := make([]error, cfg.objects)
		var next atomic.Int64
		var rwg sync.WaitGroup
		for range cfg.readers {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				for i := int(next.Add(1) - 1); i < cfg.objects; i = int(next.Add(1) - 1) {
					for _, h := range staying {
						st, err := readObject(ctx, h, ref(i))
						if err != nil {
							errs[i] = fmt.Errorf("through %s: %w", h.Name(), err)
							break
						}
						readAhead[i] = st
					}
				}
			}()
		}
		rwg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("reading object %d %v", i, err)
			}
		}
	}
	for i := 0; i < cfg.objects; i++ {
		var st tally
		for _, h := range staying {
			if readAhead != nil {
				st = readAhead[i]
				break
			}
			var err error
			st, err = readObject(ctx, h, ref(i))
			if err != nil {
				t.Fatalf("reading object %d through %s: %v", i, h.Name(), err)
			}
		}
		if len(st.Bad) > 0 {
			t.Errorf("object %d ran messages out of order: %v", i, st.Bad)
		}
		for _, s := range senders {
			if got, want := st.Count[s.name], s.sent[i]; got != want {
				t.Errorf("object %d ran %d messages of %s, want %d (lost or duplicated)", i, got, s.name, want)
			}
		}
		if t.Failed() {
			t.Logf("rejections: %v", rejected)
			for _, h := range hosts {
				t.Logf("%s: %+v", h.Name(), h.Stats())
			}
			return
		}
	}
	for _, h := range hosts { // a stall, a slow store or a starved process pauses a host; none closes itself
		if err := h.Err(); err != nil {
			t.Errorf("%s closed itself: %v", h.Name(), err)
		}
	}
	if cfg.strictOrder {
		all := append([]*actor.Host(nil), hosts...)
		if spare != nil {
			all = append(all, spare)
		}
		for _, h := range all {
			if s := h.Stats(); s.GapsClosed != 0 || s.Late != 0 {
				t.Errorf("%s: %d sequence numbers given up on (GapsClosed), %d messages run late (Late), %d held out of order now; no host failed: %+v",
					h.Name(), s.GapsClosed, s.Late, s.HeldOutOfOrder, s)
			}
		}
	}
	if moved.Load() == 0 {
		t.Fatal("no object moved")
	}
	if cfg.burst > 0 && burstMoves.Load() == 0 {
		t.Fatalf("the burst's object never moved during the burst (%d messages in %v)", cfg.burst, burstTook)
	}
	if cfg.faultKill && (kills.Load() == 0 || aborted.Load() == 0) {
		t.Fatalf("the kill fault fired %d times and aborted %d moves; want both", kills.Load(), aborted.Load())
	}
	if cfg.faultCut && cuts.Load() == 0 {
		t.Fatal("no link was cut")
	}
	if !cfg.faultKill && !cfg.faultDB && !cfg.faultCut && aborted.Load() != 0 {
		t.Fatalf("%d moves aborted without a kill (a broken link must not abort a move past relay-ready): %v", aborted.Load(), abortErrs)
	}
	if cfg.faultLink && breaks.Load() == 0 {
		t.Fatal("the link fault never fired")
	}
	t.Logf("%d tells, %d asks; %d moves done, %d aborted, %d refused; %d drained; faults: %d kills, %d link breaks, %d link cuts; %d sends refused while the store restarted; %d refused unsent (pushed back, or no room within SendTimeout) and sent again",
		tells.Load(), asks.Load(), moved.Load(), aborted.Load(), refused.Load(), drained.Stats().Relocations, kills.Load(), breaks.Load(), cuts.Load(), dbRefused.Load(), pushedBack.Load())
	if cfg.burst > 0 {
		t.Logf("burst: %d tells to object %d from %s in %v, while it moved %d times", cfg.burst, burstObj, staying[0].Name(), burstTook.Round(time.Millisecond), burstMoves.Load())
	}
}

// TestRelocationLosesDuplicatesAndReordersNothing: four hosts, 1,000
// objects with preserved state, numbered traffic from six senders, four
// goroutines moving random objects, and a host drain in the middle.
func TestRelocationLosesDuplicatesAndReordersNothing(t *testing.T) {
	d := 3 * time.Second
	if *long {
		d = 60 * time.Second
	}
	relocationProperty(t, relocationRun{hosts: 4, objects: 1000, senders: 2, movers: 4, duration: d})
}

// TestRelocationOverTCPLosesDuplicatesAndReordersNothing is the property
// over transport/tcp: each host has its own listener on loopback and its
// own certificate (mutual TLS, one process), peers learn each other's
// addresses from the membership.
func TestRelocationOverTCPLosesDuplicatesAndReordersNothing(t *testing.T) {
	relocationProperty(t, relocationRun{hosts: 3, objects: 300, senders: 2, movers: 3, duration: 2 * time.Second, network: true})
}

// TestRelocationOverTCPAndPostgresLosesDuplicatesAndReordersNothing: the
// property with hosts over transport/tcp and the Location Store and
// membership in Postgres (pgstore).
func TestRelocationOverTCPAndPostgresLosesDuplicatesAndReordersNothing(t *testing.T) {
	relocationProperty(t, relocationRun{hosts: 3, objects: 200, senders: 2, movers: 3, duration: 3 * time.Second, network: true, postgres: true})
}

// TestRelocationOverTCPSurvivesLinkCuts: the property over transport/tcp
// with the links between random pairs of hosts cut for 50 ms every 150 ms
// while objects move (moves in every phase see cuts; a cut closes the
// connections both ways): the session layer sends again what a cut lost;
// nothing is lost, duplicated or reordered. (A move whose preflight or
// prepare meets a cut may abort; its object resumes at its source.)
func TestRelocationOverTCPSurvivesLinkCuts(t *testing.T) {
	relocationProperty(t, relocationRun{hosts: 3, objects: 200, senders: 2, movers: 3, duration: 4 * time.Second, network: true, faultCut: true})
}

// TestRelocationSurvivesAPostgresRestart: the Location Store's server
// restarts mid-run, after the drain, while moves and traffic go on. Sends
// refused meanwhile (Unavailable: the sender knows) are not counted;
// every accepted message runs once, in order, and the hosts go on.
func TestRelocationSurvivesAPostgresRestart(t *testing.T) {
	relocationProperty(t, relocationRun{hosts: 3, objects: 200, senders: 2, movers: 3, duration: 4 * time.Second, postgres: true, faultDB: true})
}

// TestRelocationAbortsWhenTheTargetDiesBeforeRelayReady: moves to a spare
// host that is killed when it is about to prepare; those moves abort and
// their objects resume at their sources with nothing lost or run twice.
func TestRelocationAbortsWhenTheTargetDiesBeforeRelayReady(t *testing.T) {
	relocationProperty(t, relocationRun{hosts: 3, objects: 300, senders: 2, movers: 3, duration: 2 * time.Second, faultKill: true})
}

// TestRelocationRetransmitsWhenTheLinkBreaksAfterRelayReady: the link
// between source and target breaks right after relay-ready, losing the
// relays and the cutover; after it heals the source sends them again and
// the target replaces its partial span: nothing lost or run twice.
func TestRelocationRetransmitsWhenTheLinkBreaksAfterRelayReady(t *testing.T) {
	relocationProperty(t, relocationRun{hosts: 3, objects: 300, senders: 2, movers: 3, duration: 2 * time.Second, faultLink: true})
}

// rejectLog counts rejections by reason, for failure reports.
type rejectLog struct {
	mu sync.Mutex
	m  map[string]int
}

func (r *rejectLog) Attach(actor.StatsSource)                                    {}
func (r *rejectLog) Admitted(string, mailbox.Lane, int)                          {}
func (r *rejectLog) Handled(string, time.Duration, time.Duration, actor.Outcome) {}
func (r *rejectLog) Activated(string)                                            {}
func (r *rejectLog) Deactivated(string)                                          {}
func (r *rejectLog) Rejected(kind, reason string) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]int{}
	}
	r.m[reason]++
	r.mu.Unlock()
}

func (r *rejectLog) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.m)
}

// readObject asks object r, through host h, for what it ran, within 20 s.
// A read refused unsent — the object's reorder buffer still pushing back
// on h while a burst drains, or no room within SendTimeout — is sent
// again, as the senders do: it was not sent, and it asks nothing twice.
func readObject(ctx context.Context, h *actor.Host, r actor.Ref) (tally, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		st, err := actor.Ask[readTally, tally](ctx, h, r, readTally{})
		if err == nil || !refusedUnsent(err) || ctx.Err() != nil {
			return st, err
		}
	}
}
