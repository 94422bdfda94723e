package tests

// Durable state across OS processes: node children (child_test.go) host
// the persistent pjournal kind, its states in pgstore on the tests'
// Postgres; this process sends through a gateway host of its own and
// reads the stored states directly (pgstore.Store.LoadState). The
// property, as in actor's TestCrashesAtRandomMomentsLoseNoAcknowledgedUpdate:
// whatever crashes, pauses or restarts, every object holds, per sender,
// every message that was answered and nothing the sender never sent — a
// prefix of what it sent, each message applied once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

var (
	persistSeed  = flag.Uint64("persist.seed", 0, "persist_procs_test.go: the seed of the random choices (0: one from the clock; each test logs its seed)")
	persistFor   = flag.Duration("persist.for", 0, "persist_procs_test.go: how long the load runs (0: 3 s, 30 s with -long)")
	persistKills = flag.Int("persist.kills", 0, "TestDurableStateSurvivesSIGKILLAtRandomMoments: how many nodes are killed during the load (0: 2, 8 with -long)")
)

// persistSeedFor returns the test's seed (-persist.seed, or one from the
// clock) and logs it.
func persistSeedFor(t *testing.T) uint64 {
	seed := *persistSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1_000_000_000)
	}
	t.Logf("seed %d (-persist.seed=%d to repeat)", seed, seed)
	return seed
}

// persistDuration is how long a test's load runs.
func persistDuration() time.Duration {
	switch {
	case *persistFor > 0:
		return *persistFor
	case *long:
		return 30 * time.Second
	}
	return 3 * time.Second
}

// persistCluster is node children on one database, a gateway in this
// process, and the store, read directly.
type persistCluster struct {
	t     *testing.T
	db    string
	gw    *actor.Host
	store *pgstore.Store

	mu    sync.Mutex
	nodes []*child // the live ones
	next  int      // the number of the next node's name
}

// newPersistCluster starts n node children and the gateway.
func newPersistCluster(t *testing.T, db string, n int) *persistCluster {
	c := &persistCluster{t: t, db: db}
	for range n {
		c.startNode()
	}
	store, members, closePG := openPostgres(t, db)
	t.Cleanup(closePG)
	c.store = store
	h, err := actor.NewHost(actor.Config{Name: "gateway", Transport: newTLSAttacher(tcp.Options{}), Store: store,
		Membership: members, Logger: quietLogger(), Gateway: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Register(pjournalKind())
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c.gw = h
	testutil.WaitForWithin(t, "the gateway to know the nodes", time.Minute, func() bool { return len(h.Peers()) >= n })
	return c
}

// startNode starts one more node child, n<k>.
func (c *persistCluster) startNode() *child {
	c.mu.Lock()
	c.next++
	name := "n" + strconv.Itoa(c.next)
	c.mu.Unlock()
	n := startNodeChild(c.t, c.db, name)
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}

// endAll ends the live nodes (closes their standard input: each closes
// its host and exits) and reports one that takes long or does not exit 0.
func (c *persistCluster) endAll() {
	for _, n := range c.live() {
		start := time.Now()
		n.end()
		if took := time.Since(start); took > 5*time.Second || n.cmd.ProcessState.ExitCode() != 0 {
			c.t.Logf("%s ended in %v: %v; the end of its log:\n%s", n.name, took.Round(time.Millisecond), n.cmd.ProcessState, tailString(n.stderr(), 3000))
		}
	}
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// live returns the live nodes.
func (c *persistCluster) live() []*child {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// kill SIGKILLs node n and forgets it.
func (c *persistCluster) kill(n *child) {
	c.forget(n)
	n.kill()
}

// forget removes n from the live nodes.
func (c *persistCluster) forget(n *child) {
	c.mu.Lock()
	c.nodes = slices.DeleteFunc(c.nodes, func(x *child) bool { return x == n })
	c.mu.Unlock()
}

// owned counts the objects 0..objects-1 the store says host owns.
func (c *persistCluster) owned(host string, objects int) int {
	n := 0
	for i := range objects {
		row, err := c.store.Get(context.Background(), relocation.Object{Kind: "pjournal", ID: strconv.Itoa(i)})
		if err == nil && row.Host == host {
			n++
		}
	}
	return n
}

// activate asks every object once through the gateway: each activates
// on a node (placed by the gateway), where it was never written.
func (c *persistCluster) activate(objects int) {
	c.t.Helper()
	for i := range objects {
		if _, err := askRetry[pjRead, pjState](c.gw, pjRef(i), pjRead{}, 30*time.Second); err != nil {
			c.t.Fatalf("activating object %d: %v", i, err)
		}
	}
}

// askRetry asks until an answer comes or within is up.
func askRetry[M, R any](h *actor.Host, ref actor.Ref, m M, within time.Duration) (R, error) {
	r, _, err := askRetryNoting[M, R](h, ref, m, within)
	return r, err
}

// askRetryNoting is askRetry that also returns the errors of the attempts
// before the last: each of them may have run (an Ask that timed out, or
// whose host failed or rejoined), so the answer may be to a repeat.
func askRetryNoting[M, R any](h *actor.Host, ref actor.Ref, m M, within time.Duration) (R, []error, error) {
	deadline := time.Now().Add(within)
	var earlier []error
	for {
		d := time.Now().Add(3 * time.Second)
		if d.After(deadline) {
			d = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), d)
		r, err := actor.Ask[M, R](ctx, h, ref, m)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return r, earlier, err
		}
		earlier = append(earlier, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// pjSender is one closed-loop sender: for each object it sends the
// number after the last one answered (acked) until that one is answered
// — a message not answered (an error, a timeout) is sent again, with its
// number, the next time the sender picks that object. sent is the
// highest number it sent each object.
type pjSender struct {
	name              string
	acked, sent       []int
	answered, retries int
	errKinds          map[string]int
	errs              []string     // the first few
	events            []pjAnswered // with record: every answered message
}

// pjAnswered is an answered message: when it was sent and answered, and
// whether it applied (Fresh) or was a retry of an applied one.
type pjAnswered struct {
	sent, answered time.Time
	fresh          bool
}

// answerLog, given to runSenders, has every answer kept (pjSender.events)
// and counts the fresh answers to messages sent after a time set while
// the senders run, so that a test can wait for them.
type answerLog struct {
	after atomic.Int64 // unix nanoseconds; 0: count nothing yet
	fresh atomic.Int64 // fresh answers to messages sent after it
}

// note records an answer of a message sent at sent.
func (l *answerLog) note(sent time.Time, fresh bool) {
	if a := l.after.Load(); fresh && a != 0 && sent.UnixNano() > a {
		l.fresh.Add(1)
	}
}

// runSenders starts n senders to objects 0..objects-1 through h, each Ask
// within askTimeout, until stop is closed; with rec, every answer is kept.
func runSenders(t *testing.T, h *actor.Host, prefix string, n, objects int, seed uint64, askTimeout time.Duration, rec *answerLog, stop <-chan struct{}) ([]*pjSender, *sync.WaitGroup) {
	var wg sync.WaitGroup
	ss := make([]*pjSender, n)
	for si := range ss {
		s := &pjSender{name: prefix + strconv.Itoa(si), acked: make([]int, objects), sent: make([]int, objects), errKinds: map[string]int{}}
		ss[si] = s
		r := rand.New(rand.NewPCG(seed, uint64(si)+1))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := r.IntN(objects)
				seq := s.acked[i] + 1
				s.sent[i] = max(s.sent[i], seq)
				sentAt := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
				got, err := actor.Ask[pjAppend, pjReply](ctx, h, pjRef(i), pjAppend{Sender: s.name, Seq: seq})
				cancel()
				if err != nil {
					s.retries++
					s.errKinds[payload.KindOf(err).String()]++
					if len(s.errs) < 3 {
						s.errs = append(s.errs, fmt.Sprintf("#%d to %d: %v", seq, i, err))
					}
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				if got.Last < seq {
					t.Errorf("%s's message %d to object %d answered with %+v: the object had not applied it", s.name, seq, i, got)
				}
				s.acked[i] = seq
				s.answered++
				if rec != nil {
					s.events = append(s.events, pjAnswered{sent: sentAt, answered: time.Now(), fresh: got.Fresh})
					rec.note(sentAt, got.Fresh)
				}
			}
		})
	}
	return ss, &wg
}

// sendersSummary sums the senders' counts.
func sendersSummary(ss []*pjSender) string {
	answered, retries := 0, 0
	kinds := map[string]int{}
	var errs []string
	for _, s := range ss {
		answered += s.answered
		retries += s.retries
		for k, n := range s.errKinds {
			kinds[k] += n
		}
		if len(errs) < 3 {
			errs = append(errs, s.errs...)
		}
	}
	return fmt.Sprintf("%d answered, %d sent again (errors by kind %v; e.g. %q)", answered, retries, kinds, errs)
}

// readJournals reads every object through h, all at once, each retried
// until it answers or within is up.
func readJournals(t *testing.T, h *actor.Host, objects int, within time.Duration) []pjState {
	t.Helper()
	js := make([]pjState, objects)
	errs := make([]error, objects)
	var wg sync.WaitGroup
	for i := range objects {
		wg.Go(func() { js[i], errs[i] = askRetry[pjRead, pjState](h, pjRef(i), pjRead{}, within) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("object %d does not serve after %v: %v", i, within, err)
		}
	}
	return js
}

// checkJournals checks the property on every object's state: every
// answered message is in it (last >= acked), nothing past what was sent
// (last <= sent), no hole, and each message applied once (Applied is the
// sum of the lasts). It reports whether all passed.
func checkJournals(t *testing.T, js []pjState, ss []*pjSender) bool {
	t.Helper()
	ok := true
	for i, j := range js {
		if len(j.Holes) > 0 {
			t.Errorf("object %d applied messages past a lost one: %v", i, j.Holes)
			ok = false
		}
		total := 0
		for _, s := range ss {
			last := j.Last[s.name]
			if last < s.acked[i] {
				t.Errorf("object %d lost %s's answered messages: it holds %d, %d was answered", i, s.name, last, s.acked[i])
				ok = false
			}
			if last > s.sent[i] {
				t.Errorf("object %d holds %s's message %d, which was never sent (sent up to %d)", i, s.name, last, s.sent[i])
				ok = false
			}
			total += last
		}
		for name := range j.Last {
			if !slices.ContainsFunc(ss, func(s *pjSender) bool { return s.name == name }) {
				t.Errorf("object %d holds messages of %q, no sender", i, name)
				ok = false
			}
		}
		if j.Applied != total {
			t.Errorf("object %d applied %d messages for %d distinct ones: a message applied twice", i, j.Applied, total)
			ok = false
		}
	}
	return ok
}

// loadStored reads object i's state straight from the store (the zero
// state if it was never written).
func loadStored(t *testing.T, store *pgstore.Store, i int) (relocation.StoredState, pjState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.LoadState(ctx, relocation.Object{Kind: "pjournal", ID: strconv.Itoa(i)})
	if errors.Is(err, relocation.ErrNoState) {
		return relocation.StoredState{}, pjState{Last: map[string]int{}}
	}
	if err != nil {
		t.Fatalf("LoadState of object %d: %v", i, err)
	}
	var j pjState
	if err := json.Unmarshal(st.Data, &j); err != nil {
		t.Fatalf("object %d's stored state %q: %v", i, st.Data, err)
	}
	return st, j
}

// checkServedIsStored checks that what each object served (its reply
// waited for every earlier write) is what the store holds.
func checkServedIsStored(t *testing.T, store *pgstore.Store, js []pjState) {
	t.Helper()
	for i, served := range js {
		if served.Applied == 0 {
			continue // never written: nothing to compare
		}
		_, stored := loadStored(t, store, i)
		if !reflect.DeepEqual(normJournal(served), normJournal(stored)) {
			t.Errorf("object %d served %+v, the store holds %+v", i, served, stored)
		}
	}
}

func normJournal(j pjState) pjState {
	if len(j.Holes) == 0 {
		j.Holes = nil
	}
	if j.Last == nil {
		j.Last = map[string]int{}
	}
	return j
}

// runMovers relocates random objects to random live nodes through the
// gateway, one every 20–80 ms, until stop is closed.
func (c *persistCluster) runMovers(objects int, seed uint64, stop <-chan struct{}) (moved *atomic.Int64, failed *sync.Map, wg *sync.WaitGroup) {
	moved, failed, wg = new(atomic.Int64), new(sync.Map), new(sync.WaitGroup)
	r := rand.New(rand.NewPCG(seed, 0xa0e))
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+r.IntN(60)) * time.Millisecond):
			}
			nodes := c.live()
			dst := nodes[r.IntN(len(nodes))].name
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := c.gw.Relocate(ctx, pjRef(r.IntN(objects)), dst)
			cancel()
			if err == nil {
				moved.Add(1)
				continue
			}
			k := payload.KindOf(err).String()
			n, loaded := failed.LoadOrStore(k, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if !loaded {
				failed.Store("e.g. "+k, err.Error())
			}
		}
	})
	return moved, failed, wg
}

func syncMapString(m *sync.Map) string {
	var parts []string
	m.Range(func(k, v any) bool {
		if n, ok := v.(*atomic.Int64); ok {
			parts = append(parts, fmt.Sprintf("%v:%d", k, n.Load()))
		} else {
			parts = append(parts, fmt.Sprintf("%v:%q", k, v))
		}
		return true
	})
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// TestDurableStateSurvivesSIGKILLAtRandomMoments: three node children
// host 40 persistent journal objects; eight closed-loop senders on a
// gateway in this process append numbered messages to them (a message
// not answered is sent again until it is answered), a mover relocates
// random objects between the nodes, and at random moments a random node
// is SIGKILLed and a new one started. Afterwards every object (the
// killed nodes' objects taken over once their leases ran out) holds
// every answered message, nothing never sent, no hole, each message
// applied once — and serves what the store holds.
func TestDurableStateSurvivesSIGKILLAtRandomMoments(t *testing.T) {
	t.Parallel()
	seed := persistSeedFor(t)
	rng := rand.New(rand.NewPCG(seed, 0x6b))
	d := persistDuration()
	kills := *persistKills
	if kills == 0 {
		kills = 2
		if *long {
			kills = 8
		}
	}
	const objects, senders = 40, 8
	c := newPersistCluster(t, pgtestNew(t), 3)
	c.activate(objects)

	stop := make(chan struct{})
	ss, swg := runSenders(t, c.gw, "s", senders, objects, seed, time.Second, nil, stop)
	moverStop := make(chan struct{})
	moved, moveFailed, mwg := c.runMovers(objects, seed, moverStop)
	start := time.Now()
	at := make([]time.Duration, kills) // the moments of the kills
	for k := range at {
		at[k] = d/10 + time.Duration(rng.Int64N(int64(d*8/10)))
	}
	slices.Sort(at)
	lostWithVictims := 0 // objects the killed nodes owned as they died
	for _, a := range at {
		time.Sleep(time.Until(start.Add(a)))
		// A random node among those that own objects (a fresh node may
		// own none yet).
		nodes := c.live()
		owning := slices.DeleteFunc(slices.Clone(nodes), func(n *child) bool { return c.owned(n.name, objects) == 0 })
		if len(owning) > 0 {
			nodes = owning
		}
		victim := nodes[rng.IntN(len(nodes))]
		c.kill(victim)
		owned := c.owned(victim.name, objects)
		lostWithVictims += owned
		t.Logf("%v: SIGKILLed %s, the owner of %d objects", time.Since(start).Round(time.Millisecond), victim.name, owned)
		n := c.startNode()
		t.Logf("%v: started %s", time.Since(start).Round(time.Millisecond), n.name)
	}
	time.Sleep(time.Until(start.Add(d)))
	close(moverStop)
	mwg.Wait()
	close(stop)
	swg.Wait()
	t.Logf("load for %v: %s; %d moves, failed by kind %s", time.Since(start).Round(time.Millisecond), sendersSummary(ss), moved.Load(), syncMapString(moveFailed))

	readStart := time.Now()
	js := readJournals(t, c.gw, objects, 90*time.Second)
	t.Logf("every object read in %v (the killed nodes' objects once their leases ran out)", time.Since(readStart).Round(time.Millisecond))
	if !checkJournals(t, js, ss) {
		return
	}
	checkServedIsStored(t, c.store, js)
	applied := 0
	for _, j := range js {
		applied += j.Applied
	}
	if applied == 0 || lostWithVictims == 0 {
		t.Fatalf("%d messages applied, %d objects owned by the killed nodes: the run checked nothing of the property", applied, lostWithVictims)
	}
	t.Logf("%d messages applied over %d objects; %d nodes killed", applied, objects, kills)
	c.endAll()
}

// processStopped reports whether process pid is stopped (SIGSTOP), by
// its state in /proc.
func processStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, ok := bytes.Cut(b, []byte(") ")) // after the command name, which may hold spaces
	return ok && len(rest) > 0 && rest[0] == 'T'
}

// pauseLine is the paused node's log line: the writes of the batch it
// stopped in, each kind/id@owner-generation.
var pauseLine = regexp.MustCompile(`PAUSE IN WriteStates ([^\n]*)\n`)

// resumedLine is its log line once the paused write returned.
var resumedLine = regexp.MustCompile(`RESUMED WriteStates (\d+) writes: fenced \[([\d ]*)\], err ([^\n]*?); (before: [^\n]*)\n`)

// TestAPausedNodesWritesAreFencedAfterItsObjectsMoveOn: three node
// children host 24 persistent journal objects, a third of them on na;
// closed-loop senders on a gateway here append to all of them. na stops
// (SIGSTOP) inside one of its state writes, with the batch not yet sent
// to the store, and stays stopped past its lease (15 s): the other nodes
// take its objects over, restoring their last durable state, and the
// senders update them there. Then na resumes and its write goes on to the
// store with the ownership it was made with. The store fences every write
// of the batch: each of na's objects keeps the state and the owner
// generation of its new owner, byte for byte (read with LoadState); na
// joins again as a new run (it does not exit); and every object holds
// every answered message once.
func TestAPausedNodesWritesAreFencedAfterItsObjectsMoveOn(t *testing.T) {
	t.Parallel()
	seed := persistSeedFor(t)
	const objects, senders = 24, 8
	c := newPersistCluster(t, pgtestNew(t), 3)
	nodes := c.live()
	na := nodes[0]
	t.Cleanup(func() { _ = na.cmd.Process.Signal(syscall.SIGCONT) })
	for _, n := range nodes {
		n.waitPeers(t, 2)
	}
	for i := range objects { // object i activates on nodes[i%3]: a third on na
		nodes[i%3].must(t, "jread "+strconv.Itoa(i))
	}
	ctx := context.Background()
	owner := func(i int) relocation.Row {
		t.Helper()
		row, err := c.store.Get(ctx, relocation.Object{Kind: "pjournal", ID: strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("object %d's row: %v", i, err)
		}
		return row
	}
	var onNa []int
	for i := range objects {
		if owner(i).Host == na.name {
			onNa = append(onNa, i)
		}
	}
	if len(onNa) == 0 {
		t.Fatalf("no object on %s", na.name)
	}

	stop := make(chan struct{})
	ss, swg := runSenders(t, c.gw, "s", senders, objects, seed, 2*time.Second, nil, stop)
	time.Sleep(500 * time.Millisecond) // the objects are written meanwhile
	na.must(t, "pausewrite 3 3000")    // a batch of three or more writes, if one comes within 3 s
	var paused []string
	testutil.WaitForWithin(t, na.name+" to stop inside a state write", time.Minute, func() bool {
		m := pauseLine.FindStringSubmatch(na.stderr())
		if m != nil {
			paused = strings.Fields(m[1])
		}
		return m != nil
	})
	testutil.WaitForWithin(t, na.name+" to be stopped", time.Minute, func() bool { return processStopped(na.cmd.Process.Pid) })
	pausedAt := time.Now()
	t.Logf("%s stopped inside a write of %v", na.name, paused)
	pre := map[int]relocation.StoredState{} // na's objects' states as it stopped
	for _, i := range onNa {
		pre[i], _ = loadStored(t, c.store, i)
	}
	for _, w := range paused {
		obj, _, _ := strings.Cut(w, "@")
		id, _ := strings.CutPrefix(obj, "pjournal/")
		if !slices.Contains(onNa, atoi(id)) {
			t.Fatalf("%s's paused write %s is of an object not on it (%v)", na.name, w, onNa)
		}
	}

	// Its objects are taken over once its lease ran out, and updated there.
	after := &pjSender{name: "after", acked: make([]int, objects), sent: make([]int, objects)}
	ss = append(ss, after)
	var wg sync.WaitGroup
	errs := make([]error, objects)
	for _, i := range onNa {
		wg.Go(func() {
			after.sent[i] = 1
			got, earlier, err := askRetryNoting[pjAppend, pjReply](c.gw, pjRef(i), pjAppend{Sender: "after", Seq: 1}, time.Minute)
			if err != nil {
				errs[i] = err
				return
			}
			// Applied by this answer, or by an earlier attempt that ended
			// without one (it may have run: the answer is then to a repeat).
			if got.Last != 1 || !got.Fresh && len(earlier) == 0 {
				errs[i] = fmt.Errorf("answered %+v after %d failed attempts %v", got, len(earlier), earlier)
				return
			}
			after.acked[i] = 1
		})
	}
	wg.Wait()
	var failed []string
	for _, i := range onNa {
		if errs[i] != nil {
			failed = append(failed, fmt.Sprintf("object %d: %v; its row now %+v", i, errs[i], owner(i)))
		}
	}
	if len(failed) > 0 {
		// What the gateway and the living nodes hold, to tell a stuck
		// takeover from a message held for its order or for a look-up.
		var b strings.Builder
		l, ok, lerr := c.store.Lease(ctx, na.name)
		fmt.Fprintf(&b, "%s's lease in the store: %+v (found %v, %v); the gateway's peers %v\nthe database:\n%s",
			na.name, l, ok, lerr, c.gw.Peers(), dbActivity(c.db))
		fmt.Fprintf(&b, "gateway: %+v\n", c.gw.Stats())
		for _, n := range nodes[1:] {
			fmt.Fprintf(&b, "%s: %s\n%s's log:\n%s\n", n.name, n.must(t, "stats"), n.name, tailString(n.stderr(), 3000))
		}
		t.Fatalf("%d of %s's %d objects (on it when it stopped) not updated elsewhere within a minute:\n%s\n%s",
			len(failed), na.name, len(onNa), strings.Join(failed, "\n"), b.String())
	}
	t.Logf("%s's %d objects taken over and updated %v after it stopped", na.name, len(onNa), time.Since(pausedAt).Round(time.Millisecond))
	time.Sleep(time.Second) // the senders go on there
	close(stop)
	swg.Wait()
	t.Logf("load: %s", sendersSummary(ss))
	js := readJournals(t, c.gw, objects, time.Minute) // each read after every earlier write of its object
	snap := map[int]relocation.StoredState{}
	for _, i := range onNa {
		row := owner(i)
		snap[i], _ = loadStored(t, c.store, i)
		if row.Host == na.name || row.OwnerGen != snap[i].OwnerGen || snap[i].OwnerGen == pre[i].OwnerGen {
			t.Errorf("object %d after the takeover: row on %s, owner generation %d; stored state of owner generation %d (%d when %s stopped); want a new owner's",
				i, row.Host, row.OwnerGen, snap[i].OwnerGen, pre[i].OwnerGen, na.name)
		}
	}
	if t.Failed() {
		return
	}

	// na resumes: its write goes on, its lease is gone.
	if err := na.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The membership ended its run: it drops what is left of the old
	// run's objects and joins again as a new run; it does not exit.
	testutil.WaitForWithin(t, na.name+" to join again as a new run after it resumed past its lease", time.Minute, func() bool {
		select {
		case <-na.done:
			t.Fatalf("%s exited (%v) after it resumed; its log:\n%s", na.name, na.cmd.ProcessState, na.stderr())
		default:
		}
		log := na.stderr()
		return resumedLine.MatchString(log) && strings.Contains(log, "it joins again as a new run")
	})
	c.forget(na)
	if m := resumedLine.FindStringSubmatch(na.stderr()); m == nil {
		t.Errorf("%s did not log its resumed write; its log:\n%s", na.name, na.stderr())
	} else {
		n, fenced := atoi(m[1]), strings.Fields(m[2])
		t.Logf("%s's resumed write of %d states: fenced %v, err %s; %s", na.name, n, fenced, m[3], m[4])
		if strings.Contains(m[4], " "+na.name+" owner") {
			t.Errorf("%s's resumed write met a row of its own (%s): it ran before the takeover", na.name, m[4])
		}
		if m[3] != "<nil>" || len(fenced) != n {
			t.Errorf("%s's resumed write of %d states: fenced %v, err %s; want every one fenced (%s)", na.name, n, fenced, m[3], m[4])
		}
	}
	for _, i := range onNa {
		st, _ := loadStored(t, c.store, i)
		if st.OwnerGen != snap[i].OwnerGen || !bytes.Equal(st.Data, snap[i].Data) {
			t.Errorf("object %d: after %s resumed the store holds %s of owner generation %d; it held %s of %d (its new owner's)",
				i, na.name, st.Data, st.OwnerGen, snap[i].Data, snap[i].OwnerGen)
		}
		if row := owner(i); row.Host == na.name {
			t.Errorf("object %d is back on %s", i, na.name)
		}
	}
	if !checkJournals(t, js, ss) {
		return
	}
	checkServedIsStored(t, c.store, js)
	again := readJournals(t, c.gw, objects, time.Minute)
	for i := range again {
		if !reflect.DeepEqual(normJournal(again[i]), normJournal(js[i])) {
			t.Errorf("object %d served %+v before %s resumed, %+v after", i, js[i], na.name, again[i])
		}
	}
	c.endAll()
}

// pgProbe connects to the database again and again and records when
// connections succeed and fail: the intervals where the server was down.
type pgProbe struct {
	mu    sync.Mutex
	tries []pgTry
}

type pgTry struct {
	start, end time.Time
	ok         bool
}

func (p *pgProbe) run(url string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
		}
		cancel()
		p.mu.Lock()
		p.tries = append(p.tries, pgTry{start: start, end: time.Now(), ok: err == nil})
		p.mu.Unlock()
	}
}

// down returns an interval [from, to] in which the server was certainly
// down, from the tries that started after since: from the end of the
// first quick failure (a moment later) to the start of the last failure
// before the next success. ok is false if no failure was seen.
func (p *pgProbe) down(since time.Time) (from, to time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tr := range p.tries {
		if tr.start.Before(since) {
			continue
		}
		quickFail := !tr.ok && tr.end.Sub(tr.start) < time.Second // refused at once, not a slow answer
		switch {
		case !ok && quickFail:
			from, to, ok = tr.end.Add(20*time.Millisecond), tr.start, true
		case ok && quickFail:
			to = tr.start
		case ok && tr.ok:
			return from, to, true
		}
	}
	return from, to, ok
}

// TestPostgresRestartMidRunHoldsOutputsAndLosesNothing: three node
// children host 40 persistent journal objects under closed-loop load from
// a gateway here while a mover relocates them; a third of the way in, the
// Postgres server (the tests' throwaway one) restarts — stopped at once,
// as a crash would, and started again. Then:
//   - outputs wait: no message that applied (a fresh append) is answered
//     if it was sent after the server went down and answered before it
//     came back (a probe connecting every few milliseconds bounds the
//     outage), and such messages are answered once it is back;
//   - the nodes' writes failed meanwhile and were retried
//     (Stats.StateWriteErrors);
//   - traffic resumes after the restart;
//   - nothing answered is lost: the check of
//     TestDurableStateSurvivesSIGKILLAtRandomMoments, and every object
//     serves what the store holds.
func TestPostgresRestartMidRunHoldsOutputsAndLosesNothing(t *testing.T) {
	db := pgtest.New(t)
	if db.Server == nil {
		t.Skip("BERTH_TEST_DATABASE_URL names an external Postgres server: this test restarts only the throwaway server pgtest starts")
	}
	seed := persistSeedFor(t)
	d := persistDuration()
	const objects, senders = 40, 8
	c := newPersistCluster(t, db.URL, 3)
	c.activate(objects)

	stop := make(chan struct{})
	rec := &answerLog{}
	ss, swg := runSenders(t, c.gw, "s", senders, objects, seed, 10*time.Second, rec, stop)
	moverStop := make(chan struct{})
	moved, moveFailed, mwg := c.runMovers(objects, seed, moverStop)
	start := time.Now()
	time.Sleep(d / 3)
	probe := &pgProbe{}
	probeStop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Go(func() { probe.run(db.URL, probeStop) })
	restartAt := time.Now()
	// Besides the closed-loop senders (each soon waits on one answer
	// while the server is down), one-shot senders send one message each,
	// one every 5 ms from now on until the restart is over (at least 300,
	// at most 6,000): messages sent while the server is down, however long
	// a loaded machine takes to stop it.
	const minOneShots, maxOneShots = 300, 6000
	var oneShots []*pjSender // the launcher's; read once owg is done
	restartOver := make(chan struct{})
	var owg sync.WaitGroup
	owg.Go(func() {
		for k := range maxOneShots {
			if k >= minOneShots {
				select {
				case <-restartOver:
					return
				default:
				}
			}
			time.Sleep(time.Until(restartAt.Add(time.Duration(k) * 5 * time.Millisecond)))
			s := &pjSender{name: "w" + strconv.Itoa(k), acked: make([]int, objects), sent: make([]int, objects), errKinds: map[string]int{}}
			oneShots = append(oneShots, s)
			i := k % objects
			s.sent[i] = 1
			owg.Go(func() {
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
					sentAt := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					got, err := actor.Ask[pjAppend, pjReply](ctx, c.gw, pjRef(i), pjAppend{Sender: s.name, Seq: 1})
					cancel()
					if err != nil {
						s.retries++
						s.errKinds[payload.KindOf(err).String()]++
						time.Sleep(20 * time.Millisecond)
						continue
					}
					s.acked[i], s.answered = 1, 1
					s.events = append(s.events, pjAnswered{sent: sentAt, answered: time.Now(), fresh: got.Fresh})
					return
				}
			})
		}
	})
	var stoppedAt time.Time // the server and every backend gone: nothing commits from then until it is back
	err := db.Server.RestartAfter(func() { stoppedAt = time.Now() })
	close(restartOver)
	if err != nil {
		t.Fatalf("restarting Postgres: %v", err)
	}
	restarted := time.Now()
	t.Logf("%v: Postgres restarted in %v", restartAt.Sub(start).Round(time.Millisecond), restarted.Sub(restartAt).Round(time.Millisecond))
	testutil.WaitForWithin(t, "the probe to connect again", time.Minute, func() bool {
		_, _, ok := probe.down(restartAt)
		probe.mu.Lock()
		defer probe.mu.Unlock()
		return ok && probe.tries[len(probe.tries)-1].ok
	})
	close(probeStop)
	pwg.Wait()
	// Traffic resumes: the load goes on until 20 messages sent after the
	// server came back were applied (a fact, however slow the machine),
	// and for at least the rest of the run's duration.
	if _, up, ok := probe.down(restartAt); ok {
		rec.after.Store(up.UnixNano())
		testutil.WaitForWithin(t, "20 fresh answers to messages sent after the server came back", 2*time.Minute, func() bool {
			return rec.fresh.Load() >= 20
		})
	}
	time.Sleep(time.Until(restarted.Add(max(d*2/3, 2*time.Second))))
	close(moverStop)
	mwg.Wait()
	close(stop)
	swg.Wait()
	owg.Wait()
	t.Logf("load for %v: %s; %d moves, failed by kind %s", time.Since(start).Round(time.Millisecond), sendersSummary(ss), moved.Load(), syncMapString(moveFailed))
	t.Logf("one-shot senders: %s", sendersSummary(oneShots))
	ss = append(ss, oneShots...)

	// Outputs wait.
	from, to, ok := probe.down(restartAt)
	if !ok {
		t.Fatal("the probe never found the server down during its restart")
	}
	// The probe's first refusal shows that the server stopped taking
	// connections, not that its backends are gone: on a loaded machine a
	// backend may still commit for a moment after it. From the stop's
	// end, nothing can.
	from = stoppedAt
	var early, sentDown, waited, before, afterUp int
	var firstAfter time.Time
	for _, s := range ss {
		for _, e := range s.events {
			if !e.fresh {
				continue
			}
			if e.sent.After(from) && e.sent.Before(to) {
				sentDown++
			}
			switch {
			case e.sent.After(from) && e.answered.Before(to):
				early++
				if early <= 5 {
					t.Errorf("%s: a message sent %v after the server went down was applied and answered %v before it came back",
						s.name, e.sent.Sub(from), to.Sub(e.answered))
				}
			case e.sent.Before(to) && e.answered.After(to):
				waited++
			case e.answered.Before(from):
				before++
			}
			if e.sent.After(to) {
				afterUp++
				if firstAfter.IsZero() || e.answered.Before(firstAfter) {
					firstAfter = e.answered
				}
			}
		}
	}
	t.Logf("the server was down for at least %v; fresh answers: %d before, %d in flight as it came back (outputs waited; %d of them sent while it was down), %d sent while down and answered before it came back, %d sent after it came back (first answered %v after)",
		to.Sub(from).Round(time.Millisecond), before, waited, sentDown, early, afterUp, firstAfter.Sub(to).Round(time.Millisecond))
	if to.Sub(from) > 100*time.Millisecond && (waited == 0 || sentDown == 0) {
		t.Errorf("the server was down for %v, and %d messages sent then were answered after it came back, %d in flight then: want some of each",
			to.Sub(from).Round(time.Millisecond), sentDown, waited)
	}
	if afterUp < 20 {
		t.Errorf("traffic did not resume after the restart: %d fresh answers to messages sent after it", afterUp)
	}
	var writeErrs, fenced int64
	for _, n := range c.live() {
		var st actor.Stats
		testutil.WaitForWithin(t, n.name+" to release every output", 30*time.Second, func() bool {
			st = decode[actor.Stats](t, n.must(t, "stats"))
			return st.OutputsHeld == 0
		})
		writeErrs += st.StateWriteErrors
		fenced += st.StateFenced
	}
	t.Logf("state writes failed and retried: %d; fenced: %d", writeErrs, fenced)
	if writeErrs == 0 {
		t.Errorf("no state write failed while the server restarted: the restart missed the write path")
	}

	js := readJournals(t, c.gw, objects, time.Minute)
	if !checkJournals(t, js, ss) {
		return
	}
	checkServedIsStored(t, c.store, js)
	c.endAll()
}
