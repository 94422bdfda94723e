package actor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// shortLeases gives c a 1 s lease renewed every 100 ms: jeopardy comes
// 0.55 s after the last renewal answered in time. Store calls may take a
// minute (a held renewal is no failure).
func shortLeases(c Config) Config {
	c.LeaseTTL, c.LeaseRenew = time.Second, 100*time.Millisecond
	c.StoreTimeout = time.Minute
	return c
}

// errStoreDown is what a store that is away answers.
var errStoreDown = payload.NewError(payload.Unavailable, "test", "the store is away")

// outage makes a Location Store and a membership fail every call while it
// is on (their Fault hooks): a database restarted, failed over, or cut off
// from every host.
type outage struct{ on atomic.Bool }

func (o *outage) fault(ctx context.Context, op string) error {
	if o.on.Load() {
		return errStoreDown
	}
	return nil
}

// sendLog records, per object, the sequence numbers whose Tell was
// accepted, in the order they were sent.
type sendLog struct {
	mu       sync.Mutex
	accepted map[Ref][]int
	refused  int
}

func (l *sendLog) send(t *testing.T, h *Host, ref Ref, seq int) {
	t.Helper()
	err := Tell(bg, h, ref, SeqMsg{Seq: seq})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if !errors.Is(err, payload.Unavailable) && !errors.Is(err, payload.DeadlineExceeded) {
			t.Errorf("Tell(%v, %d) = %v: want nil or a typed refusal (Unavailable, DeadlineExceeded)", ref, seq, err)
		}
		l.refused++
		return
	}
	if l.accepted == nil {
		l.accepted = map[Ref][]int{}
	}
	l.accepted[ref] = append(l.accepted[ref], seq)
}

// check waits until each object ran exactly what was accepted for it —
// every accepted message once, in each sender's order (senders number
// their sequences apart: sender*1e6 + k) — and fails the test with the
// difference if that does not come about (a message lost, run twice or
// out of order never comes right). Messages of different senders may
// still be on their way when it starts.
func (l *sendLog) check(t *testing.T, h *Host, refs []Ref) {
	t.Helper()
	var last string
	ok := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, ref := range refs {
			got, err := Ask[GetSeqs, []int](bg, h, ref, GetSeqs{})
			if err != nil {
				last = ref.String() + ": " + err.Error()
				return false
			}
			for sender := 1; sender <= 2; sender++ {
				of := func(seqs []int) []int {
					var out []int
					for _, s := range seqs {
						if s/1_000_000 == sender {
							out = append(out, s)
						}
					}
					return out
				}
				if g, w := of(got), of(l.accepted[ref]); !slices.Equal(g, w) {
					last = fmt.Sprintf("%v ran %v of sender %d, want exactly the accepted %v in order", ref, g, sender, w)
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal(last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A store outage (every Location Store and membership call fails) longer
// than the lease pauses the hosts — jeopardy: no turn starts, what arrives
// waits — and when the store is back they resume: no host closes, nothing
// accepted is lost, run twice or reordered, the in-memory state of every
// object is kept, and nothing was taken over (the store's silence kept
// every lease).
func TestAStoreOutagePausesTheHostsAndTheyResumeLosingNothing(t *testing.T) {
	n := NewNetwork(nil)
	var down outage
	n.Store().(*relocation.MemoryStore).Fault(down.fault)
	n.Membership.Fault(down.fault)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), seqKind())
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), seqKind())
	waitViews(t, a, b)
	var refs []Ref
	for i := range 16 {
		refs = append(refs, Ref{"seq", "o" + strconv.Itoa(i)})
	}
	var log sendLog
	for k := 1; k <= 10; k++ {
		for _, ref := range refs {
			log.send(t, a, ref, 1_000_000+k)
			log.send(t, b, ref, 2_000_000+k)
		}
	}
	log.check(t, a, refs) // every object active, on a or on b
	if log.refused != 0 {
		t.Fatalf("%d sends refused before the outage", log.refused)
	}

	down.on.Store(true)
	waitFor(t, "both hosts in jeopardy", func() bool { return a.Stats().Jeopardy && b.Stats().Jeopardy })
	// No turn runs: an Ask waits, and ends at its own deadline.
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	_, err := Ask[GetSeqs, []int](ctx, a, refs[0], GetSeqs{})
	cancel()
	if !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("an Ask during the outage = %v, want DeadlineExceeded (no turn runs in jeopardy)", err)
	}
	for k := 11; k <= 20; k++ {
		for _, ref := range refs {
			log.send(t, a, ref, 1_000_000+k)
			log.send(t, b, ref, 2_000_000+k)
		}
	}
	// Longer than a lease: the leases lapsed by the store's clock.
	time.Sleep(2 * a.cfg.LeaseTTL)
	down.on.Store(false)
	waitFor(t, "both hosts out of jeopardy", func() bool { return !a.Stats().Jeopardy && !b.Stats().Jeopardy })

	log.check(t, b, refs)
	t.Logf("accepted %d sends per object, refused %d during the outage", len(log.accepted[refs[0]]), log.refused)
	for _, h := range []*Host{a, b} {
		st := h.Stats()
		if h.Err() != nil || st.LeaseLapses != 0 || st.TakenOver != 0 || st.Jeopardies < 1 {
			t.Errorf("%s after the outage: Err %v, lapses %d, taken over %d, jeopardies %d; want a pause and nothing lost",
				h.Name(), h.Err(), st.LeaseLapses, st.TakenOver, st.Jeopardies)
		}
		// Its event log tells the outage: the store unreachable, the
		// pause, the resumption, the store back — in that order.
		var seen []EventKind
		for _, e := range h.Events(0) {
			switch e.Kind {
			case EventStoreUnreachable, EventJeopardy, EventResumed, EventStoreReachable:
				if e.Host == h.Name() && (len(seen) == 0 || seen[len(seen)-1] != e.Kind) {
					seen = append(seen, e.Kind)
				}
			}
		}
		want := []EventKind{EventStoreUnreachable, EventJeopardy, EventResumed, EventStoreReachable}
		if !slices.Equal(seen, want) && !slices.Equal(seen, []EventKind{EventStoreUnreachable, EventJeopardy, EventStoreReachable, EventResumed}) {
			t.Errorf("%s's events of the outage: %v, want %v:%s", h.Name(), seen, want, describeEvents(h))
		}
	}
}

// holdRenewals is a Location Store that holds the lease renewals of one
// host, once told to, until released — they reach the store only then,
// and their answers come back only then (a host whose process is paused,
// or whose link to the store stalls) — and can lose the answer of the
// next renewal it lets through (the store handled it; the host never
// heard).
type holdRenewals struct {
	*relocation.MemoryStore
	host     string
	mu       sync.Mutex
	gate     chan struct{} // closed by release; nil: renewals pass; guarded by mu
	held     atomic.Int64  // renewals that waited at the gate
	loseNext atomic.Bool
	owned    chan struct{} // closed by releaseOwned; nil: Owned passes; guarded by mu
	checks   atomic.Int64  // Owned calls that waited at that gate
	// answerFirst: a held Owned reads the rows before it waits (its
	// answer is as old as the question), not after.
	answerFirst bool
	commits     chan struct{} // closed by releaseCommits; nil: NewOwner passes; guarded by mu
	heldCommits atomic.Int64  // NewOwner calls that waited at that gate
}

// holdCommits holds the moves' commits (NewOwner) until releaseCommits.
func (s *holdRenewals) holdCommits() {
	s.mu.Lock()
	s.commits = make(chan struct{})
	s.mu.Unlock()
}

func (s *holdRenewals) releaseCommits() {
	s.mu.Lock()
	close(s.commits)
	s.commits = nil
	s.mu.Unlock()
}

func (s *holdRenewals) NewOwner(ctx context.Context, obj relocation.Object, expect relocation.Ownership, host string) (relocation.Row, error) {
	s.mu.Lock()
	gate := s.commits
	s.mu.Unlock()
	if gate != nil {
		s.heldCommits.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return relocation.Row{}, ctx.Err()
		}
	}
	return s.MemoryStore.NewOwner(ctx, obj, expect, host)
}

// holdOwned holds the ownership checks (Owned) until releaseOwned.
func (s *holdRenewals) holdOwned() {
	s.mu.Lock()
	s.owned = make(chan struct{})
	s.mu.Unlock()
}

func (s *holdRenewals) releaseOwned() {
	s.mu.Lock()
	close(s.owned)
	s.owned = nil
	s.mu.Unlock()
}

func (s *holdRenewals) Owned(ctx context.Context, host string, gen uint64, objs []relocation.Object) ([]bool, error) {
	s.mu.Lock()
	gate := s.owned
	s.mu.Unlock()
	var owned []bool
	var err error
	if s.answerFirst {
		owned, err = s.MemoryStore.Owned(ctx, host, gen, objs)
	}
	if gate != nil {
		s.checks.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.answerFirst {
		return owned, err
	}
	return s.MemoryStore.Owned(ctx, host, gen, objs)
}

func (s *holdRenewals) hold() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *holdRenewals) release() {
	s.mu.Lock()
	close(s.gate)
	s.gate = nil
	s.mu.Unlock()
}

func (s *holdRenewals) RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (relocation.Lease, error) {
	if host == s.host || s.host == "*" { // "*": every host's
		s.mu.Lock()
		gate := s.gate
		s.mu.Unlock()
		if gate != nil {
			s.held.Add(1)
			select {
			case <-gate:
			case <-ctx.Done(): // the tests give the hosts a long StoreTimeout
				return relocation.Lease{}, ctx.Err()
			}
		}
	}
	l, err := s.MemoryStore.RenewLease(context.Background(), host, gen, ttl)
	if host == s.host && err == nil && s.loseNext.CompareAndSwap(true, false) {
		return relocation.Lease{}, payload.NewError(payload.Unavailable, "test", "the answer was lost")
	}
	return l, err
}

// lapseAndTakeOver holds a's renewals until a is in jeopardy and its lease
// lapsed in the store, lets b take taken over (a fresh activation on b),
// and returns with a's renewals still held.
func lapseAndTakeOver(t *testing.T, store *holdRenewals, a, b *Host, taken Ref) {
	t.Helper()
	store.hold()
	waitFor(t, "a in jeopardy, its renewal held", func() bool { return a.Stats().Jeopardy && store.held.Load() > 0 })
	store.Expire("a") // its lease lapsed in the store too
	b.routes.forget(relocation.Object{Kind: taken.Kind, ID: taken.ID}, true)
	if got, err := Ask[Get, int](bg, b, taken, Get{}); err != nil || got != 0 {
		t.Fatalf("count of %v at b after the takeover: %d, %v; want a fresh activation (0)", taken, got, err)
	}
	if row, err := store.Get(bg, relocation.Object{Kind: taken.Kind, ID: taken.ID}); err != nil || row.Host != "b" {
		t.Fatalf("row of %v after the takeover: %+v, %v; want b's", taken, row, err)
	}
}

// A host whose lease lapsed in the store while it was in jeopardy, and
// one of whose objects another host took over meanwhile, checks its
// objects when its renewal answers again: the one taken over is dropped
// here (no turn of it runs here again, and what waited here for it runs at
// its new owner), the others run on with their state. The host does not
// close.
func TestALapsedHostDropsWhatAnotherTookOverAndKeepsTheRest(t *testing.T) {
	store := &holdRenewals{MemoryStore: relocation.NewMemoryStore(nil), host: "a"}
	n := NewNetwork(store)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	waitViews(t, a, b)
	taken, kept := objectOn(t, a, store), Ref{}
	for i := range 64 {
		ref := Ref{"counter", "k" + strconv.Itoa(i)}
		if _, err := Ask[Get, int](bg, a, ref, Get{}); err != nil {
			t.Fatal(err)
		}
		if row, _ := store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); row.Host == "a" && ref != taken {
			kept = ref
			break
		}
	}
	if err := Tell(bg, a, kept, Inc{By: 5}); err != nil {
		t.Fatal(err)
	}
	if got, err := Ask[Get, int](bg, a, kept, Get{}); err != nil || got != 5 {
		t.Fatalf("count of %v at a: %d, %v", kept, got, err)
	}
	lapseAndTakeOver(t, store, a, b, taken)
	// Sent to a while it is paused: held there, for either object.
	if err := Tell(bg, a, taken, Inc{By: 7}); err != nil {
		t.Fatal(err)
	}
	if err := Tell(bg, a, kept, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	// The renewal answers (the lease had lapsed); the check it calls for
	// is held: no object of a runs before its check, even with the lease
	// live again.
	store.holdOwned()
	store.release()
	waitFor(t, "a out of jeopardy, its check held", func() bool { return !a.Stats().Jeopardy && store.checks.Load() > 0 })
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	_, err := Ask[Get, int](ctx, a, kept, Get{})
	cancel()
	if !errors.Is(err, payload.DeadlineExceeded) {
		t.Fatalf("an Ask of a's object before its ownership check = %v, want DeadlineExceeded (it waits for the check)", err)
	}
	store.releaseOwned()
	if got, err := Ask[Get, int](bg, a, kept, Get{}); err != nil || got != 6 {
		t.Fatalf("count of the kept object at a: %d, %v; want 6 (its state and the held message)", got, err)
	}
	waitFor(t, "the message held for the taken object to run at b", func() bool {
		got, err := Ask[Get, int](bg, b, taken, Get{})
		return err == nil && got == 7
	})
	if o := a.owners.kinds["counter"].local(taken.ID); o != nil {
		t.Fatalf("a still has an owner of %v, which b took over", taken)
	}
	if got, err := Ask[Get, int](bg, a, taken, Get{}); err != nil || got != 7 {
		t.Fatalf("count of %v asked at a: %d, %v; want b's 7", taken, got, err)
	}
	st := a.Stats()
	if a.Err() != nil || st.LeaseLapses != 1 || st.OwnershipChecks != 1 || st.TakenOver != 1 {
		t.Fatalf("a: Err %v, lapses %d, taken over %d; want it running, one lapse, one object taken over", a.Err(), st.LeaseLapses, st.TakenOver)
	}
}

// A renewal the store handled but whose answer was lost may have been the
// one that found the lease lapsed: the next answer (which finds the lease
// live, renewed by the lost one) is checked as if it said so. Without that,
// the host would run the object another host took over.
func TestARenewalWhoseAnswerWasLostIsCheckedAsALapse(t *testing.T) {
	store := &holdRenewals{MemoryStore: relocation.NewMemoryStore(nil), host: "a"}
	n := NewNetwork(store)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	waitViews(t, a, b)
	taken := objectOn(t, a, store)
	lapseAndTakeOver(t, store, a, b, taken)
	store.loseNext.Store(true) // the held renewal: it finds the lease lapsed; a never hears
	store.release()
	waitFor(t, "a out of jeopardy", func() bool { return !a.Stats().Jeopardy })
	if store.loseNext.Load() {
		t.Fatal("no renewal's answer was lost")
	}
	if err := Tell(bg, a, taken, Inc{By: 3}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message sent at a to run at b", func() bool {
		got, err := Ask[Get, int](bg, b, taken, Get{})
		return err == nil && got == 3
	})
	if o := a.owners.kinds["counter"].local(taken.ID); o != nil {
		t.Fatalf("a still runs %v, which b took over", taken)
	}
	if st := a.Stats(); st.LeaseLapses != 0 || st.OwnershipChecks != 1 || st.TakenOver != 1 {
		t.Fatalf("a: lapses %d, checks %d, taken over %d; want 0 (a never heard of it), 1 and 1", st.LeaseLapses, st.OwnershipChecks, st.TakenOver)
	}
}

// An ownership check asks the store about the objects a host holds; a
// move to the host that commits while the question is out opens with a
// row the answer (another host's) no longer describes. The moved object
// is not taken over: it keeps its state and runs at the host.
func TestAMoveCommittedWhileAnOwnershipCheckIsOutIsNotTakenOver(t *testing.T) {
	store := &holdRenewals{MemoryStore: relocation.NewMemoryStore(nil), host: "b", answerFirst: true}
	n := NewNetwork(store)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	waitViews(t, a, b)
	x := objectOn(t, a, store)
	if err := Tell(bg, a, x, Inc{By: 5}); err != nil {
		t.Fatal(err)
	}
	count, err := Ask[Get, int](bg, a, x, Get{})
	if err != nil || count < 5 {
		t.Fatalf("count of %v at a: %d, %v", x, count, err)
	}
	store.holdCommits()
	moved := make(chan error, 1)
	go func() { moved <- a.Relocate(bg, x, "b") }()
	waitFor(t, "b's commit of the move held", func() bool { return store.heldCommits.Load() > 0 })
	// b's next renewal is handled but its answer lost: the one after it
	// calls for a check of every owner at b, the move's target too.
	store.holdOwned()
	store.loseNext.Store(true)
	waitFor(t, "b's ownership check answered (the row names a) and held", func() bool { return store.checks.Load() > 0 })
	store.releaseCommits()
	if err := <-moved; err != nil {
		t.Fatalf("Relocate(%v, b) = %v", x, err)
	}
	store.releaseOwned()
	if got, err := Ask[Get, int](bg, b, x, Get{}); err != nil || got != count {
		t.Fatalf("count of %v at b after the move: %d, %v; want %d (its state moved with it)", x, got, err, count)
	}
	if st := b.Stats(); st.TakenOver != 0 || st.OwnershipChecks != 1 || b.Err() != nil {
		t.Fatalf("b: taken over %d, checks %d, Err %v; want 0, 1, nil", st.TakenOver, st.OwnershipChecks, b.Err())
	}
}

// A host whose run the membership ended while it owned objects (it
// expired the run: peers saw the host fail) does not close — a stall is
// no death: it drops the old run's objects, with their in-memory state,
// as a crash would have lost them, and joins again as a new run. The
// objects answer again, activated anew; Err stays nil.
func TestAHostWhoseRunTheMembershipEndedDropsItsObjectsAndJoinsAgain(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	waitViews(t, a, b)
	x := objectOn(t, a, n.Net.Store)
	if err := Tell(bg, a, x, Inc{By: 5}); err != nil {
		t.Fatal(err)
	}
	oldRun := a.lease.run()
	n.Membership.Expire("a")
	waitFor(t, "a to join again as a new run with no object of its old run", func() bool {
		return a.Stats().Rejoins == 1 && a.Ready() == nil && a.Stats().OwnersActive == 0 || a.Err() != nil
	})
	if err := a.Err(); err != nil {
		t.Fatalf("a closed: %v", err)
	}
	if st := a.Stats(); st.TakenOver != 1 || a.lease.run() <= oldRun {
		t.Fatalf("a: dropped %d objects, run %d (old %d); want 1, a newer run", st.TakenOver, a.lease.run(), oldRun)
	}
	if ev := eventsOf(a, EventRejoined, "a"); len(ev) != 1 || ev[0].Count != 1 || ev[0].Run != a.lease.run() {
		t.Fatalf("a's rejoined events: %+v, want one, of its new run, counting the object it owned", ev)
	}
	// x answers again, activated anew: its in-memory state ended with the
	// old run.
	var got int
	waitFor(t, "x to answer again", func() bool {
		v, err := Ask[Get, int](bg, b, x, Get{})
		got = v
		return err == nil
	})
	if got != 0 {
		t.Fatalf("x = %d after a's old run ended, want 0 (activated anew)", got)
	}
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("a.Err() = %v, b.Err() = %v", a.Err(), b.Err())
	}
}

// A node that owns no object when the membership ends its run — one
// starved past its lease while it started, or drained — has nothing to
// fence: it joins again as a new run, as a gateway does, instead of
// closing, and objects activate on it under the new run.
func TestAHostThatOwnsNoObjectWhoseRunTheMembershipEndedJoinsAgainAsANewRun(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	waitViews(t, a, b)
	oldRun := a.lease.run()
	n.Membership.Expire("a")
	waitFor(t, "a to join again as a new run", func() bool { return a.Stats().Rejoins == 1 && a.Ready() == nil || a.Err() != nil })
	if err := a.Err(); err != nil {
		t.Fatalf("a closed: %v", err)
	}
	if run := a.lease.run(); run <= oldRun {
		t.Fatalf("a's new run %d is not above its old run %d", run, oldRun)
	}
	waitViews(t, a, b)
	x := objectOn(t, a, n.Net.Store)
	row, err := n.Net.Store.Get(bg, relocation.Object{Kind: x.Kind, ID: x.ID})
	if err != nil || row.LeaseGen != a.lease.run() {
		t.Fatalf("the row of %v on a: %+v, %v; want it to name a's new run %d", x, row, err, a.lease.run())
	}
	if got, err := Ask[Get, int](bg, b, x, Get{}); err != nil || got != 1 {
		t.Fatalf("%v asked from b = %d, %v; want 1", x, got, err)
	}
}

// heldReserve is a Location Store whose Reserve for one host lands and
// then, while armed, waits for release before it answers.
type heldReserve struct {
	*relocation.MemoryStore
	host    string
	armed   atomic.Bool
	landed  chan struct{} // closed when an armed Reserve has landed
	release chan struct{}
}

func (s *heldReserve) Reserve(ctx context.Context, obj relocation.Object, host string) (relocation.Row, error) {
	row, err := s.MemoryStore.Reserve(ctx, obj, host)
	if host == s.host && s.armed.CompareAndSwap(true, false) {
		close(s.landed)
		<-s.release
	}
	return row, err
}

// An activation that races the host becoming a new run — its Reserve
// landed under the old run before the count of the host's objects, its
// owner installed after — never runs a turn under the old run, whose row
// any host may take over once the new run holds the lease: the owner is
// checked under the new run and dropped, and its message runs under a
// row that names the new run.
func TestAnActivationThatRacesANewRunNeverRunsUnderTheOldRun(t *testing.T) {
	store := &heldReserve{MemoryStore: relocation.NewMemoryStore(nil), host: "a", landed: make(chan struct{}), release: make(chan struct{})}
	n := NewNetwork(store)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	oldRun := a.lease.run()
	x := Ref{"counter", "racer"}
	store.armed.Store(true)
	told := make(chan error, 1)
	go func() { told <- Tell(bg, a, x, Inc{By: 1}) }()
	<-store.landed
	n.Membership.Expire("a")
	waitFor(t, "a to join again as a new run", func() bool { return a.Stats().Rejoins == 1 && a.Ready() == nil || a.Err() != nil })
	close(store.release)
	if err := <-told; err != nil {
		t.Fatalf("Tell(%v) = %v", x, err)
	}
	if got, err := Ask[Get, int](bg, a, x, Get{}); err != nil || got != 1 {
		t.Fatalf("%v = %d, %v; want 1 (its message ran once)", x, got, err)
	}
	row, err := store.Get(bg, relocation.Object{Kind: x.Kind, ID: x.ID})
	if err != nil || row.LeaseGen != a.lease.run() || row.LeaseGen == oldRun {
		t.Fatalf("the row of %v: %+v, %v; want it to name a's new run %d, not the old run %d", x, row, err, a.lease.run(), oldRun)
	}
	if st := a.Stats(); st.TakenOver != 1 || a.Err() != nil {
		t.Fatalf("a: taken over %d, Err %v; want 1 (the owner installed under the old run dropped), nil", st.TakenOver, a.Err())
	}
}

// countedRenewals is a membership that counts the renewals of one name it
// answered without an error.
type countedRenewals struct {
	membership.Membership
	name    string
	renewed atomic.Int64
}

func (m *countedRenewals) Renew(ctx context.Context, name string, gen uint64) (membership.Lease, error) {
	l, err := m.Membership.Renew(ctx, name, gen)
	if name == m.name && err == nil {
		m.renewed.Add(1)
	}
	return l, err
}

// A host whose Location Store renewals hang (a slow database) or fail (a
// pool's dead connections after an outage) goes into jeopardy, and keeps
// renewing its membership lease all the while: the membership never ends
// its run for a store that is slow or away, and when the store answers
// the host resumes. Without a renewer of its own, the membership's
// renewal waited behind a held store call, or was skipped after a failed
// one, and the membership expired the host.
func TestAStoreRenewalThatHangsOrFailsDoesNotHoldUpTheMembershipsRenewal(t *testing.T) {
	for _, hang := range []bool{true, false} {
		t.Run(map[bool]string{true: "hangs", false: "fails"}[hang], func(t *testing.T) {
			store := &holdRenewals{MemoryStore: relocation.NewMemoryStore(nil), host: "a"}
			n := NewNetwork(store)
			cfg := shortLeases(n.With(Config{Name: "a", Logger: quietLogger()}))
			members := &countedRenewals{Membership: cfg.Membership, name: "a"}
			cfg.Membership = members
			a := startHost(t, cfg, seqKind())
			b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), seqKind())
			waitViews(t, a, b)
			if hang {
				store.hold()
				waitFor(t, "a store renewal of a's held", func() bool { return store.held.Load() > 0 })
			} else {
				store.Fault(func(_ context.Context, op string) error {
					if op == "RenewLease" {
						return errStoreDown
					}
					return nil
				})
			}
			waitFor(t, "a in jeopardy", func() bool { return a.Stats().Jeopardy })
			// Renewals answered while the store does not, for longer than
			// the membership's lease: each answered without an error (a
			// lease the membership had expired would have been refused).
			from := members.renewed.Load()
			need := int64(membership.DefaultTTL/cfg.LeaseRenew) + 5
			waitFor(t, fmt.Sprintf("%d membership renewals of a while its store renewals do not answer", need), func() bool {
				return members.renewed.Load()-from >= need || a.Err() != nil
			})
			if a.Err() != nil {
				t.Fatalf("a closed while its store renewals did not answer: %v", a.Err())
			}
			if hang {
				// One renewal is sent beside the held ones each time
				// the newest has been out for the spacing, up to the
				// bound, and no more.
				waitFor(t, "the store renewals in flight at their bound", func() bool {
					return store.held.Load() >= renewalsInFlight
				})
				from := members.renewed.Load()
				waitFor(t, "more membership renewals", func() bool { return members.renewed.Load()-from >= need })
				if held := store.held.Load(); held != renewalsInFlight {
					t.Fatalf("%d store renewals of a were held, want %d: the bound on renewals in flight", held, renewalsInFlight)
				}
			}
			if hang {
				store.release()
			} else {
				store.Fault(nil)
			}
			waitFor(t, "a out of jeopardy", func() bool { return !a.Stats().Jeopardy || a.Err() != nil })
			if a.Err() != nil {
				t.Fatalf("a closed after its store answered: %v", a.Err())
			}
			if got := b.Peers(); !slices.Contains(got, "a") {
				t.Fatalf("b's peers %v: a is missing", got)
			}
		})
	}
}

// slowWatch is a membership whose Watch, once set, answers only after
// delay: a slow database at start-up.
type slowWatch struct {
	*countedRenewals
	delay time.Duration
}

func (m *slowWatch) Watch(ctx context.Context) (<-chan membership.Event, error) {
	time.Sleep(m.delay)
	return m.countedRenewals.Watch(ctx)
}

// A Start drawn out by a slow database — its first store renewal and its
// membership watch each answering after most of the membership's lease —
// keeps the Join's lease alive: the membership lease is renewed between
// those steps, so the host does not find its run ended at its first
// renewal. Before, the first membership renewal came only once Start had
// finished, and the membership had expired the run meanwhile.
func TestASlowStartKeepsTheMembershipLeaseItJoinedWith(t *testing.T) {
	store := &holdRenewals{MemoryStore: relocation.NewMemoryStore(nil), host: "a"}
	n := NewNetwork(store)
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), seqKind())
	cfg := shortLeases(n.With(Config{Name: "a", Logger: quietLogger()}))
	step := membership.DefaultTTL * 7 / 10 // each slow step: most of the membership's lease
	members := &slowWatch{countedRenewals: &countedRenewals{Membership: cfg.Membership, name: "a"}, delay: step}
	cfg.Membership = members
	store.hold()
	go func() {
		time.Sleep(step) // the store's first answer, late
		store.release()
	}()
	a := startHost(t, cfg, seqKind())
	from := members.renewed.Load()
	waitFor(t, "a's membership renewer to renew the lease a few times", func() bool {
		return members.renewed.Load()-from >= 5 || a.Err() != nil
	})
	if a.Err() != nil {
		t.Fatalf("a closed after a slow Start: %v", a.Err())
	}
	waitViews(t, a, b)
}

// lateRenewals is a Location Store whose lease renewals, once slowed, land
// in the store at once and are answered after delay.
type lateRenewals struct {
	*relocation.MemoryStore
	delay atomic.Int64
}

func (s *lateRenewals) RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (relocation.Lease, error) {
	l, err := s.MemoryStore.RenewLease(context.Background(), host, gen, ttl)
	time.Sleep(time.Duration(s.delay.Load()))
	return l, err
}

// Renewals answered after the lease they extend ran out (a slow store, a
// slow network) leave the host in jeopardy — it cannot tell that nobody
// took its objects over — until one is answered in time; then it resumes
// with everything: the store never saw the lease lapse.
func TestRenewalsAnsweredLatePauseTheHostAndItResumesLosingNothing(t *testing.T) {
	store := &lateRenewals{MemoryStore: relocation.NewMemoryStore(nil)}
	h := startHost(t, shortLeases(Config{Name: "a", Store: store, Logger: quietLogger()}), seqKind())
	ref := Ref{"seq", "x"}
	var log sendLog
	log.send(t, h, ref, 1_000_001)
	log.check(t, h, []Ref{ref})
	store.delay.Store(int64(h.cfg.LeaseTTL)) // every answer comes after its own lease's end
	waitFor(t, "the host in jeopardy", func() bool { return h.Stats().Jeopardy })
	for k := 2; k <= 50; k++ {
		log.send(t, h, ref, 1_000_000+k)
	}
	store.delay.Store(0)
	waitFor(t, "the host out of jeopardy", func() bool { return !h.Stats().Jeopardy })
	log.check(t, h, []Ref{ref})
	if st := h.Stats(); h.Err() != nil || st.LeaseLapses != 0 || log.refused != 0 {
		t.Fatalf("Err %v, lapses %d, refused %d; want a pause, nothing lost", h.Err(), st.LeaseLapses, log.refused)
	}
}

// A host on its private in-memory store (no transport, no Store) holds a
// lease no other host can take: it never renews it, never goes into
// jeopardy, and so never pauses for a starved renewal.
func TestALoneHostOnItsPrivateStoreHasNoLeaseToLose(t *testing.T) {
	h := startHost(t, Config{Logger: quietLogger()}, counterKind(newGates()))
	if !h.lease.private {
		t.Fatal("a host without a Store does not know its store is private")
	}
	if dl := time.Unix(0, h.gate.deadline.Load()); dl.Before(time.Now().Add(50 * 365 * 24 * time.Hour)) {
		t.Fatalf("its lease ends %v: a renewal could be missed", dl)
	}
	if _, err := Ask[Get, int](bg, h, Ref{"counter", "x"}, Get{}); err != nil {
		t.Fatal(err)
	}
}

// After a crash, a sender whose messages to an object all went to the
// crashed host starts a new stream for it (route.Streams.NextTo): its
// first message at the object's new owner is sequence 1 of a new epoch,
// with no gap before it, and runs at once — no wait per object per sender
// for messages that died with the crashed host. (The takeover's gap wait
// is a minute here: a message that waited for it would not be answered
// in time, and a gap closed by it would be counted.)
func TestASendersFirstMessageToATakenOverObjectRunsAtOnce(t *testing.T) {
	n := NewNetwork(nil)
	cfg := func(name string) Config {
		return n.With(Config{Name: name, Logger: quietLogger(), GapTimeout: 2 * time.Minute, TakeoverGapTimeout: 2 * time.Minute})
	}
	a := startHost(t, cfg("a"), seqKind())
	b := startHost(t, cfg("b"), seqKind())
	c := startHost(t, cfg("c"), seqKind())
	waitViews(t, a, b, c)
	var ref Ref
	for i := range 64 {
		r := Ref{"seq", "x" + strconv.Itoa(i)}
		if _, err := Ask[GetSeqs, []int](bg, a, r, GetSeqs{}); err != nil {
			t.Fatal(err)
		}
		if row, _ := n.Store().Get(bg, relocation.Object{Kind: r.Kind, ID: r.ID}); row.Host == "a" {
			ref = r
			break
		}
	}
	if ref == (Ref{}) {
		t.Fatal("no object activated on a")
	}
	var want []int
	for k := 1; k <= 10; k++ {
		if err := Tell(bg, c, ref, SeqMsg{Seq: k}); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	if got, err := Ask[GetSeqs, []int](bg, c, ref, GetSeqs{}); err != nil || !slices.Equal(got, want) {
		t.Fatalf("at a: %v, %v; want %v", got, err, want)
	}
	n.Kill(a)
	waitFor(t, "b and c to drop a", func() bool {
		_, onB := b.peers.view.member("a")
		_, onC := c.peers.view.member("a")
		return !onB && !onC
	})
	want = nil
	for k := 11; k <= 20; k++ {
		if err := Tell(bg, c, ref, SeqMsg{Seq: k}); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	got, err := Ask[GetSeqs, []int](ctx, c, ref, GetSeqs{})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("after the takeover: %v, %v; want %v at once (the state died with a)", got, err, want)
	}
	for _, h := range []*Host{b, c} {
		if st := h.Stats(); st.GapsClosed != 0 || st.Late != 0 {
			t.Errorf("%s closed %d gaps and ran %d late: the new stream left no gap to wait for", h.Name(), st.GapsClosed, st.Late)
		}
	}
}

// A host in jeopardy whose job permits are all held by messages of its
// paused objects refuses a send from outside the handlers after
// SendTimeout with ErrPaused (Unavailable; nothing sent), counted under
// RejectPaused, instead of holding the sender for as long as the store is
// away; once the store answers, the held messages run and sends pass.
func TestASendOnAPausedHostWithNoPermitLeftFailsWithErrPaused(t *testing.T) {
	n := NewNetwork(nil)
	var down outage
	n.Store().(*relocation.MemoryStore).Fault(down.fault)
	n.Membership.Fault(down.fault)
	rej := &rejections{}
	cfg := shortLeases(n.With(Config{Name: "a", Logger: quietLogger(), MaxQueuedApplicationJobs: 8, Observer: rej}))
	cfg.SendTimeout = 50 * time.Millisecond
	a := startHost(t, cfg, seqKind())
	ref := Ref{"seq", "o"}
	var log sendLog
	log.send(t, a, ref, 1_000_001)
	log.check(t, a, []Ref{ref})
	down.on.Store(true)
	waitFor(t, "a in jeopardy", func() bool { return a.Stats().Jeopardy })
	for k := 2; k <= 9; k++ { // every permit: held, their turns waiting
		log.send(t, a, ref, 1_000_000+k)
	}
	if log.refused != 0 {
		t.Fatalf("%d of the sends within the permits refused", log.refused)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second) // far past SendTimeout: a wait for the store fails the test
	err := Tell(ctx, a, ref, SeqMsg{Seq: 1_000_010})
	cancel()
	if !errors.Is(err, ErrPaused) || !errors.Is(err, payload.Unavailable) {
		t.Fatalf("a Tell on a paused host with no permit left = %v, want ErrPaused (Unavailable)", err)
	}
	if got := rej.snapshot()[RejectPaused]; got != 1 {
		t.Fatalf("rejections %q = %d, want 1", RejectPaused, got)
	}
	down.on.Store(false)
	waitFor(t, "a out of jeopardy", func() bool { return !a.Stats().Jeopardy })
	log.send(t, a, ref, 1_000_011)
	log.check(t, a, []Ref{ref})
}

// A send that began waiting for a permit while the host was live, and is
// still waiting when the host goes into jeopardy, is bounded as one that
// began then: ErrPaused after SendTimeout, not a wait until its own
// deadline for a store that may be away for a minute.
func TestASendWaitingForAPermitWhenTheHostIsPausedFailsWithErrPaused(t *testing.T) {
	n := NewNetwork(nil)
	var down outage
	n.Store().(*relocation.MemoryStore).Fault(down.fault)
	n.Membership.Fault(down.fault)
	g := newGates()
	cfg := shortLeases(n.With(Config{Name: "a", Logger: quietLogger(), MaxQueuedApplicationJobs: 8}))
	cfg.SendTimeout = 50 * time.Millisecond
	a := startHost(t, cfg, counterKind(g))
	ref := Ref{"counter", "o"}
	defer g.release("k")
	if err := Tell(bg, a, ref, Block{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "k")
	for range 8 { // every permit held by a message queued behind the running turn
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second) // far past SendTimeout: a wait for its deadline fails the test
		defer cancel()
		done <- Tell(ctx, a, ref, Inc{By: 1})
	}()
	waitFor(t, "the next send to wait for a permit", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the next send returned %v without waiting", err)
		default:
		}
		return a.Stats().PermitWaiters == 1
	})
	if a.Stats().Jeopardy {
		t.Fatal("a in jeopardy before the store went away")
	}
	down.on.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, ErrPaused) || !errors.Is(err, payload.Unavailable) {
			t.Fatalf("the waiting Tell = %v, want ErrPaused (Unavailable)", err)
		}
		if !a.Stats().Jeopardy {
			t.Fatal("the waiting Tell failed with ErrPaused before a went into jeopardy")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the send that waited for a permit kept waiting after the host went into jeopardy")
	}
	down.on.Store(false)
	waitFor(t, "a out of jeopardy", func() bool { return !a.Stats().Jeopardy })
}

// After a silence of the store — no renewal reached it for longer than
// the leases, while look-ups still did — every lease has run out by the
// store's clock alone until a renewal ends the silence. A sender that
// looks an object up then must judge its owner as Reserve would: live
// (the silence keeps it). It sends the message there; the owner, in
// jeopardy, holds it and runs it once its renewal is answered. (Judged by
// the clock alone, the owner looked dead: the message was placed on a
// host whose own lease the store did not count either, and was lost, its
// sender's later messages held for ever behind the gap.)
func TestAfterASilenceOfTheStoreASenderFindsTheOwnerLive(t *testing.T) {
	store := &holdRenewals{MemoryStore: relocation.NewMemoryStore(nil), host: "*"}
	n := NewNetwork(store)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	g := startHost(t, shortLeases(n.With(Config{Name: "g", Logger: quietLogger(), Gateway: true})), movableKind(newGates()))
	waitViews(t, a, b, g)
	// An object on a that g would place on b (a host whose own lease the
	// store does not count during the silence either).
	var x Ref
	for i := range 256 {
		ref := Ref{"counter", "p" + strconv.Itoa(i)}
		if g.router.placeNew(g.owners.kinds["counter"].spec, ref.ID) != "b" {
			continue
		}
		if _, err := Ask[Get, int](bg, a, ref, Get{}); err != nil {
			t.Fatal(err)
		}
		if row, err := store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err == nil && row.Host == "a" {
			x = ref
			break
		}
	}
	if x == (Ref{}) {
		t.Fatal("no object on a that g places on b")
	}
	before, err := Ask[Get, int](bg, g, x, Get{})
	if err != nil {
		t.Fatal(err)
	}
	store.hold() // no renewal reaches the store from now on
	waitFor(t, "every lease run out by the store's clock", func() bool {
		for _, h := range []string{"a", "b", "g"} {
			l, ok, err := store.MemoryStore.Lease(bg, h)
			if err != nil || !ok || time.Now().Before(l.Deadline) {
				return false
			}
		}
		return true
	})
	g.routes.forget(relocation.Object{Kind: x.Kind, ID: x.ID}, true) // g looks x up afresh
	if err := Tell(bg, g, x, Inc{By: 7}); err != nil {
		t.Fatalf("Tell during the silence = %v", err)
	}
	store.release()
	waitFor(t, "the Tell sent during the silence to run at x's owner", func() bool {
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		got, err := Ask[Get, int](ctx, g, x, Get{})
		return err == nil && got == before+7
	})
	if row, err := store.Get(bg, relocation.Object{Kind: x.Kind, ID: x.ID}); err != nil || row.Host != "a" || row.OwnerGen != 1 {
		t.Fatalf("x's row after the silence = %+v, %v; want a's, never taken over", row, err)
	}
	for _, h := range []*Host{a, b, g} {
		if st := h.Stats(); st.Dropped != 0 || h.Err() != nil {
			t.Errorf("%s: dropped %d, Err %v; want nothing dropped, the host running", h.Name(), st.Dropped, h.Err())
		}
	}
}

// failingLookups is a host's view of the Location Store whose Get fails
// (Unavailable) while on: the store is out of that host's reach for
// look-ups.
type failingLookups struct {
	relocation.Store
	on atomic.Bool
}

func (s *failingLookups) Get(ctx context.Context, obj relocation.Object) (relocation.Row, error) {
	if s.on.Load() {
		return relocation.Row{}, errStoreDown
	}
	return s.Store.Get(ctx, obj)
}

// A message that reaches a host which cannot place its object for now
// (its look-up failed: the store out of its reach, or its own lease not
// yet renewed) goes back to its origin, which routes it again — it is not
// dropped there, lost although its Tell was accepted.
func TestAMessageAHostCannotPlaceForNowGoesBackToItsOrigin(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), movableKind(newGates()))
	bcfg := n.With(Config{Name: "b", Logger: quietLogger()})
	away := &failingLookups{Store: bcfg.Store}
	bcfg.Store = away
	b := startHost(t, bcfg, movableKind(newGates()))
	c := startHost(t, n.With(Config{Name: "c", Logger: quietLogger()}), movableKind(newGates()))
	waitViews(t, a, b, c)
	x := objectOn(t, a, n.Net.Store)
	before, err := Ask[Get, int](bg, c, x, Get{})
	if err != nil {
		t.Fatal(err)
	}
	obj := relocation.Object{Kind: x.Kind, ID: x.ID}
	away.on.Store(true)
	c.routes.forget(obj, true)
	c.routes.learn(obj, "b", 0, false) // stale: x never ran on b
	if err := Tell(bg, c, x, Inc{By: 5}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Tell to run at a", func() bool {
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		got, err := Ask[Get, int](ctx, a, x, Get{})
		return err == nil && got == before+5
	})
	if st := b.Stats(); st.Dropped != 0 {
		t.Fatalf("b dropped %d messages it could not place for now; want them sent back", st.Dropped)
	}
	away.on.Store(false)
}

// awayFrom starts hosts a, b and c on one network, b and c with look-ups
// that fail while their failingLookups is on, and returns them with an
// object x that runs on a, whose route c caches as b's (stale: x never
// ran there) while the look-ups fail.
func awayFrom(t *testing.T) (a, c *Host, x Ref, away func(bool)) {
	t.Helper()
	n := NewNetwork(nil)
	a = startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), movableKind(newGates()))
	bcfg := n.With(Config{Name: "b", Logger: quietLogger()})
	bAway := &failingLookups{Store: bcfg.Store}
	bcfg.Store = bAway
	b := startHost(t, bcfg, movableKind(newGates()))
	ccfg := n.With(Config{Name: "c", Logger: quietLogger()})
	cAway := &failingLookups{Store: ccfg.Store}
	ccfg.Store = cAway
	c = startHost(t, ccfg, movableKind(newGates()))
	waitViews(t, a, b, c)
	x = objectOn(t, a, n.Net.Store)
	if _, err := Ask[Get, int](bg, c, x, Get{}); err != nil {
		t.Fatal(err)
	}
	away = func(on bool) {
		bAway.on.Store(on)
		cAway.on.Store(on)
		if on {
			obj := relocation.Object{Kind: x.Kind, ID: x.ID}
			c.routes.forget(obj, true)
			c.routes.learn(obj, "b", 0, false)
		}
	}
	return a, c, x, away
}

// A message whose origin cannot place its object either (the store out of
// reach of both the host it reached and its origin) waits at its origin
// until the store answers, and then runs — it is not dropped, lost
// although its Tell was accepted.
func TestAMessageItsOriginCannotPlaceForNowWaitsForTheStore(t *testing.T) {
	a, c, x, away := awayFrom(t)
	before, err := Ask[Get, int](bg, a, x, Get{})
	if err != nil {
		t.Fatal(err)
	}
	away(true)
	if err := Tell(bg, c, x, Inc{By: 5}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Tell to wait at its origin c", func() bool { return c.Stats().WaitingToRoute == 1 })
	if got, err := Ask[Get, int](bg, a, x, Get{}); err != nil || got != before {
		t.Fatalf("x = %d, %v while the store is away; want %d (the Tell waits)", got, err, before)
	}
	away(false)
	waitFor(t, "the Tell to run at a once the store answers", func() bool {
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		got, err := Ask[Get, int](ctx, a, x, Get{})
		return err == nil && got == before+5
	})
	if st := c.Stats(); st.Dropped != 0 || st.WaitingToRoute != 0 {
		t.Fatalf("c: Dropped %d, WaitingToRoute %d; want 0 and 0", st.Dropped, st.WaitingToRoute)
	}
}

// A skip notice that cannot be placed for now (its host's look-up fails)
// waits and is routed again until it reaches its object: it is the only
// fact that closes its gap while every host is up, so without it the
// sender's later messages would be held for good.
func TestASkipNoticeThatCannotBePlacedForNowWaitsUntilItCan(t *testing.T) {
	a, c, x, away := awayFrom(t)
	before, err := Ask[Get, int](bg, a, x, Get{})
	if err != nil {
		t.Fatal(err)
	}
	away(true)
	// The Ask waits at c until its deadline passes: it ends there,
	// stamped and never delivered, and its skip notice cannot be placed.
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	_, err = Ask[Get, int](ctx, c, x, Get{})
	cancel()
	if err == nil {
		t.Fatal("the Ask succeeded while the store was away")
	}
	waitFor(t, "the expired Ask to end at c with a skip notice waiting", func() bool {
		st := c.Stats()
		return st.Dropped == 1 && st.WaitingToRoute == 1
	})
	away(false)
	if err := Tell(bg, c, x, Inc{By: 7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later Tell to run at a (the skip notice closed the gap)", func() bool {
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		got, err := Ask[Get, int](ctx, a, x, Get{})
		return err == nil && got == before+7
	})
	if st := c.Stats(); st.SkipsLost != 0 || st.WaitingToRoute != 0 {
		t.Fatalf("c: SkipsLost %d, WaitingToRoute %d; want 0 and 0", st.SkipsLost, st.WaitingToRoute)
	}
}

// A gateway owns no objects, so there is nothing to fence: when the
// membership ends its run (it was paused past its lease, and its peers
// saw it fail), it does not close itself — it joins again as a new run,
// under a higher generation, and serves on. A request it had handed to
// another host ends with ErrRejoined (it may have run; its reply would go
// to the old run); later sends are answered.
func TestAGatewayWhoseRunTheMembershipEndedJoinsAgainAsANewRun(t *testing.T) {
	n := NewNetwork(nil)
	gs := newGates()
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(gs))
	g := startHost(t, shortLeases(n.With(Config{Name: "g", Logger: quietLogger(), Gateway: true})), movableKind(newGates()))
	waitViews(t, a, g)
	x := objectOn(t, a, n.Net.Store)
	before, err := Ask[Get, int](bg, g, x, Get{})
	if err != nil {
		t.Fatal(err)
	}
	oldRun := g.lease.run()
	// A request handed to a, whose handler waits.
	y := Ref{"counter", "blocked"}
	if _, err := Ask[Get, int](bg, a, y, Get{}); err != nil {
		t.Fatal(err)
	}
	defer gs.release("k")
	if err := Tell(bg, a, y, Block{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	gs.waitStarted(t, "k")
	asked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		_, err := Ask[Get, int](ctx, g, y, Get{})
		asked <- err
	}()
	waitFor(t, "g's request to be handed to a", func() bool { return a.Stats().QueuedApplication >= 1 })

	n.Membership.Expire("g") // the membership ends g's run
	waitFor(t, "g to join again as a new run", func() bool { return g.Stats().Rejoins == 1 && g.Ready() == nil })
	select {
	case err := <-asked:
		if !errors.Is(err, ErrRejoined) || !errors.Is(err, payload.Unavailable) {
			t.Fatalf("the request g had handed on = %v, want ErrRejoined (Unavailable)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the request g had handed on did not end when g joined again")
	}
	select {
	case <-g.Done():
		t.Fatalf("g closed itself: %v", g.Err())
	default:
	}
	if run := g.lease.run(); run <= oldRun {
		t.Fatalf("g's new run %d is not above its old run %d", run, oldRun)
	}
	members, err := n.Membership.Members(bg)
	if err != nil {
		t.Fatal(err)
	}
	var listed bool
	for _, m := range members {
		if m.Name == "g" {
			listed = m.LeaseGen == g.lease.run()
		}
	}
	if !listed {
		t.Fatalf("the membership does not list g's new run %d: %+v", g.lease.run(), members)
	}
	if err := Tell(bg, g, x, Inc{By: 3}); err != nil {
		t.Fatalf("a Tell from g's new run: %v", err)
	}
	if got, err := Ask[Get, int](bg, g, x, Get{}); err != nil || got != before+3 {
		t.Fatalf("an Ask from g's new run = %d, %v; want %d", got, err, before+3)
	}
	if err := g.Err(); err != nil {
		t.Fatalf("g.Err() = %v, want nil", err)
	}
}

// refusingJoin is a membership whose Join refuses the name (another live
// run holds it) while refuse is set.
type refusingJoin struct {
	membership.Membership
	refuse atomic.Bool
}

func (m *refusingJoin) Join(ctx context.Context, mb membership.Member) (membership.Lease, error) {
	if m.refuse.Load() {
		return membership.Lease{}, membership.ErrNameTaken
	}
	return m.Membership.Join(ctx, mb)
}

// A gateway joining again as a new run that finds another live run of its
// name in the membership (another process of that name) closes itself:
// that is a fact, not a stall.
func TestAGatewayWhoseNameAnotherRunHoldsClosesInsteadOfJoiningAgain(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	gcfg := shortLeases(n.With(Config{Name: "g", Logger: quietLogger(), Gateway: true}))
	members := &refusingJoin{Membership: gcfg.Membership}
	gcfg.Membership = members
	g := startHost(t, gcfg, movableKind(newGates()))
	waitViews(t, a, g)
	members.refuse.Store(true)
	n.Membership.Expire("g")
	select {
	case <-g.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("g did not close with its name held by another run")
	}
	if err := g.Err(); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, membership.ErrNameTaken) {
		t.Fatalf("g.Err() = %v, want ErrLeaseLost wrapping membership.ErrNameTaken", err)
	}
	if st := g.Stats(); st.Rejoins != 1 {
		t.Fatalf("g.Stats().Rejoins = %d, want 1 (it tried)", st.Rejoins)
	}
}

// blockingLeave is a membership whose Leave waits for release, and whose
// Renew says the run is not a member once Leave began (as a store that
// handled the leave would).
type blockingLeave struct {
	membership.Membership
	leaving chan struct{} // closed when Leave begins
	release chan struct{}
	left    atomic.Bool
}

func (m *blockingLeave) Leave(ctx context.Context, name string, gen uint64) error {
	m.left.Store(true)
	close(m.leaving)
	<-m.release
	return m.Membership.Leave(ctx, name, gen)
}

func (m *blockingLeave) Renew(ctx context.Context, name string, gen uint64) (membership.Lease, error) {
	if m.left.Load() {
		return membership.Lease{}, membership.ErrNotMember
	}
	return m.Membership.Renew(ctx, name, gen)
}

// A renewal that runs while Close leaves the membership finds the run no
// member: that is the host's own leave, not its run ended by its peers —
// Err stays nil (a node exits 0 after a drain, not 3).
func TestARenewalDuringCloseIsNotARunThatEnded(t *testing.T) {
	n := NewNetwork(nil)
	cfg := n.With(Config{Name: "a", Logger: quietLogger()})
	m := &blockingLeave{Membership: cfg.Membership, leaving: make(chan struct{}), release: make(chan struct{})}
	cfg.Membership = m
	a := startHost(t, cfg, movableKind(newGates()))
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	<-m.leaving // Close is leaving the membership
	a.lease.leaseTick(time.Now())
	close(m.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := a.Err(); err != nil {
		t.Fatalf("a.Err() = %v after Close, want nil: the renewal during the leave ended the run", err)
	}
}

// A host whose Location Store lease is longer than its membership's lease
// would have its run ended by the membership after a shorter stall than
// the one its LeaseTTL is meant to ride out: Start refuses the
// configuration, naming both settings, and leaves the membership; with
// the membership's TTL at least as long, it starts.
func TestStartRefusesALeaseTTLLongerThanTheMembershipsLease(t *testing.T) {
	n := NewNetwork(nil)
	h, err := NewHost(n.With(Config{Name: "long", LeaseTTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start()
	if !errors.Is(err, payload.InvalidOperation) || !strings.Contains(err.Error(), "Config.LeaseTTL 10s") ||
		!strings.Contains(err.Error(), "membership's lease ("+membership.DefaultTTL.String()+")") {
		t.Fatalf("Start with LeaseTTL 10s and the membership's default TTL: %v; want InvalidOperation naming both", err)
	}
	_ = h.Close()
	ms, err := n.Membership.Members(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "long" {
			t.Fatalf("the refused host is still a member: %+v", m)
		}
	}

	n2 := NewNetwork(nil)
	n2.Membership = membership.NewMemory(membership.Options{TTL: 10 * time.Second})
	h2, err := NewHost(n2.With(Config{Name: "long", LeaseTTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Start(); err != nil {
		t.Fatalf("Start with LeaseTTL 10s and a membership of the same TTL: %v", err)
	}
	_ = h2.Close()
}

// leaseRecorder is an Observer that records each lease renewal it is told
// of (LeaseObserver).
type leaseRecorder struct {
	noObserver
	mu   sync.Mutex
	took map[string][]time.Duration
	errs map[string]int
}

func (r *leaseRecorder) LeaseRenewed(lease string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.took[lease] = append(r.took[lease], took)
	if err != nil {
		r.errs[lease]++
	}
}

// renewals returns how many renewals of lease were observed, and the
// longest.
func (r *leaseRecorder) renewals(lease string) (n int, longest time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.took[lease] {
		longest = max(longest, d)
	}
	return len(r.took[lease]), longest
}

// An Observer that is a LeaseObserver is told of each renewal with how
// long its call took; the time in jeopardy grows while the host is in it
// (the current spell counts) and stops when the host resumes.
func TestTheTimeInJeopardyAndEachRenewalAreObserved(t *testing.T) {
	store := &lateRenewals{MemoryStore: relocation.NewMemoryStore(nil)}
	rec := &leaseRecorder{took: map[string][]time.Duration{}, errs: map[string]int{}}
	h := startHost(t, shortLeases(Config{Name: "a", Store: store, Logger: quietLogger(), Observer: rec}), seqKind())
	waitFor(t, "a renewal observed", func() bool { n, _ := rec.renewals(LeaseStore); return n > 0 })
	if st := h.Stats(); st.JeopardyTime != 0 {
		t.Fatalf("%v in jeopardy before any", st.JeopardyTime)
	}
	store.delay.Store(int64(h.cfg.LeaseTTL)) // every answer comes after its own lease's end
	waitFor(t, "the host in jeopardy", func() bool { return h.Stats().Jeopardy })
	during := h.Stats().JeopardyTime
	waitFor(t, "the time in jeopardy to grow while the host is in it", func() bool { return h.Stats().JeopardyTime > during })
	waitFor(t, "a renewal observed to take a lease", func() bool { _, l := rec.renewals(LeaseStore); return l >= h.cfg.LeaseTTL })
	store.delay.Store(0)
	waitFor(t, "the host out of jeopardy", func() bool { return !h.Stats().Jeopardy })
	after := h.Stats().JeopardyTime
	n, _ := rec.renewals(LeaseStore)
	waitFor(t, "two more renewals", func() bool { m, _ := rec.renewals(LeaseStore); return m >= n+2 })
	if st := h.Stats(); st.JeopardyTime != after || after <= during || st.Jeopardy {
		t.Fatalf("time in jeopardy %v, then %v once out of it (%v while in it); want it grown, then still", after, st.JeopardyTime, during)
	}
}
