package actor

import (
	"sync"
	"time"
)

// The renewals of a lease (renewals, renewer): when the next one is sent,
// and which answers may stand for the lease.
//
// A renewal is worth its answer to the host only while the answer can
// still extend the lease by the host's clock: until a lease, less the
// margin, after it was sent. After that it is worth only its landing in
// the store, which keeps the lease live there however late the answer
// comes back. So a renewer sends one renewal at a time while the store
// answers within that window, as before; once the newest renewal in
// flight has been out that long (the spacing), it sends another beside
// it, up to renewalsInFlight. On a store whose round trip is longer than
// the lease (a database answering in 5 s, against the 3.5 s default), the
// renewals still land there once per spacing, and no host finds the lease
// run out — nobody takes the host's objects over, and the membership does
// not end its run — while the host waits in jeopardy for an answer that
// comes in time.
//
// Owns: the renewals in flight and their send times (the schedule's
// goroutine's: one tick at a time). Lock: none. May call: the call and
// handler its tick is given, nothing else.
// Invariants: at most renewalsInFlight are in flight; a second is sent
// only once the newest has been out for the spacing; an answer is alone
// (it may stand for the lease) only if no other renewal is in flight when
// it is handled: every renewal that could have landed in the store before
// it has been answered, and handled, by then. Answers are handled in the
// order they come.
type renewals struct {
	out  []flight // in flight, in the order sent
	next uint64   // the id of the next renewal
}

// flight is one renewal in flight.
type flight struct {
	id   uint64
	sent time.Time
}

// renewalsInFlight bounds the renewals of one lease in flight at once: with
// a spacing of the lease less its margin (2.5 s by default), the renewals
// land in time on a store whose round trip is up to three spacings.
const renewalsInFlight = 3

// due reports whether a renewal is to be sent at now: none is in flight,
// or fewer than renewalsInFlight are and the newest has been out for
// spacing.
func (r *renewals) due(now time.Time, spacing time.Duration) bool {
	switch {
	case len(r.out) == 0:
		return true
	case len(r.out) >= renewalsInFlight:
		return false
	}
	return now.Sub(r.out[len(r.out)-1].sent) >= spacing
}

// send notes a renewal sent at now and returns its id.
func (r *renewals) send(now time.Time) uint64 {
	r.next++
	r.out = append(r.out, flight{id: r.next, sent: now})
	return r.next
}

// answered notes the answer of renewal id and reports whether it is alone:
// no other renewal is in flight. Only an alone answer may extend the
// lease: a renewal still in flight could have landed first and found the
// lease run out.
func (r *renewals) answered(id uint64) (alone bool) {
	for i, f := range r.out {
		if f.id == id {
			r.out = append(r.out[:i], r.out[i+1:]...)
			break
		}
	}
	return len(r.out) == 0
}

// inFlight returns how many renewals are in flight.
func (r *renewals) inFlight() int { return len(r.out) }

// renewer sends one lease's renewals, as renewals decides, each on a
// goroutine of its own, and hands their answers to the lease's handler in
// the order they come, on the schedule's goroutine (which owns the
// lease's state: no lock). A tick that sends a renewal waits for its
// answer until it has been out for the spacing, handling the others'
// answers meanwhile; answers that come between ticks are handled at the
// next one.
type renewer[A any] struct {
	plan    renewals
	answers chan renewed[A]                     // room for every renewal in flight: a renewal's goroutine never waits
	flights *sync.WaitGroup                     // the renewals' goroutines (the host's Close waits for them)
	observe func(took time.Duration, err error) // told of each call as it returns (LeaseObserver); nil: none
}

// renewed is the answer of one renewal: what the call returned, for the
// run it was sent under, sent at sent.
type renewed[A any] struct {
	id   uint64
	sent time.Time
	run  uint64
	v    A
	err  error
}

func newRenewer[A any](flights *sync.WaitGroup, observe func(time.Duration, error)) *renewer[A] {
	return &renewer[A]{answers: make(chan renewed[A], renewalsInFlight), flights: flights, observe: observe}
}

// tick handles the answers that came since the last tick, sends a renewal
// if one is due (call, for run; its send time is this machine's clock
// just before), and waits for its answer for at most spacing, or until
// closing is closed. handle judges an answer (alone: it may stand for the
// lease) and reports whether the run is over; tick then returns true at
// once. If the wait passes deadline (not zero), atDeadline runs then: the
// lease's own deadline, which may pass while a renewal is out.
func (rn *renewer[A]) tick(spacing time.Duration, run uint64, call func() (A, error),
	handle func(a renewed[A], alone bool) (over bool), closing <-chan struct{},
	deadline time.Time, atDeadline func()) (over bool) {
	for {
		select {
		case a := <-rn.answers:
			if handle(a, rn.plan.answered(a.id)) {
				return true
			}
			continue
		default:
		}
		break
	}
	now := time.Now()
	if !rn.plan.due(now, spacing) {
		return false
	}
	id := rn.plan.send(now)
	rn.flights.Add(1)
	go func() {
		defer rn.flights.Done()
		v, err := call()
		if rn.observe != nil {
			rn.observe(time.Since(now), err)
		}
		rn.answers <- renewed[A]{id: id, sent: now, run: run, v: v, err: err}
	}()
	wait := time.NewTimer(spacing)
	defer wait.Stop()
	var passed <-chan time.Time
	if !deadline.IsZero() && deadline.Before(now.Add(spacing)) {
		dl := time.NewTimer(time.Until(deadline))
		defer dl.Stop()
		passed = dl.C
	}
	for {
		select {
		case <-passed:
			atDeadline()
			passed = nil
		case a := <-rn.answers:
			if handle(a, rn.plan.answered(a.id)) {
				return true
			}
			if a.id == id {
				return false
			}
		case <-wait.C:
			return false // it stays in flight: its answer is handled when it comes
		case <-closing:
			return false
		}
	}
}
