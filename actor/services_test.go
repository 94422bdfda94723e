package actor

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// manualClock is a clock that moves only when the test advances it. Each
// Reset of its timer is announced on armed, so a test knows the service
// waits before it moves the time.
type manualClock struct {
	mu    sync.Mutex
	now   time.Time
	timer *manualTimer
	armed chan time.Time // the deadline of each Reset
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Unix(1000, 0), armed: make(chan time.Time, 100)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer(d time.Duration) clockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = &manualTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
	return c.timer
}

// advanceToNext waits until the service armed its timer, then moves the
// time to its deadline and fires it; it returns the new time.
func (c *manualClock) advanceToNext(t *testing.T) time.Time {
	t.Helper()
	select {
	case at := <-c.armed:
		c.mu.Lock()
		if at.After(c.now) {
			c.now = at
		}
		now := c.now
		tm := c.timer
		c.mu.Unlock()
		tm.ch <- now
		return now
	case <-time.After(10 * time.Second):
		t.Fatal("the service never armed its timer")
		return time.Time{}
	}
}

type manualTimer struct {
	c  *manualClock
	ch chan time.Time
	at time.Time
}

func (m *manualTimer) C() <-chan time.Time { return m.ch }
func (m *manualTimer) Reset(d time.Duration) {
	m.c.mu.Lock()
	m.at = m.c.now.Add(d)
	at := m.at
	m.c.mu.Unlock()
	m.c.armed <- at
}
func (m *manualTimer) Stop() {}

// The tick's jobs run each at its own period — no job counts the ticks of
// another — and jobs due at the same time run in the order they were
// registered, one after another on the service's goroutine.
func TestServiceJobsRunAtTheirPeriodsInRegistrationOrder(t *testing.T) {
	c := newManualClock()
	s := newServices(c)
	start := c.Now()
	ran := make(chan string, 100)
	sc := &schedule{name: "test"}
	sc.every("fast", 25*time.Millisecond, func(now time.Time) bool {
		ran <- fmt.Sprintf("fast@%v", now.Sub(start))
		return false
	})
	sc.every("second", 50*time.Millisecond, func(now time.Time) bool {
		ran <- fmt.Sprintf("second@%v", now.Sub(start))
		return false
	})
	s.startSchedule(sc)
	var got []string
	for range 4 { // 25, 50, 75, 100 ms
		c.advanceToNext(t)
	}
	<-c.armed // the fourth round's jobs have run: the service waits again
	s.stopAll()
	close(ran)
	for r := range ran {
		got = append(got, r)
	}
	want := "fast@25ms fast@50ms second@50ms fast@75ms fast@100ms second@100ms"
	if strings.Join(got, " ") != want {
		t.Fatalf("jobs ran %v, want %s", got, want)
	}
}

// A job that reports done is not run again, and the others keep their
// period; a schedule whose every job is done ends its goroutine.
func TestAServiceJobThatIsDoneRunsNoMore(t *testing.T) {
	c := newManualClock()
	s := newServices(c)
	var mu sync.Mutex
	runs := map[string]int{}
	sc := &schedule{name: "test"}
	sc.every("once", 10*time.Millisecond, func(time.Time) bool {
		mu.Lock()
		runs["once"]++
		mu.Unlock()
		return true
	})
	sc.every("thrice", 10*time.Millisecond, func(time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		runs["thrice"]++
		return runs["thrice"] == 3
	})
	s.startSchedule(sc)
	for range 3 {
		c.advanceToNext(t)
	}
	ended := make(chan struct{})
	go func() { s.wg.Wait(); close(ended) }()
	select {
	case <-ended: // ended by itself: every job is done
	case <-c.armed:
		t.Fatalf("the schedule armed its timer again after every job was done (runs %v)", runs)
	case <-time.After(10 * time.Second):
		t.Fatal("the schedule did not end when every job was done")
	}
	if runs["once"] != 1 || runs["thrice"] != 3 {
		t.Fatalf("runs = %v, want once 1, thrice 3", runs)
	}
	s.stopAll()
}

// After stopAll returns, no job runs and every service's goroutine has
// ended — loops of their own too.
func TestStopAllEndsEveryServiceAndNoJobRunsAfter(t *testing.T) {
	c := newManualClock()
	s := newServices(c)
	var mu sync.Mutex
	stopped, loopEnded := false, false
	late := 0
	sc := &schedule{name: "test"}
	sc.every("job", time.Millisecond, func(time.Time) bool {
		mu.Lock()
		if stopped {
			late++
		}
		mu.Unlock()
		return false
	})
	s.startSchedule(sc)
	s.start(func(stop <-chan struct{}) {
		<-stop
		mu.Lock()
		loopEnded = true
		mu.Unlock()
	})
	c.advanceToNext(t)
	<-c.armed // the job ran; the service waits again
	s.stopAll()
	mu.Lock()
	stopped = true
	mu.Unlock()
	select {
	case c.timer.ch <- c.Now(): // a tick after the stop: nobody takes it
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	if !loopEnded || late != 0 {
		t.Fatalf("after stopAll: loop ended %v, jobs run late %d", loopEnded, late)
	}
	s.stopAll() // twice is fine
}

// The real host registers its jobs on the schedules: a host with a
// transport runs the tick (its coarse clock advances), and every service
// ends with Close.
func TestHostServicesRunAndEndWithClose(t *testing.T) {
	n := NewNetwork(nil)
	cfg := n.With(Config{Name: "a", Logger: quietLogger()})
	h := startHost(t, cfg, seqKind())
	first := h.routes.clk.Load()
	waitFor(t, "the tick to advance the coarse clock", func() bool { return h.routes.clk.Load() != first })
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h.svc.wg.Wait() // returns: Close ended every service
}
