package actor

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	crashSeed = flag.Uint64("crash.seed", 0, "seed of TestCrashesAtRandomMomentsLoseNoAcknowledgedUpdate (0: random)")
	crashFor  = flag.Duration("crash.for", 2*time.Second, "how long TestCrashesAtRandomMomentsLoseNoAcknowledgedUpdate runs its load")
)

// Journal is a persistent object that records, per sender, the last
// sequence number it applied. A message with the next number applies; one
// already applied (a retry whose first delivery landed) applies nothing;
// one past the next is a hole: an applied message was lost.
type Journal struct {
	Last    map[string]int
	Applied int
	Holes   []string
}

type Append struct {
	Sender string
	Seq    int
}
type ReadJournal struct{}

func journalKind() *Kind[Journal] {
	k := NewKind("journal", func(*Context, string) (*Journal, error) { return &Journal{Last: map[string]int{}}, nil })
	HandleRequest(k, func(ctx *Context, j *Journal, m Append) (int, error) {
		last := j.Last[m.Sender]
		switch {
		case m.Seq <= last:
			ctx.StateUnchanged() // a retry of an applied message
		case m.Seq == last+1:
			j.Last[m.Sender] = m.Seq
			j.Applied++
		default:
			j.Holes = append(j.Holes, fmt.Sprintf("%s: %d after %d", m.Sender, m.Seq, last))
			j.Last[m.Sender] = m.Seq
			j.Applied++
		}
		return j.Last[m.Sender], nil
	})
	HandleRequest(k, func(ctx *Context, j *Journal, _ ReadJournal) (Journal, error) {
		ctx.StateUnchanged()
		return *j, nil
	})
	k.PersistStateJSON()
	return k
}

// The durability property in one process: hosts over inproc with one
// MemoryStore, senders asking persistent objects in closed loops (each
// retrying an unanswered message until it is answered), objects moving,
// and hosts crashing (inproc Kill) at random moments, replaced by new
// ones. At the end every object's state holds, for each sender, every
// message that was answered, and exactly a prefix of what it sent: no
// hole, no message applied twice.
func TestCrashesAtRandomMomentsLoseNoAcknowledgedUpdate(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-crash.seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const objects, senders = 24, 6

	n := NewNetwork(nil)
	var mu sync.Mutex // guards live, next
	var live []*Host
	next := 0
	start := func() *Host {
		mu.Lock()
		name := "p" + strconv.Itoa(next)
		next++
		mu.Unlock()
		h := startHost(t, n.With(Config{Name: name, Logger: quietLogger(), SendTimeout: 2 * time.Second}), journalKind())
		mu.Lock()
		live = append(live, h)
		mu.Unlock()
		return h
	}
	pick := func(r *rand.Rand) *Host {
		mu.Lock()
		defer mu.Unlock()
		return live[r.IntN(len(live))]
	}
	for range 3 {
		start()
	}
	ref := func(i int) Ref { return Ref{"journal", strconv.Itoa(i)} }

	type sender struct {
		name  string
		acked [objects]int // highest answered sequence number per object
		sent  [objects]int // highest sent
	}
	ss := make([]*sender, senders)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered, retried atomic.Int64
	for si := range ss {
		s := &sender{name: "s" + strconv.Itoa(si)}
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
				for {
					ctx, cancel := context.WithTimeout(bg, 3*time.Second)
					got, err := Ask[Append, int](ctx, pick(r), ref(i), Append{Sender: s.name, Seq: seq})
					cancel()
					if err == nil {
						if got < seq {
							t.Errorf("%s's message %d to %d answered with %d: the object had not applied it", s.name, seq, i, got)
						}
						s.acked[i] = seq
						answered.Add(1)
						break
					}
					retried.Add(1)
					select {
					case <-stop:
						return // unanswered: may or may not be applied
					case <-time.After(time.Millisecond):
					}
				}
			}
		})
	}

	// Crashes and moves at random moments.
	deadline := time.Now().Add(*crashFor)
	kills := 0
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(20+rng.IntN(150)) * time.Millisecond)
		switch rng.IntN(3) {
		case 0:
			mu.Lock()
			victim := live[rng.IntN(len(live))]
			live = slicesDelete(live, victim)
			mu.Unlock()
			n.Kill(victim)
			kills++
			start()
		default:
			h := pick(rng)
			dst := pick(rng)
			if dst != h {
				_ = h.Relocate(bg, ref(rng.IntN(objects)), dst.Name())
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d answered, %d retries, %d hosts crashed", answered.Load(), retried.Load(), kills)
	if kills == 0 {
		t.Fatal("no host crashed: the run checked nothing of the property")
	}

	mu.Lock()
	readers := append([]*Host(nil), live...)
	mu.Unlock()
	for i := range objects {
		// Read through every live host: each read runs after that host's
		// own messages to the object, so none may wait for ever.
		var j Journal
		for _, h := range readers {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			var err error
			j, err = Ask[ReadJournal, Journal](ctx, h, ref(i), ReadJournal{})
			cancel()
			if err != nil {
				for _, x := range readers {
					t.Logf("%s: %+v", x.Name(), x.Stats())
				}
				t.Fatalf("reading object %d through %s: %v", i, h.Name(), err)
			}
		}
		if len(j.Holes) > 0 {
			t.Errorf("object %d applied messages past a lost one: %v", i, j.Holes)
		}
		total := 0
		for _, s := range ss {
			last := j.Last[s.name]
			if last < s.acked[i] {
				t.Errorf("object %d lost %s's answered messages: it holds %d, %d was answered", i, s.name, last, s.acked[i])
			}
			if last > s.sent[i] {
				t.Errorf("object %d holds %s's message %d, which was never sent (sent up to %d)", i, s.name, last, s.sent[i])
			}
			total += last
		}
		if j.Applied != total {
			t.Errorf("object %d applied %d messages for %d distinct ones: a message applied twice", i, j.Applied, total)
		}
	}
}

func slicesDelete(hs []*Host, h *Host) []*Host {
	out := hs[:0]
	for _, x := range hs {
		if x != h {
			out = append(out, x)
		}
	}
	return out
}

// An object taken over from a crashed host keeps that fact when it moves
// on: at a host that joined after the crash (so it never saw the failure),
// a sending host whose earlier messages went to the crashed owner is not
// kept waiting for them for ever — its first message there waits
// TakeoverGapTimeout.
func TestATakeoverGoesWithTheObjectWhenItMoves(t *testing.T) {
	n := NewNetwork(nil)
	cfg := func(name string) Config { return n.With(Config{Name: name, Logger: quietLogger()}) }
	a := startHost(t, cfg("a"), movableKind(newGates()))
	b := startHost(t, cfg("b"), movableKind(newGates()))
	s := startHost(t, cfg("s"), movableKind(newGates()))
	waitViews(t, a, b, s)
	ref := Ref{"counter", "x"}
	if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
		t.Fatal(err)
	}
	for range 5 { // s's stream to x, at a
		if err := Tell(bg, s, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Ask[Get, int](bg, s, ref, Get{}); err != nil || got != 6 {
		t.Fatalf("count on a = %d, %v", got, err)
	}
	n.Kill(a)
	if _, err := Ask[Get, int](bg, b, ref, Get{}); err != nil { // b takes x over
		t.Fatal(err)
	}
	c := startHost(t, cfg("c"), movableKind(newGates())) // joins after the crash
	waitViews(t, b, s, c)
	if err := b.Relocate(bg, ref, "c"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if _, err := Ask[Get, int](ctx, s, ref, Get{}); err != nil {
		t.Fatalf("s's first message after the crash, at c: %v (HeldOutOfOrder %d at c)", err, c.Stats().HeldOutOfOrder)
	}
}
