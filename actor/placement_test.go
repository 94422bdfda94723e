package actor

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
)

// placedKind is a counter kind named name with placement p.
func placedKind(name string, p Placement) *Kind[Counter] {
	k := NewKind(name, func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, c *Counter, m Inc) error { c.N += m.By; return nil })
	HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
	k.SetPlacement(p)
	return k
}

func placementNetwork(t *testing.T, names ...string) []*Host {
	t.Helper()
	_, hs := placementNetworkOn(t, names...)
	return hs
}

// placementNetworkOn is placementNetwork that also returns the network.
func placementNetworkOn(t *testing.T, names ...string) (*Network, []*Host) {
	t.Helper()
	n := NewNetwork(nil)
	var hs []*Host
	for _, name := range names {
		hs = append(hs, startHost(t, Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger()},
			placedKind("local", PlaceLocal), placedKind("random", PlaceRandom),
			placedKind("hashed", PlaceHashed), placedKind("least", PlaceLeastLoaded)))
	}
	waitViews(t, hs...)
	return n, hs
}

// where activates ref by an Ask from h (counted once) and returns its host.
func where(t *testing.T, h *Host, ref Ref) string {
	t.Helper()
	if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 1 {
		t.Fatalf("%v: %d, %v; want the first message run once", ref, n, err)
	}
	loc, err := h.Locate(bg, ref)
	if err != nil {
		t.Fatal(err)
	}
	return loc.Host
}

func TestPlacementLocalIsTheDefaultAndActivatesOnTheSendersHost(t *testing.T) {
	if p := NewKind("k", func(*Context, string) (*Counter, error) { return &Counter{}, nil }).Placement(); p != PlaceLocal {
		t.Fatalf("default placement = %v, want local", p)
	}
	hs := placementNetwork(t, "a", "b", "c")
	for i, h := range hs {
		if got := where(t, h, Ref{"local", itoa(i)}); got != h.Name() {
			t.Fatalf("an object first sent to from %s activated on %s", h.Name(), got)
		}
	}
}

func TestPlacementHashedPicksTheSameHostFromEverySender(t *testing.T) {
	hs := placementNetwork(t, "a", "b", "c")
	names := []string{"a", "b", "c"}
	used := map[string]int{}
	for i := 0; i < 90; i++ {
		id := "obj-" + itoa(i)
		want, best := "", uint64(0)
		for _, n := range names {
			if s := rendezvous(n, id); want == "" || s > best {
				want, best = n, s
			}
		}
		from := hs[i%3]
		if got := where(t, from, Ref{"hashed", id}); got != want {
			t.Fatalf("%s sent from %s activated on %s, want %s (the hash's pick)", id, from.Name(), got, want)
		}
		used[want]++
	}
	if len(used) != 3 {
		t.Fatalf("90 hashed ids landed on %v; want every host used", used)
	}
}

// Rendezvous hashing moves only the ids of a host that leaves.
func TestPlacementHashedMovesOnlyTheLeavingHostsIDs(t *testing.T) {
	pick := func(hosts []string, id string) string {
		best, score := "", uint64(0)
		for _, h := range hosts {
			if s := rendezvous(h, id); best == "" || s > score {
				best, score = h, s
			}
		}
		return best
	}
	all, without := []string{"a", "b", "c", "d"}, []string{"a", "b", "d"}
	moved := 0
	for i := 0; i < 1000; i++ {
		id := fmt.Sprint("id", i)
		before, after := pick(all, id), pick(without, id)
		if before != "c" && before != after {
			t.Fatalf("%s moved from %s to %s when c left", id, before, after)
		}
		if before == "c" {
			moved++
		}
	}
	if moved < 150 || moved > 350 {
		t.Fatalf("c held %d of 1000 ids, want about a quarter", moved)
	}
}

func TestPlacementRandomSpreadsOverTheHostsThatHaveTheKind(t *testing.T) {
	n, hs := placementNetworkOn(t, "a", "b", "c")
	// A host without the kind is never picked.
	d := startHost(t, n.With(Config{Name: "d", Logger: quietLogger()}), placedKind("local", PlaceLocal))
	waitViews(t, append(hs, d)...)
	used := map[string]int{}
	for i := 0; i < 60; i++ {
		used[where(t, hs[0], Ref{"random", itoa(i)})]++
	}
	if len(used) < 2 || used["d"] != 0 {
		t.Fatalf("60 random placements from a landed on %v; want several hosts, never d", used)
	}
	total := 0
	for _, h := range hs {
		total += h.Stats().OwnersActive
	}
	if total != 60 {
		t.Fatalf("%d owners for 60 objects (one activation each)", total)
	}
}

func TestPlacementLeastLoadedPicksTheHostWithFewestObjects(t *testing.T) {
	hs := placementNetwork(t, "a", "b", "c")
	a, b := hs[0], hs[1]
	for i := 0; i < 5; i++ {
		where(t, a, Ref{"local", "a" + itoa(i)})
	}
	for i := 0; i < 3; i++ {
		where(t, b, Ref{"local", "b" + itoa(i)})
	}
	// Loads a 5, b 3, c 0 (as the hosts report them): c takes three, then
	// b and c tie (lowest name).
	var got []string
	for i := 0; i < 5; i++ {
		waitViews(t, hs...)
		got = append(got, where(t, a, Ref{"least", itoa(i)}))
	}
	if fmt.Sprint(got) != "[c c c b c]" {
		t.Fatalf("least-loaded picks = %v, want [c c c b c]", got)
	}
	// A draining host takes no new activation.
	hs[2].peers.setMemberState(membership.Draining)
	waitFor(t, "a to see c draining", func() bool {
		m, _ := a.peers.view.member("c")
		return m.State == membership.Draining
	})
	if h := where(t, a, Ref{"least", "x"}); h == "c" {
		t.Fatal("a draining host got a new activation")
	}
}

// Two look-ups of a new object on one host at once — a send from this host
// and a message that came over a link — make one activation between them,
// not a second reservation that fails its commit.
func TestConcurrentLookUpsOfANewObjectActivateItOnce(t *testing.T) {
	h := startHost(t, NewNetwork(nil).With(Config{Name: "a", Logger: quietLogger()}), counterKind(newGates()))
	kr := h.owners.kinds["counter"]
	for i := 0; i < 2000; i++ {
		id := "new-" + itoa(i)
		var wg sync.WaitGroup
		var places [2]place
		var errs [2]error
		for j, mode := range []lookupMode{fromOutside, fromLink} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				places[j], errs[j] = h.router.locate(kr, id, mode)
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || places[0].o == nil || places[0].o != places[1].o {
			t.Fatalf("%s: look-ups gave %+v (%v) and %+v (%v); want one owner", id, places[0], errs[0], places[1], errs[1])
		}
	}
}

// A gateway host sends to objects of the kinds it registers but hosts
// none: no host places an object on it, it places new objects on the hosts
// that serve the kind, and with none it says so.
func TestAGatewayHostsNothingAndPlacesOnServingHosts(t *testing.T) {
	n := NewNetwork(nil)
	g := startHost(t, n.With(Config{Name: "g", Logger: quietLogger(), Gateway: true}), counterKind(newGates()))
	ref := func(i int) Ref { return Ref{"counter", "gw-" + itoa(i)} }
	if err := Tell(bg, g, ref(0), Inc{By: 1}); !errors.Is(err, payload.Unavailable) {
		t.Fatalf("Tell from a gateway with no host serving the kind: %v, want Unavailable", err)
	}
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), counterKind(newGates()))
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), counterKind(newGates()))
	waitViews(t, g, a, b)
	for i := range 40 {
		if err := Tell(bg, g, ref(i), Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
		if got, err := Ask[Get, int](bg, g, ref(i), Get{}); err != nil || got != 1 {
			t.Fatalf("object %d: %d, %v", i, got, err)
		}
		// Sends from a serving host find the objects where the gateway
		// placed them.
		if got, err := Ask[Get, int](bg, a, ref(i), Get{}); err != nil || got != 1 {
			t.Fatalf("object %d asked from a: %d, %v", i, got, err)
		}
	}
	if g.Stats().OwnersActive != 0 {
		t.Fatalf("the gateway hosts %d objects", g.Stats().OwnersActive)
	}
	if na, nb := a.Stats().OwnersActive, b.Stats().OwnersActive; na+nb != 40 || na == 0 || nb == 0 {
		t.Fatalf("objects on a %d, on b %d: want all 40, spread over both", na, nb)
	}
	if m, _ := a.peers.view.member("g"); len(m.Kinds) != 0 {
		t.Fatalf("the gateway offers kinds %v", m.Kinds)
	}
	if _, err := NewHost(Config{Name: "x", Gateway: true}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("a gateway without a transport: %v, want InvalidOperation", err)
	}
}

// pinned is a program's own Placement: every object activates on host on
// and drains to the hosts of drain, in that order.
type pinned struct {
	on    string
	drain []string
}

func (p pinned) Activate(id, self string, among []HostLoad) string { return p.on }
func (p pinned) Drain(id string, among []HostLoad) []string        { return p.drain }
func (p pinned) String() string                                    { return "pinned" }

// A kind's own Placement decides where its objects activate and where a
// drain sends them; a Drain that names no host serving the kind leaves
// berth's order, not the end of the objects' state.
func TestAKindsOwnPlacementDecidesWhereItsObjectsActivateAndDrainTo(t *testing.T) {
	for _, tc := range []struct {
		what  string
		drain []string
		to    []string // where the drained objects may end
	}{
		{"a drain to b, then a", []string{"b", "a"}, []string{"b"}},
		{"a drain naming no host", []string{"nobody"}, []string{"a", "b"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			n := NewNetwork(nil)
			var hs []*Host
			for _, name := range []string{"a", "b", "c"} {
				k := placedKind("pinned", pinned{on: "c", drain: tc.drain})
				k.PreserveStateJSON()
				hs = append(hs, startHost(t, n.With(Config{Name: name, Logger: quietLogger()}), k))
			}
			waitViews(t, hs...)
			a, c := hs[0], hs[2]
			const objects = 8
			for i := range objects {
				if got := where(t, a, Ref{"pinned", fmt.Sprint(i)}); got != "c" {
					t.Fatalf("object %d activated on %s; its placement says c", i, got)
				}
			}
			if err := c.Drain(bg); err != nil {
				t.Fatal(err)
			}
			for i := range objects {
				ref := Ref{"pinned", fmt.Sprint(i)}
				n, err := Ask[Get, int](bg, a, ref, Get{})
				if err != nil || n != 1 {
					t.Fatalf("%v after the drain: %d, %v; want its state (1)", ref, n, err)
				}
				loc, err := a.Locate(bg, ref)
				if err != nil || !slices.Contains(tc.to, loc.Host) {
					t.Fatalf("%v drained to %s (%v); want one of %v", ref, loc.Host, err, tc.to)
				}
			}
		})
	}
}
