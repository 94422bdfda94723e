package actor

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
)

// TestARenewalIsSentBesideTheNewestOnlyOnceItHasBeenOutForTheSpacing: with
// none in flight a renewal is due at once; beside one in flight, only
// once the newest has been out for the spacing; never more than
// renewalsInFlight at once.
func TestARenewalIsSentBesideTheNewestOnlyOnceItHasBeenOutForTheSpacing(t *testing.T) {
	var r renewals
	t0 := time.Unix(1000, 0)
	const spacing = 2 * time.Second
	if !r.due(t0, spacing) {
		t.Fatal("no renewal in flight, and none due")
	}
	first := r.send(t0)
	if r.due(t0.Add(spacing-time.Millisecond), spacing) {
		t.Fatal("a second renewal due before the first had been out for the spacing")
	}
	if !r.due(t0.Add(spacing), spacing) {
		t.Fatal("no second renewal due once the first had been out for the spacing")
	}
	r.send(t0.Add(spacing))
	if r.due(t0.Add(spacing+time.Second), spacing) {
		t.Fatal("a third renewal due before the newest had been out for the spacing")
	}
	for i := 3; i <= renewalsInFlight; i++ {
		at := t0.Add(time.Duration(i-1) * spacing)
		if !r.due(at, spacing) {
			t.Fatalf("renewal %d not due at its spacing", i)
		}
		r.send(at)
	}
	if r.due(t0.Add(time.Hour), spacing) {
		t.Fatalf("a renewal due with %d in flight: past the bound", r.inFlight())
	}
	r.answered(first)
	if !r.due(t0.Add(time.Hour), spacing) {
		t.Fatal("no renewal due once one of those at the bound was answered")
	}
}

// TestOnlyAnAnswerWithNoOtherRenewalInFlightMayExtendTheLease: an answer is
// alone only if no other renewal is in flight when it comes — whatever
// their order of sending — so a renewal that may have landed first and
// found the lease lapsed is always answered and handled before any
// answer extends the lease.
func TestOnlyAnAnswerWithNoOtherRenewalInFlightMayExtendTheLease(t *testing.T) {
	var r renewals
	t0 := time.Unix(1000, 0)
	a := r.send(t0)
	b := r.send(t0.Add(time.Second))
	c := r.send(t0.Add(2 * time.Second))
	if r.answered(b) {
		t.Fatal("b's answer was alone with a and c in flight")
	}
	if r.answered(a) {
		t.Fatal("a's answer was alone with c in flight: c may have landed first")
	}
	if !r.answered(c) {
		t.Fatal("c's answer, the last in flight, was not alone")
	}
	d := r.send(t0.Add(3 * time.Second))
	if !r.answered(d) {
		t.Fatal("a renewal sent and answered alone was not alone")
	}
	if r.answered(d) != true || r.inFlight() != 0 {
		t.Fatal("answering an answered renewal again changed what is in flight")
	}
}

// slowRenewals is a Location Store and a membership whose renewals of one
// host, once slowed, reach the store land after they are sent and are
// answered answer after that: a database, or a path to it, whose round
// trip is longer than the lease.
type slowRenewals struct {
	*relocation.MemoryStore
	membership.Membership
	host         string
	land, answer atomic.Int64    // ns
	most         [2]atomic.Int64 // the most renewals of host's leases out at once: the store's, the membership's
	out          [2]atomic.Int64
	// straggle, if set, is how much later than land every third
	// renewal of the membership's lease lands.
	straggle atomic.Int64
	renewals atomic.Int64 // the membership's renewals of host
}

// renew runs call, a renewal of host, as the slow store does.
func (s *slowRenewals) renew(ctx context.Context, lease int, call func() error) error {
	land, answer := time.Duration(s.land.Load()), time.Duration(s.answer.Load())
	if lease == 1 && s.renewals.Add(1)%3 == 0 {
		land += time.Duration(s.straggle.Load())
	}
	if land+answer == 0 {
		return call()
	}
	n := s.out[lease].Add(1)
	defer s.out[lease].Add(-1)
	for m := s.most[lease].Load(); n > m && !s.most[lease].CompareAndSwap(m, n); m = s.most[lease].Load() {
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(land); err != nil {
		return err
	}
	err := call()
	if e := sleep(answer); e != nil {
		return e
	}
	return err
}

func (s *slowRenewals) RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (l relocation.Lease, err error) {
	if host != s.host {
		return s.MemoryStore.RenewLease(ctx, host, gen, ttl)
	}
	err = s.renew(ctx, 0, func() (e error) { l, e = s.MemoryStore.RenewLease(ctx, host, gen, ttl); return e })
	return l, err
}

func (s *slowRenewals) Renew(ctx context.Context, name string, gen uint64) (l membership.Lease, err error) {
	if name != s.host {
		return s.Membership.Renew(ctx, name, gen)
	}
	err = s.renew(ctx, 1, func() (e error) { l, e = s.Membership.Renew(ctx, name, gen); return e })
	return l, err
}

// Renewals answered after more than the lease (they reach the store half
// a lease after they are sent, and their answers come back a lease after
// that) keep the host's leases live there:
// the host sends another beside the one in flight once that one can no
// longer extend its lease, so they land once per spacing. The host waits
// in jeopardy — no answer comes in time to prove its lease — but neither
// lease runs out in the store: nothing is taken over, the membership
// does not end its run, and when the store is quick again it resumes with
// everything. Before, one renewal at a time landed once per round trip,
// the membership expired the run, and the host closed.
func TestRenewalsAnsweredLaterThanTheLeaseStillKeepItLiveInTheStore(t *testing.T) {
	mem := relocation.NewMemoryStore(nil)
	n := NewNetwork(mem)
	const ttl = 3 * time.Second
	lease := func(c Config) Config {
		c.LeaseTTL, c.LeaseRenew, c.StoreTimeout = ttl, 100*time.Millisecond, time.Minute
		return c
	}
	cfg := lease(n.With(Config{Name: "a", Logger: quietLogger()}))
	slow := &slowRenewals{MemoryStore: mem, Membership: cfg.Membership, host: "a"}
	cfg.Store, cfg.Membership = slow, slow
	a := startHost(t, cfg, seqKind())
	b := startHost(t, lease(n.With(Config{Name: "b", Logger: quietLogger()})), seqKind())
	waitViews(t, a, b)
	ref := Ref{"seq", "x"}
	var log sendLog
	log.send(t, a, ref, 1_000_001)
	log.check(t, a, []Ref{ref})

	slow.land.Store(int64(ttl / 2))
	slow.answer.Store(int64(ttl))
	waitFor(t, "a in jeopardy", func() bool { return a.Stats().Jeopardy || a.Err() != nil })
	for k := 2; k <= 20; k++ {
		log.send(t, a, ref, 1_000_000+k)
	}
	// Longer than two round trips: without renewals beside each other,
	// both leases would have run out in the store by now.
	waitFor(t, "renewals beside each other, for two round trips", func() bool {
		return slow.most[0].Load() >= 2 && slow.most[1].Load() >= 2 && a.Stats().Jeopardy
	})
	time.Sleep(2 * ttl * 3 / 2) // the slow spell goes on: a fact to ride out, not one to wait for
	slow.land.Store(0)
	slow.answer.Store(0)
	waitFor(t, "a out of jeopardy", func() bool { return !a.Stats().Jeopardy || a.Err() != nil })
	if err := a.Err(); err != nil {
		t.Fatalf("a's run ended while its renewals landed late: %v", err)
	}
	log.check(t, a, []Ref{ref})
	if st := a.Stats(); st.LeaseLapses != 0 || log.refused != 0 {
		t.Fatalf("lapses %d, refused %d; want the lease never run out in the store, nothing lost", st.LeaseLapses, log.refused)
	}
	for i := range slow.most {
		if most := slow.most[i].Load(); most > renewalsInFlight {
			t.Fatalf("%d renewals of a lease of a out at once, past the bound of %d", most, renewalsInFlight)
		}
	}
}

// TestAnAnswerBesideAnotherRenewalInFlightNeverExtendsTheLease: the lease
// keeper extends the lease only by an alone answer. One answered beside
// another in flight moves no deadline — the other may have landed first
// and found the lease lapsed — though a lapse it reports starts the
// ownership checks at once; and an unknown outcome beside it makes the
// next alone answer count as a lapse.
func TestAnAnswerBesideAnotherRenewalInFlightNeverExtendsTheLease(t *testing.T) {
	h, err := NewHost(Config{Name: "a", Store: relocation.NewMemoryStore(nil), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	lk := &h.lease
	lk.init(false) // as Start does; nothing else runs
	answer := func(l relocation.Lease, err error) renewed[relocation.Lease] {
		return renewed[relocation.Lease]{sent: time.Now(), run: lk.run(), v: l, err: err}
	}
	live := relocation.Lease{TTL: lk.ttl}
	if err := lk.leaseAnswer(answer(live, nil), false); err != nil || h.gate.deadline.Load() != 0 {
		t.Fatalf("an answer beside another in flight: %v, deadline %d; want no error and no deadline", err, h.gate.deadline.Load())
	}
	if err := lk.leaseAnswer(answer(relocation.Lease{TTL: lk.ttl, Lapsed: true}, nil), false); err != nil || h.gate.epoch.Load() != 1 || h.gate.deadline.Load() != 0 {
		t.Fatalf("a lapse beside another in flight: %v, epoch %d, deadline %d; want the checks begun (epoch 1) and no deadline", err, h.gate.epoch.Load(), h.gate.deadline.Load())
	}
	if err := lk.leaseAnswer(answer(live, nil), true); err != nil || h.gate.epoch.Load() != 1 || h.gate.deadline.Load() == 0 {
		t.Fatalf("an alone answer: %v, epoch %d, deadline %d; want a deadline, epoch still 1", err, h.gate.epoch.Load(), h.gate.deadline.Load())
	}
	dl := h.gate.deadline.Load()
	if err := lk.leaseAnswer(answer(relocation.Lease{}, errStoreDown), false); err == nil {
		t.Fatal("a renewal that failed was not reported")
	}
	if err := lk.leaseAnswer(answer(live, nil), false); err != nil || h.gate.deadline.Load() != dl || h.gate.epoch.Load() != 1 {
		t.Fatalf("an answer beside another after an unknown outcome: %v; the deadline or epoch moved", err)
	}
	if err := lk.leaseAnswer(answer(live, nil), true); err != nil || h.gate.epoch.Load() != 2 || h.gate.deadline.Load() <= dl {
		t.Fatalf("the alone answer after an unknown outcome: %v, epoch %d; want it checked as a lapse (epoch 2) and the deadline moved on", err, h.gate.epoch.Load())
	}
}

// A lease that runs out while a renewal is out, and is renewed again by
// that renewal's answer before the next tick, is a jeopardy all the same:
// the host counts it and says so, at the lease's deadline. Before, a
// renewer that checked only as each tick began missed every such one: on
// a store answering in most of the lease, the host was in jeopardy for
// part of every renewal and counted none.
func TestAJeopardyThatEndsBeforeTheNextTickIsCounted(t *testing.T) {
	store := &lateRenewals{MemoryStore: relocation.NewMemoryStore(nil)}
	cfg := shortLeases(Config{Name: "a", Store: store, Logger: quietLogger()})
	h := startHost(t, cfg, seqKind())
	// Each answer comes after most of the lease less its margin: the
	// lease it earned runs out before the next renewal's answer comes,
	// though no tick begins in the gap.
	margin := leaseMargin(cfg.LeaseTTL, cfg.LeaseRenew)
	store.delay.Store(int64((cfg.LeaseTTL - margin) * 8 / 10))
	waitFor(t, "a jeopardy counted", func() bool { return h.Stats().Jeopardies >= 1 })
	store.delay.Store(0)
	waitFor(t, "the host out of jeopardy", func() bool { return !h.Stats().Jeopardy })
	if err := h.Err(); err != nil {
		t.Fatalf("the host closed: %v", err)
	}
}

// On a store that answers the membership's renewals in most of half its
// lease, one renewal in three landing a further round trip late (a ping
// of a connection idle for a second, a wait for a row lock) does not let
// the membership's lease run out: its renewals go beside each other a
// third of the lease apart, so others land meanwhile. Before, with one
// renewal out at a time, the late one landed more than a lease after the
// one before it, and the membership ended the run.
func TestAMembershipRenewalThatLandsARoundTripLateEndsNoRun(t *testing.T) {
	mem := relocation.NewMemoryStore(nil)
	n := NewNetwork(mem)
	cfg := n.With(Config{Name: "a", Logger: quietLogger()})
	slow := &slowRenewals{MemoryStore: mem, Membership: cfg.Membership, host: "a"}
	cfg.Membership = slow
	a := startHost(t, cfg, seqKind())
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), seqKind())
	waitViews(t, a, b)
	rt := membership.DefaultTTL * 4 / 7 // 2 s of the default 3.5 s
	slow.land.Store(int64(rt))
	slow.straggle.Store(int64(rt))
	from := slow.renewals.Load()
	waitFor(t, "nine membership renewals of a sent on the slow store", func() bool {
		return slow.renewals.Load()-from >= 9 || a.Err() != nil
	})
	slow.land.Store(0)
	slow.straggle.Store(0)
	waitFor(t, "a membership renewal answered at once", func() bool { return slow.out[1].Load() == 0 || a.Err() != nil })
	if err := a.Err(); err != nil {
		t.Fatalf("a's run ended: %v", err)
	}
	if got := b.Peers(); !slices.Contains(got, "a") {
		t.Fatalf("b's peers %v: a is missing", got)
	}
}

// The lease's deadline is kept on the monotonic clock: a wall clock that
// stepped since the process started (here, as if it jumped 10 s ahead)
// does not move it. A deadline read from the wall clock would lie 10 s
// past the lease's true end, and turns would run there.
func TestTheLeaseDeadlineIsKeptOnTheMonotonicClock(t *testing.T) {
	base := time.Now()
	const step = 10 * time.Second
	baseWall := base.UnixNano() - int64(step) // the wall clock read this at the start, then jumped ahead
	deadline := time.Now().Add(3 * time.Second)
	got := wallNanoOfFrom(deadline, base, baseWall)
	want := baseWall + int64(deadline.Sub(base))
	if got != want {
		t.Fatalf("deadline %d on the start's scale, want %d (off by %v)", got, want, time.Duration(got-want))
	}
	if off := deadline.UnixNano() - got - int64(step); off < -int64(time.Millisecond) || off > int64(time.Millisecond) {
		wrong := deadline.UnixNano()
		t.Fatalf("the wall clock's reading differs by %v, want the step %v: the test does not tell the two apart", time.Duration(wrong-got), step)
	}
	if d := wallNanoOf(time.Now()) - wallNano(); d < -int64(time.Second) || d > int64(time.Second) {
		t.Fatalf("wallNanoOf(now) − wallNano() = %v", time.Duration(d))
	}
}
