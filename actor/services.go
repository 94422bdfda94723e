package actor

import (
	"sync"
	"time"
)

// services runs the host's background work: each service is one goroutine,
// started by Host.Start and stopped by Close, that runs either a loop of
// its own (the membership watch) or a table of periodic jobs that the
// parts registered (the tick: route clock, gaps, deferred sends, load
// reports, route pruning, the moves' ticks; the lease; the janitor).
//
// Owns: the services, their stop channel and wait group, and the clock they
// read (a real one; tests inject a manual one).
// Lock: none. A service's jobs run one after another on its goroutine, in
// the order they are due, and jobs due at the same time in the order they
// were registered — so state that only one service's jobs touch needs no
// lock. A slow job delays the other jobs of its service, never those of
// another: work that may wait on the store (the lease) has a service of
// its own.
// May call: the jobs it was given, nothing else.
// Invariants: a service starts at most once; after stop returns no job
// runs and every service's goroutine has ended; a job that reports done is
// not run again.
type services struct {
	clock clock
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	// lanes counts the work of the host's serial lanes (peers' slow lanes,
	// look-up lanes, moves' store lanes): Close waits for it after the
	// links are closed.
	lanes sync.WaitGroup
}

func newServices(c clock) *services {
	if c == nil {
		c = realClock{}
	}
	return &services{clock: c, stop: make(chan struct{})}
}

// job is periodic work: run is called every period until it reports done
// or the service stops. now is the service clock's time.
type job struct {
	name   string
	period time.Duration
	run    func(now time.Time) (done bool)
}

// schedule is a service's table of periodic jobs.
type schedule struct {
	name string
	jobs []job
}

// every adds a periodic job to the table.
func (s *schedule) every(name string, period time.Duration, run func(now time.Time) (done bool)) {
	if period <= 0 {
		panic("actor: job " + name + " of service " + s.name + " has no period")
	}
	s.jobs = append(s.jobs, job{name: name, period: period, run: run})
}

// startSchedule runs the table's jobs on a goroutine of their own. A
// table with no jobs starts nothing.
func (s *services) startSchedule(sc *schedule) {
	if len(sc.jobs) == 0 {
		return
	}
	s.start(func(stop <-chan struct{}) { s.runSchedule(sc, stop) })
}

// start runs loop on a goroutine of its own until stop is closed.
func (s *services) start(loop func(stop <-chan struct{})) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		loop(s.stop)
	}()
}

// stopAll ends every service and waits for their goroutines.
func (s *services) stopAll() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// runSchedule runs the jobs of sc, each at its period from the start: the
// next run of a job is due a period after its last due time, or a period
// from now if it fell behind (a slow job skips runs, as time.Ticker does,
// rather than running them back to back).
func (s *services) runSchedule(sc *schedule, stop <-chan struct{}) {
	start := s.clock.Now()
	due := make([]time.Time, len(sc.jobs))
	live := make([]bool, len(sc.jobs))
	for i, j := range sc.jobs {
		due[i], live[i] = start.Add(j.period), true
	}
	t := s.clock.NewTimer(sc.jobs[0].period)
	defer t.Stop()
	for {
		next, any := time.Time{}, false
		for i := range sc.jobs {
			if live[i] && (!any || due[i].Before(next)) {
				next, any = due[i], true
			}
		}
		if !any {
			return // every job is done
		}
		t.Reset(next.Sub(s.clock.Now()))
		select {
		case <-stop:
			return
		case <-t.C():
		}
		now := s.clock.Now()
		for i, j := range sc.jobs {
			if !live[i] || now.Before(due[i]) {
				continue
			}
			select {
			case <-stop:
				return
			default:
			}
			if j.run(now) {
				live[i] = false
				continue
			}
			if due[i] = due[i].Add(j.period); !due[i].After(now) {
				due[i] = now.Add(j.period)
			}
		}
	}
}

// clock is the time the services read; tests inject a manual one.
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) clockTimer
}

// clockTimer is a timer of a clock: C delivers once the time set by the
// last Reset (or NewTimer) has passed.
type clockTimer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) NewTimer(d time.Duration) clockTimer {
	return realTimer{time.NewTimer(d)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }

// Reset sets the timer to fire after d. Since Go 1.23 a Reset timer's
// channel holds no stale value, so no drain is needed.
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// tickEvery is the period of the host's tick: the coarse route clock, the
// gap deadlines, deferred sends and skip notices, load reports and the
// moves' ticks run at it.
const tickEvery = 25 * time.Millisecond
