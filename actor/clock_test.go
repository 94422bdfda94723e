package actor

import (
	"sync"
	"testing"
	"time"
)

// deactivations notes the host clock's time of each deactivation.
type deactivations struct {
	noObserver
	clock *manualClock
	mu    sync.Mutex
	at    []time.Time
}

func (d *deactivations) Deactivated(string) {
	d.mu.Lock()
	d.at = append(d.at, d.clock.Now())
	d.mu.Unlock()
}

func (d *deactivations) times() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.at...)
}

// A host's timing rules read the host's clock: an object idle for
// IdleTimeout by that clock passivates, not a moment before — shown with
// a clock the test moves by hand, an hour in a few milliseconds, no test
// sleeping for it.
func TestAnIdleObjectPassivatesByTheHostsClock(t *testing.T) {
	const idle = time.Hour
	c := newManualClock()
	obs := &deactivations{clock: c}
	h := startHost(t, Config{Name: "a", Logger: quietLogger(), IdleTimeout: idle, Observer: obs, clock: c}, counterKind(newGates()))
	at := <-c.armed // the janitor's first round is due (its only schedule: no lease, no transport)
	activated := c.Now()
	ref := Ref{"counter", "x"}
	if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 1 {
		t.Fatalf("Get: %d, %v", n, err)
	}
	for round := 1; len(obs.times()) == 0; round++ {
		if round > 12 {
			t.Fatalf("no passivation after %d janitor rounds (%v of the host's clock)", round-1, c.Now().Sub(activated))
		}
		// Move the host's clock to the round and run it; the next arming
		// says the round's jobs are done.
		c.mu.Lock()
		c.now = at
		tm := c.timer
		c.mu.Unlock()
		tm.ch <- at
		at = <-c.armed
		if c.Now().Sub(activated) > idle {
			waitFor(t, "the idle object to passivate", func() bool { return len(obs.times()) > 0 })
		}
	}
	if got := obs.times()[0].Sub(activated); got <= idle {
		t.Fatalf("the object passivated %v after it last ran, by the host's clock; IdleTimeout is %v", got, idle)
	}
	if n, err := Ask[Get, int](bg, h, ref, Get{}); err != nil || n != 0 {
		t.Fatalf("after its passivation the object counts %d (%v); want a fresh activation (0)", n, err)
	}
}
