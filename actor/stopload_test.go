package actor

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

// Stop (or Drain) of a host that peers keep sending to flat out finishes
// before its deadline, idle or with the machine starved: its time is that
// of handing its objects on, not the senders' rate — new messages are
// routed elsewhere (the objects activate, or move, to another host) or
// refused with an error the sender can act on, and every message whose
// send was accepted runs exactly once.
func TestStopFinishesUnderFlatOutRemoteSendersAndLosesNothingAccepted(t *testing.T) {
	for _, c := range []struct {
		name           string
		movable, drain bool
	}{{"objects deactivate", false, false}, {"objects move", true, false}, {"drain", true, true}} {
		for _, starved := range []bool{false, true} {
			t.Run(c.name+"/"+map[bool]string{false: "idle", true: "starved"}[starved], func(t *testing.T) {
				stopUnderLoad(t, c.movable, c.drain, starved)
			})
		}
	}
}

// stopUnderLoadDeadline is the deadline of the Stop (Drain) under load:
// the one the flat-out case was first seen to overrun by 14 s.
const stopUnderLoadDeadline = 8 * time.Second

func stopUnderLoad(t *testing.T, movable, drain, starved bool) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var handled atomic.Int64
	kind := func() Registrable {
		k := NewKind("load", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
		Handle(k, func(ctx *Context, c *Counter, m Inc) error { c.N += m.By; handled.Add(1); return nil })
		HandleRequest(k, func(ctx *Context, c *Counter, _ Get) (int, error) { return c.N, nil })
		if movable {
			k.PreserveStateJSON()
		}
		return k
	}
	// relay objects live on a; their handler sends the Inc on (a handler's
	// send, which cannot wait for the leaving host in its sender).
	var relayed atomic.Int64
	relay := func() Registrable {
		k := NewKind("relay", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
		HandleRequest(k, func(ctx *Context, c *Counter, m RelayAsk) (int, error) {
			err := Tell(ctx, ctx.Host(), Ref{"load", m.To}, Inc{By: 1})
			if err == nil {
				relayed.Add(1)
			}
			return 0, err
		})
		return k
	}
	n := NewNetwork(nil)
	// Stop must not wait for gaps in a sender's sequence to close by
	// timeout (a message refused by the leaving host after a later one got
	// through leaves one): no GapTimeout comes to the rescue here.
	cfg := Config{Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: quietLogger(), GapTimeout: time.Hour}
	ca, cb := cfg, cfg
	ca.Name, cb.Name = "a", "b"
	a := startHost(t, ca, kind(), relay())
	b := startHost(t, cb, kind(), relay())
	const objects = 64
	ref := func(i int) Ref { return Ref{"load", itoa(i)} }
	for i := 0; i < objects; i++ {
		if _, err := Ask[Get, int](bg, b, ref(i), Get{}); err != nil { // they live on b
			t.Fatal(err)
		}
	}
	var accepted, refused, asked atomic.Int64
	var errMu sync.Mutex
	var badErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // also when the test fails: before the hosts close
	for s := 0; s < 4; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(s)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(objects)
				var err error
				if s == 0 { // through a handler on a (one at a time: handlers' sends do not wait for room)
					if _, err = Ask[RelayAsk, int](bg, a, Ref{"relay", itoa(i % 8)}, RelayAsk{To: itoa(i)}); err != nil {
						t.Errorf("Tell to a relay on a: %v", err)
						return
					}
					continue
				}
				if rng.IntN(16) == 0 {
					ctx, cancel := context.WithTimeout(bg, 20*time.Second)
					_, err = Ask[Get, int](ctx, a, ref(i), Get{})
					cancel()
					if err == nil {
						asked.Add(1)
					}
				} else if err = Tell(bg, a, ref(i), Inc{By: 1}); err == nil {
					accepted.Add(1)
				}
				if err != nil {
					if refused.Add(1) <= 3 {
						t.Logf("refused: %v", err)
					}
					// An error the sender can act on: retry later.
					if !errors.Is(err, payload.Unavailable) && !errors.Is(err, payload.ShuttingDown) && !errors.Is(err, payload.DeadlineExceeded) {
						errMu.Lock()
						badErr = err
						errMu.Unlock()
					}
				}
			}
		}()
	}
	waitFor(t, "load on b", func() bool { return accepted.Load() > 1000 && relayed.Load() > 200 })
	call, stopOrDrain := "Stop", b.Stop
	if drain {
		call, stopOrDrain = "Drain", b.Drain
	}
	var unstarve func()
	if starved {
		unstarve = starve()
	}
	ctx, cancel := context.WithTimeout(bg, stopUnderLoadDeadline)
	defer cancel()
	before := accepted.Load()
	start := time.Now()
	err := stopOrDrain(ctx)
	took := time.Since(start)
	if unstarve != nil {
		unstarve()
	}
	if err != nil {
		halt()
		t.Fatalf("%s under load: %v after %v (deadline %v; accepted while stopping: %d)", call, err, took, stopUnderLoadDeadline, accepted.Load()-before)
	}
	t.Logf("%s under flat-out senders took %v (deadline %v)", call, took, stopUnderLoadDeadline)
	if n := b.Stats().DroppedOnClose; n != 0 {
		halt()
		t.Fatalf("Stats.DroppedOnClose = %d after a Stop that returned nil: its Close dropped accepted work", n)
	}
	// The senders go on: the objects now live on a.
	after := accepted.Load()
	waitFor(t, "sends to succeed after the stop", func() bool { return accepted.Load() > after+1000 })
	halt()
	if badErr != nil {
		t.Fatalf("a send failed with an error the sender cannot act on: %v", badErr)
	}
	// Every accepted Tell runs: while the count still moves (a starved
	// machine catches up slowly) the wait goes on; one that stops short
	// is a loss, reported with both hosts' figures.
	for last, quiet := int64(-1), 0; handled.Load() < accepted.Load()+relayed.Load(); {
		if n := handled.Load(); n != last {
			last, quiet = n, 0
		} else if quiet++; quiet > 25_000 { // 5 s without progress (200 µs polls)
			t.Fatalf("%d Tells accepted (%d from handlers), %d ran, and none ran for 5 s: a: %+v; b: %+v",
				accepted.Load()+relayed.Load(), relayed.Load(), handled.Load(), a.Stats(), b.Stats())
		}
		time.Sleep(200 * time.Microsecond)
	}
	for i := 0; i < objects; i++ { // every queue has run: nothing more can come
		if _, err := Ask[Get, int](bg, a, ref(i), Get{}); err != nil {
			t.Fatal(err)
		}
	}
	if h, acc := handled.Load(), accepted.Load()+relayed.Load(); h != acc {
		t.Fatalf("%d Tells accepted (%d from handlers), %d ran (lost or duplicated)", acc, relayed.Load(), h)
	}
	t.Logf("%d Tells accepted (%d while b stopped), %d from handlers, %d Asks answered, %d refused",
		accepted.Load(), after-before, relayed.Load(), asked.Load(), refused.Load())
}
