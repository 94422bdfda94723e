package actor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
)

// Hosts share no package-level mutable state: two independent groups of
// hosts with the same names run side by side in one process (in parallel)
// without a message, reply or move of one reaching the other.
func TestHostGroupsInOneProcessShareNoState(t *testing.T) {
	t.Run("groups", func(t *testing.T) {
		for g := 0; g < 2; g++ {
			t.Run(fmt.Sprint("group-", g), func(t *testing.T) {
				t.Parallel()
				hostGroup(t, g)
			})
		}
	})
	checkNoHostGoroutines(t) // after both groups closed their hosts
}

func hostGroup(t *testing.T, g int) {
	n := NewNetwork(nil)
	var hs []*Host
	for _, name := range []string{"a", "b"} { // the same names in both groups
		h, err := NewHost(Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		h.Register(seqKind())
		if err := h.Start(); err != nil {
			t.Fatalf("group %d: starting host %s: %v", g, name, err)
		}
		defer h.Close()
		hs = append(hs, h)
	}
	const objects, rounds = 8, 40
	base := 1000 * (g + 1) // each group's own numbers
	for r := 0; r < rounds; r++ {
		for i := 0; i < objects; i++ {
			ref := Ref{"seq", itoa(i)}
			if err := Tell(bg, hs[r%2], ref, SeqMsg{Seq: base + r}); err != nil {
				t.Fatal(err)
			}
			if r%10 == 9 { // move it to the other host, asked from either
				loc, err := hs[0].Locate(bg, ref)
				if err != nil {
					t.Fatal(err)
				}
				to := "a"
				if loc.Host == "a" {
					to = "b"
				}
				if err := hs[r%2].Relocate(bg, ref, to); err != nil {
					t.Fatalf("group %d: relocate %v to %s: %v", g, ref, to, err)
				}
			}
		}
	}
	for i := 0; i < objects; i++ {
		got, err := Ask[GetSeqs, []int](bg, hs[1], Ref{"seq", itoa(i)}, GetSeqs{})
		if err != nil {
			t.Fatal(err)
		}
		// Exactly the group's own messages, each once, in order per
		// sending host (a sent the even rounds, b the odd ones).
		seen, last := map[int]bool{}, [2]int{-1, -1}
		ok := len(got) == rounds
		for _, v := range got {
			r := v - base
			if r < 0 || r >= rounds || seen[r] || r <= last[r%2] {
				ok = false
				break
			}
			seen[r], last[r%2] = true, r
		}
		if !ok {
			t.Fatalf("group %d: object %d ran %v; want %d..%d once each, its own group's only, in order per sender", g, i, got, base, base+rounds-1)
		}
	}
}

// A host dates its lease from the local send time of its renewal, never
// from the deadline the store computed on its own clock: a store whose
// clock is an hour behind does not make the host think its lease ran out
// (it would refuse every turn), nor does one an hour ahead let it run
// turns past its real lease.
func TestHostLeaseFollowsTheLocalTimeRule(t *testing.T) {
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(fmt.Sprint("store clock ", skew), func(t *testing.T) {
			store := relocation.NewMemoryStore(func() time.Time { return time.Now().Add(skew) })
			before := time.Now()
			h := startHost(t, NewNetwork(store).With(Config{Logger: quietLogger()}), counterKind(newGates()))
			after := time.Now()
			if _, err := Ask[Get, int](bg, h, Ref{"counter", "x"}, Get{}); err != nil {
				t.Fatalf("a turn with the store's clock off by %v: %v", skew, err)
			}
			// The renewal was sent between before and after.
			dl := time.Unix(0, h.gate.deadline.Load())
			lo := before.Add(relocation.LeaseTTL - membership.DefaultMargin)
			hi := after.Add(relocation.LeaseTTL - membership.DefaultMargin)
			if dl.Before(lo) || dl.After(hi) {
				t.Fatalf("lease deadline %v: want the local send time + TTL − margin, between %v and %v", dl, lo, hi)
			}
		})
	}
}

// blockingStore holds Reserve of one object until released.
type blockingStore struct {
	*relocation.MemoryStore
	id      string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingStore) Reserve(ctx context.Context, obj relocation.Object, host string) (relocation.Row, error) {
	if obj.ID == s.id {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return relocation.Row{}, ctx.Err()
		}
	}
	return s.MemoryStore.Reserve(ctx, obj, host)
}

// A store call a host makes for a message that came over a link (to find
// or activate its object) does not run on the link's goroutine: while it
// waits, the messages behind it on the same link for objects that are
// already here still run.
func TestASlowStoreCallDoesNotStallTheLink(t *testing.T) {
	// An id the hash places on b, and an object already living on b.
	slow := ""
	for i := 0; slow == ""; i++ {
		if id := "slow-" + itoa(i); rendezvous("b", id) > rendezvous("a", id) {
			slow = id
		}
	}
	fast := ""
	for i := 0; fast == ""; i++ {
		if id := "fast-" + itoa(i); rendezvous("b", id) > rendezvous("a", id) {
			fast = id
		}
	}
	store := &blockingStore{MemoryStore: relocation.NewMemoryStore(nil), id: slow, entered: make(chan struct{}), release: make(chan struct{})}
	n := NewNetwork(store)
	release := sync.OnceFunc(func() { close(store.release) })
	t.Cleanup(release)
	a := startHost(t, Config{Name: "a", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, placedKind("hashed", PlaceHashed))
	b := startHost(t, Config{Name: "b", Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()}, placedKind("hashed", PlaceHashed))
	waitViews(t, a, b)
	if _, err := Ask[Get, int](bg, a, Ref{"hashed", fast}, Get{}); err != nil { // lives on b
		t.Fatal(err)
	}
	// a places the slow object on b; b's activation waits in the store.
	if err := Tell(bg, a, Ref{"hashed", slow}, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	<-store.entered
	// Behind it on the same link: a message for the object that is on b.
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if _, err := Ask[Get, int](ctx, a, Ref{"hashed", fast}, Get{}); err != nil {
		t.Fatalf("a message behind a slow store call on the link: %v (the link is stalled)", err)
	}
	release()
	if got, err := Ask[Get, int](ctx, a, Ref{"hashed", slow}, Get{}); err != nil || got != 1 {
		t.Fatalf("the slow object after the store answered: %d, %v", got, err)
	}
	if b.Stats().OwnersActive != 2 {
		t.Fatalf("b has %d objects, want both", b.Stats().OwnersActive)
	}
}
