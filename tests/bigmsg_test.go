package tests

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport/tcp"
)

// bulk is an object whose state is a big text (JSON keeps it byte for
// byte: letters only), made by a request and read whole by another.
type bulk struct {
	Text string `json:"text"`
}

// bulkFill makes the object's text: N bytes of the pattern of Seed.
type bulkFill struct {
	N    int
	Seed int
}

// bulkRead asks for the object's whole text: a reply as big as it.
type bulkRead struct{}

// bulkText is N bytes of letters, the pattern of seed.
func bulkText(n, seed int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < n; i += 4096 { // blocks of 4 KiB, one letter each
		b.WriteString(strings.Repeat(string(rune('a'+(i/4096+seed)%26)), min(4096, n-i)))
	}
	return b.String()
}

func bulkKind() *actor.Kind[bulk] {
	k := actor.NewKind("bulk", func(*actor.Context, string) (*bulk, error) { return &bulk{}, nil })
	actor.HandleRequest(k, func(ctx *actor.Context, b *bulk, m bulkFill) (int, error) {
		b.Text = bulkText(m.N, m.Seed)
		return len(b.Text), nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, b *bulk, _ bulkRead) (bulk, error) { return *b, nil })
	k.PreserveStateJSON() // a move carries the whole text
	return k
}

// TestBigRepliesAndMovesWhileTrafficRunsStopNoHost: two hosts in one
// process over transport/tcp (mutual TLS on loopback), numbered traffic to
// 100 small objects from both, while objects with 48–63 MiB of state are
// read whole (a reply that big over the link) and moved back and forth
// (a move record that big). No host closes itself (a big message's
// encoding, copying and sending never keep a lease from being renewed —
// and a lease that ran out would only pause the host), every big reply
// and every moved state arrives whole, and the traffic loses, duplicates
// and reorders nothing.
func TestBigRepliesAndMovesWhileTrafficRunsStopNoHost(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0xb16))
	ctx := context.Background()
	net := localnet.New(localnet.Options{})
	attacher := newTLSAttacher(tcp.Options{})
	var hosts []*actor.Host
	defer func() {
		for _, h := range hosts {
			h.Close()
		}
		testutil.CheckNoGoroutines(t)
	}()
	for _, name := range []string{"a", "b"} {
		h, err := actor.NewHost(actor.Config{Name: name, Transport: attacher, Store: net.Store, Membership: net.Membership,
			Logger: quietLogger(), RequestTimeout: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Register(tallyKind(), bulkKind()); err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	a, b := hosts[0], hosts[1]
	for _, h := range hosts {
		for len(h.Peers()) < 1 {
			time.Sleep(time.Millisecond)
		}
	}

	const objects = 100
	ref := func(i int) actor.Ref { return actor.Ref{Kind: "tally", ID: strconv.Itoa(i)} }
	type sender struct {
		name string
		host *actor.Host
		sent []int
	}
	senders := []*sender{{name: "a/0", host: a, sent: make([]int, objects)}, {name: "b/0", host: b, sent: make([]int, objects)}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var tells, pushedBack atomic.Int64
	for si, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(si)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := r.IntN(objects)
				seq := s.sent[i] + 1
				err := actor.Tell(ctx, s.host, ref(i), numbered{Sender: s.name, Seq: seq})
				if refusedUnsent(err) {
					pushedBack.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("%s: Tell #%d to object %d: %v", s.name, seq, i, err)
					return
				}
				tells.Add(1)
				s.sent[i] = seq
				time.Sleep(200 * time.Microsecond) // a steady stream, not a flood
			}
		}()
	}

	// The big objects: filled on one host, read whole from the other,
	// moved to the other and read there again, three rounds.
	rounds := 3
	if testutil.Race {
		rounds = 2 // the race detector's copies of 50 MiB are slow
	}
	for r := range rounds {
		n := 48<<20 + rng.IntN(15<<20) // 48–63 MiB
		big := actor.Ref{Kind: "bulk", ID: "big-" + strconv.Itoa(r)}
		home, away := a, b
		if r%2 == 1 {
			home, away = b, a
		}
		if got, err := actor.Ask[bulkFill, int](ctx, home, big, bulkFill{N: n, Seed: r}); err != nil || got != n {
			t.Fatalf("round %d: filling %v with %d bytes: %d, %v", r, big, n, got, err)
		}
		want := bulkText(n, r)
		read := func(via *actor.Host, what string) {
			got, err := actor.Ask[bulkRead, bulk](ctx, via, big, bulkRead{})
			if err != nil || got.Text != want {
				t.Fatalf("round %d: %s: reading %v (%d bytes) through %s: %d bytes, equal %v, %v", r, what, big, n, via.Name(), len(got.Text), got.Text == want, err)
			}
		}
		read(away, "a reply across the link")
		loc, err := away.Locate(ctx, big)
		if err != nil {
			t.Fatal(err)
		}
		where, to := loc.Host, a.Name()
		if where == a.Name() {
			to = b.Name()
		}
		if err := home.Relocate(ctx, big, to); err != nil {
			t.Fatalf("round %d: moving %v (%d bytes of state) from %s to %s: %v", r, big, n, where, to, err)
		}
		read(home, "after its move")
		read(away, "after its move, read where it runs")
		t.Logf("round %d: %d MiB read across the link and moved from %s to %s", r, n>>20, where, to)
	}
	close(stop)
	wg.Wait()

	for _, h := range hosts {
		if err := h.Err(); err != nil {
			t.Fatalf("%s closed itself: %v", h.Name(), err)
		}
	}
	for i := range objects {
		st, err := readObject(ctx, a, ref(i))
		if err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		if len(st.Bad) > 0 {
			t.Errorf("object %d ran messages out of order: %v", i, st.Bad)
		}
		for _, s := range senders {
			if got, want := st.Count[s.name], s.sent[i]; got != want {
				t.Errorf("object %d ran %d messages of %s, want %d (lost or duplicated)", i, got, s.name, want)
			}
		}
	}
	for _, h := range hosts {
		st := h.Stats()
		t.Logf("%s: jeopardies %d, relocations %d", h.Name(), st.Jeopardies, st.Relocations)
	}
	t.Logf("%d tells beside the big messages, %d refused unsent and sent again", tells.Load(), pushedBack.Load())
}
