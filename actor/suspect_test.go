package actor

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
)

// leaseFreezer is a MemoryStore whose renewals of the hosts it was told
// to freeze answer as if they had landed and change nothing: their
// leases run out by the store while the hosts go on (and keep renewing
// their membership). It stands for a host whose lease the store let lapse
// while the host cannot tell — the one fact a suspicion may act on —
// without waiting for the membership's own expiry.
type leaseFreezer struct {
	*relocation.MemoryStore
	mu     sync.Mutex
	frozen map[string]bool
}

func (s *leaseFreezer) freeze(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen == nil {
		s.frozen = map[string]bool{}
	}
	s.frozen[host] = true
}

func (s *leaseFreezer) RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (relocation.Lease, error) {
	s.mu.Lock()
	frozen := s.frozen[host]
	s.mu.Unlock()
	if frozen {
		return relocation.Lease{Host: host, Gen: gen, Deadline: time.Now().Add(relocation.LeaseTTL), Remaining: relocation.LeaseTTL}, nil
	}
	return s.MemoryStore.RenewLease(ctx, host, gen, ttl)
}

// memberFreezer is a membership whose renewals of frozen hosts succeed
// without reaching it: with leaseFreezer, a host that cannot tell that
// both its leases lapse (a host cut off from the stores, say).
type memberFreezer struct {
	membership.Membership
	frozen atomic.Bool
}

// memberLists counts the Members calls made through it: a suspicion's
// questions, once the store says the suspect's lease ran out.
type memberLists struct {
	membership.Membership
	lists atomic.Int64
}

func (m *memberLists) Members(ctx context.Context) ([]membership.Member, error) {
	m.lists.Add(1)
	return m.Membership.Members(ctx)
}

func (m *memberFreezer) Renew(ctx context.Context, name string, gen uint64) (membership.Lease, error) {
	if m.frozen.Load() {
		return membership.Lease{Name: name, Gen: gen, TTL: membership.DefaultTTL}, nil
	}
	return m.Membership.Renew(ctx, name, gen)
}

// leaseAsks is a MemoryStore that counts the calls of Lease for host b
// (a's suspicion checks of b; a's look-ups of b's objects ask too, and
// none run while the link is broken).
type leaseAsks struct {
	*relocation.MemoryStore
	asks atomic.Int64
}

func (s *leaseAsks) Lease(ctx context.Context, host string) (relocation.Lease, bool, error) {
	if host == "b" {
		s.asks.Add(1)
	}
	return s.MemoryStore.Lease(ctx, host)
}

// objectOn returns a counter object that runs on host h, activated
// through h (the kind's placement decides where each id goes).
func objectOn(t *testing.T, h *Host, store relocation.Store) Ref {
	t.Helper()
	for i := range 64 {
		ref := Ref{"counter", "s" + strconv.Itoa(i)}
		if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := Ask[Get, int](bg, h, ref, Get{}); err != nil {
			t.Fatal(err)
		}
		if row, err := store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err == nil && row.Host == h.Name() {
			return ref
		}
	}
	t.Fatalf("no object of 64 activated on %s", h.Name())
	return Ref{}
}

// A broken link is a suspicion, not a fact: while the peer's lease is
// live in the Location Store, the host keeps it in its view, routes to
// it, and takes none of its objects over — also after the store check
// has run again past a whole lease.
func TestASuspicionWhileThePeersLeaseIsLiveDropsNothing(t *testing.T) {
	store := &leaseAsks{MemoryStore: relocation.NewMemoryStore(nil)}
	n := NewNetwork(store)
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), movableKind(newGates()))
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), movableKind(newGates()))
	waitViews(t, a, b)
	ref := objectOn(t, b, n.Store())
	before, err := Ask[Get, int](bg, a, ref, Get{})
	if err != nil {
		t.Fatal(err)
	}
	asked := store.asks.Load()
	n.Break("a", "b")
	waitFor(t, "a to suspect b", func() bool { return a.Stats().Suspicions >= 1 })
	// The check asks the store at once, then again when b's lease would
	// have run out (b renewed it meanwhile): past both answers.
	waitFor(t, "a to ask the store for b's lease again after a whole lease", func() bool { return store.asks.Load() >= asked+2 })
	if st := a.Stats(); st.SuspectsConfirmed != 0 {
		t.Fatalf("a confirmed %d suspicions of b, whose lease is live", st.SuspectsConfirmed)
	}
	if _, ok := a.peers.view.member("b"); !ok {
		t.Fatal("a dropped b from its view on a suspicion alone")
	}
	n.Heal("a", "b")
	got, err := Ask[Get, int](bg, a, ref, Get{})
	if err != nil || got != before {
		t.Fatalf("after the link healed, a read %v, %v; want %d from b (its state kept)", got, err, before)
	}
	if a.Stats().OwnersActive != 0 {
		t.Fatalf("a took an object over on a suspicion (%d owners)", a.Stats().OwnersActive)
	}
}

// A suspected peer whose lease the Location Store shows run out, and whose
// run the membership then ends (the check's question makes it sweep at
// once, ahead of its own sweep and watch), is dropped from the view at
// once; its objects are taken over at their next message, and the
// membership's own word of it counts no second failure. While the
// membership still lists the run — its lease there is not over, and the
// run may yet renew and come back — nothing is confirmed.
func TestASuspectedPeerPastItsLeaseIsDroppedOnceTheMembershipEndsItsRun(t *testing.T) {
	store := &leaseFreezer{MemoryStore: relocation.NewMemoryStore(nil)}
	n := NewNetwork(store)
	members := &memberFreezer{Membership: n.Membership}
	lists := &memberLists{Membership: n.Membership}
	ac := n.With(Config{Name: "a", Logger: quietLogger()})
	ac.Membership = lists
	a := startHost(t, ac, movableKind(newGates()))
	bc := n.With(Config{Name: "b", Logger: quietLogger()})
	bc.Membership = members
	b := startHost(t, bc, movableKind(newGates()))
	waitViews(t, a, b)
	ref := objectOn(t, b, store)
	store.freeze("b")
	store.Expire("b")
	n.Break("a", "b")
	// The store says b's lease ran out; the membership, whose lease b
	// still renews, lists b: no confirmation.
	waitFor(t, "a's check to ask the membership twice", func() bool { return lists.lists.Load() >= 2 })
	if _, ok := a.peers.view.member("b"); !ok || a.Stats().SuspectsConfirmed != 0 {
		t.Fatalf("a dropped b (confirmed %d) on the store's lease alone, while the membership lists b", a.Stats().SuspectsConfirmed)
	}
	members.frozen.Store(true) // b's membership lease runs out too
	waitFor(t, "a to drop b once the membership ended its run", func() bool { _, ok := a.peers.view.member("b"); return !ok })
	got, err := Ask[Get, int](bg, a, ref, Get{})
	if err != nil || got != 0 {
		t.Fatalf("a read %s: %v, %v; want 0 (taken over here: its state died with b)", ref, got, err)
	}
	if row, err := store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err != nil || row.Host != "a" {
		t.Fatalf("the store row of %s: %+v, %v; want it owned by a", ref, row, err)
	}
	// The membership's own word of b (b leaves when it closes) is no
	// second failure, and a late state change of b adds it back nowhere.
	if got := a.gaps.failures.Load(); got != 1 {
		t.Fatalf("a recorded %d failures, want 1", got)
	}
	_ = b.Close()
	c := startHost(t, n.With(Config{Name: "c", Logger: quietLogger()}), movableKind(newGates()))
	waitFor(t, "a to see c join after b left", func() bool { _, ok := a.peers.view.member("c"); return ok && c.Err() == nil })
	if got := a.gaps.failures.Load(); got != 1 {
		t.Fatalf("after b left, a recorded %d failures, want 1", got)
	}
	if _, ok := a.peers.view.member("b"); ok {
		t.Fatal("a lists b again")
	}
}
