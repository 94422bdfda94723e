package actor

import (
	"sync"
	"time"
)

// The host's event log: what happened to the cluster as this host saw it
// — members that joined, drained, left or failed; its own jeopardy,
// resumption, new run or end; the objects it took over from a failed
// host or received from another host's moves; its drains. An operator
// reads it to tell a failure from a deploy (the admin API's events route,
// berth admin events, the dashboard's timeline).
//
// Owns: the ring and the pending counts, under mu (a leaf lock: nothing
// is called while it is held). Invariants: Seq grows by one per event
// recorded, from 1; the ring keeps the newest eventRing of them; a burst
// of one kind about one host (takeovers, objects moved in) is one event
// per eventFlushEvery that counts it, recorded by the tick's flush (or
// Close), never one per object.

// EventKind names what an Event says happened.
type EventKind string

// The kinds of events.
const (
	// EventJoined: Event.Host joined the membership (as run Event.Run).
	EventJoined EventKind = "joined"
	// EventDraining: Event.Host began to drain: it takes no new objects
	// and moves its own to other hosts.
	EventDraining EventKind = "draining"
	// EventLeft: Event.Host left after handing its work on (a drain or a
	// graceful stop).
	EventLeft EventKind = "left"
	// EventFailed: Event.Host's run ended without handing its work on —
	// the membership expired it (a crash, a kill, a stall past its
	// lease) or it left without draining. Its objects are taken over by
	// the hosts their next messages reach. Detail says how it was seen.
	EventFailed EventKind = "failed"
	// EventUnreachable: this host's link to Event.Host broke; it checks
	// the host's lease in the Location Store (a crash is confirmed when
	// the lease runs out: EventFailed).
	EventUnreachable EventKind = "unreachable"
	// EventReachable: the link to Event.Host, unreachable before, is up
	// again.
	EventReachable EventKind = "reachable"
	// EventTookOver: this host took over Event.Count objects whose owner,
	// Event.Host, had failed (one event per second of a burst).
	EventTookOver EventKind = "took-over"
	// EventMovedIn: Event.Count objects moved to this host from
	// Event.Host (a drain, a Relocate, a rebalance; one event per second
	// of a burst).
	EventMovedIn EventKind = "moved-in"
	// EventDrainStarted: this host began to drain, with Event.Count
	// objects.
	EventDrainStarted EventKind = "drain-started"
	// EventDrainEnded: this host's drain stopped moving objects;
	// Event.Count objects were still here (0: every one moved), Detail
	// the error if it was cut short. The host then stops.
	EventDrainEnded EventKind = "drain-ended"
	// EventStoreUnreachable: a renewal of this host's lease in the
	// Location Store failed (Detail: why); the host goes on while its
	// lease lasts, then pauses (EventJeopardy).
	EventStoreUnreachable EventKind = "store-unreachable"
	// EventStoreReachable: the Location Store answers this host's
	// renewals again.
	EventStoreReachable EventKind = "store-reachable"
	// EventJeopardy: this host's lease ran out before the Location Store
	// answered a renewal: its objects run no turn until it does.
	EventJeopardy EventKind = "jeopardy"
	// EventResumed: this host's lease is live again after a jeopardy
	// (Detail: how long it lasted).
	EventResumed EventKind = "resumed"
	// EventRejoined: the membership had ended this host's run (a stall
	// past its lease); it dropped the Event.Count objects of that run and
	// joined again as run Event.Run.
	EventRejoined EventKind = "rejoined"
	// EventRunEnded: this host's run is over (Host.Err: a newer run of
	// its name holds the lease): it closes.
	EventRunEnded EventKind = "run-ended"
)

// Event is one entry of a host's event log (Host.Events).
type Event struct {
	Seq    uint64    `json:"seq"`  // 1 for the host's first event, one more for each next
	Time   time.Time `json:"time"` // when it was recorded (a burst: when its count was)
	Kind   EventKind `json:"kind"`
	Host   string    `json:"host"`             // the host it is about: a member, or this host
	Run    uint64    `json:"run,omitempty"`    // that host's run, when known
	Count  int       `json:"count,omitempty"`  // objects, for the kinds that count them
	Detail string    `json:"detail,omitempty"` // why, or how long
}

// eventRing is how many events a host keeps; eventFlushEvery spaces the
// events that count a burst.
const (
	eventRing       = 1024
	eventFlushEvery = time.Second
)

// eventKey is a burst being counted: its kind and the host it is about.
type eventKey struct {
	kind EventKind
	host string
}

// eventLog is the host's event log.
type eventLog struct {
	self    string
	mu      sync.Mutex
	ring    []Event // the newest eventRing events, oldest first once full (start: the oldest)
	start   int
	seq     uint64
	pending map[eventKey]int // bursts counted since the last flush
	flushed time.Time        // when the last flush recorded bursts
}

// add records an event now.
func (l *eventLog) add(kind EventKind, host string, run uint64, count int, detail string) {
	l.mu.Lock()
	l.addLocked(Event{Time: time.Now(), Kind: kind, Host: host, Run: run, Count: count, Detail: detail})
	l.mu.Unlock()
}

// self records an event about this host.
func (l *eventLog) addSelf(kind EventKind, run uint64, count int, detail string) {
	l.add(kind, l.self, run, count, detail)
}

func (l *eventLog) addLocked(e Event) {
	l.seq++
	e.Seq = l.seq
	if len(l.ring) < eventRing {
		l.ring = append(l.ring, e)
		return
	}
	l.ring[l.start] = e
	l.start = (l.start + 1) % eventRing
}

// count adds n to a burst of kind about host, recorded at the next flush.
func (l *eventLog) count(kind EventKind, host string, n int) {
	l.mu.Lock()
	if l.pending == nil {
		l.pending = map[eventKey]int{}
	}
	l.pending[eventKey{kind, host}] += n
	l.mu.Unlock()
}

// flush records each burst counted since the last flush as one event. A
// flush less than eventFlushEvery after the one before records nothing
// (the bursts wait for the next), whenever the tick that calls it runs:
// so a burst is at most one event per eventFlushEvery, on a late or
// starved schedule too. The final flush, at the close, records what is
// left at once.
func (l *eventLog) flush(final bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.pending) == 0 || !final && !l.flushed.IsZero() && now.Sub(l.flushed) < eventFlushEvery {
		return
	}
	l.flushed = now
	for k, n := range l.pending {
		l.addLocked(Event{Time: now, Kind: k.kind, Host: k.host, Count: n})
	}
	clear(l.pending)
}

// since returns the events after seq that the ring still holds, oldest
// first.
func (l *eventLog) since(seq uint64) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for i := range l.ring {
		e := l.ring[(l.start+i)%len(l.ring)]
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}
