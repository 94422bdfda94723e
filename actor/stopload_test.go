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

// Stop of a host that peers keep sending to flat out finishes in bounded
// time: new messages are routed elsewhere (the objects activate on another
// host) or refused with an error the sender can act on, and every message
// whose send was accepted runs exactly once.
func TestStopFinishesUnderFlatOutRemoteSendersAndLosesNothingAccepted(t *testing.T) {
	for _, movable := range []bool{false, true} {
		name := "objects deactivate"
		if movable {
			name = "objects move"
		}
		t.Run(name, func(t *testing.T) { stopUnderLoad(t, movable) })
	}
}

func stopUnderLoad(t *testing.T, movable bool) {
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
	ctx, cancel := context.WithTimeout(bg, 30*time.Second) // a hang, not a measurement
	defer cancel()
	before := accepted.Load()
	if err := b.Stop(ctx); err != nil {
		halt()
		t.Fatalf("Stop under load: %v (accepted while stopping: %d)", err, accepted.Load()-before)
	}
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
	waitFor(t, "every accepted Tell to run", func() bool { return handled.Load() >= accepted.Load()+relayed.Load() })
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
