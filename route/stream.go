package route

import (
	"slices"

	"github.com/berthrt/berth/relocation"
)

// Object names an object: kind and id.
type Object = relocation.Object

// Streams hands out stamps on the sending side: one stream per object this
// host sends to. A stream starts at sequence 1 in an epoch no earlier
// stream of this Streams used; a stream idle for the idle time is
// forgotten (Prune, or lazily by Next), and the next message for its
// object starts a new epoch. Not safe for concurrent use; a driver may
// shard objects over several Streams whose epochs it keeps apart (first,
// step).
type Streams struct {
	nextEpoch uint64
	step      uint64
	idle      int64
	m         map[Object]*stream
}

type stream struct {
	epoch, seq uint64
	last       int64
	// hands are the host runs this epoch's messages were handed to (their
	// first hops), at most maxHands; many: more than that.
	hands []Hand
	many  bool
}

// Hand is a host run a message was handed to: the host's name and its
// run (its lease generation; 0: unknown).
type Hand struct {
	Host string
	Run  uint64
}

// maxHands bounds the host runs a stream remembers; a stream handed to
// more is never restarted by NextTo.
const maxHands = 4

// note records that a message of the stream's epoch was handed to to.
func (st *stream) note(to Hand) {
	if st.many || slices.Contains(st.hands, to) {
		return
	}
	if len(st.hands) == maxHands {
		st.many, st.hands = true, st.hands[:0]
		return
	}
	st.hands = append(st.hands, to)
}

// NewStreams returns streams whose epochs are first, first+step,
// first+2·step, ... and that forget a stream idle for idle nanoseconds.
// first should grow across restarts of the sending host (a start time),
// so that a restarted host starts fresh.
func NewStreams(first, step uint64, idle int64) *Streams {
	if step == 0 {
		step = 1
	}
	return &Streams{nextEpoch: first, step: step, idle: idle, m: map[Object]*stream{}}
}

// Next stamps the next message for obj.
func (s *Streams) Next(obj Object, now int64) Stamp {
	st := s.m[obj]
	if st == nil {
		st = &stream{}
		s.m[obj] = st
	}
	if st.seq == 0 || now-st.last >= s.idle {
		s.restart(st)
	}
	st.seq++
	st.last = now
	st.many = true // nothing known of where it goes: never restarted by NextTo
	return Stamp{Epoch: st.epoch, Seq: st.seq}
}

// NextTo stamps the next message for obj, which is handed to to, and
// notes where it went. A stream whose every message of its epoch was
// handed to host runs that have failed since (failed reports it; the
// driver's failure facts) starts a new epoch first: the message is
// sequence 1, with no gap before it at the owner, which then has no
// reason to wait for the older ones — each died with the run it was
// handed to, or reached the owner ahead of it. Without a failure, or
// when any of its messages went to a run that has not failed (a forwarder
// may still hand it on), the stream goes on in its epoch: the owner's gap
// rules cover what may still be on its way. (The rule, and why it is
// safe, is the package doc's "After a failure".)
func (s *Streams) NextTo(obj Object, now int64, to Hand, failed func(Hand) bool) Stamp {
	st := s.m[obj]
	if st == nil {
		st = &stream{}
		s.m[obj] = st
	}
	switch {
	case st.seq == 0 || now-st.last >= s.idle:
		s.restart(st)
	case len(st.hands) > 0 && !st.many && allFailed(st.hands, failed):
		s.restart(st)
	}
	st.seq++
	st.last = now
	st.note(to)
	return Stamp{Epoch: st.epoch, Seq: st.seq}
}

// restart starts st in a new epoch.
func (s *Streams) restart(st *stream) {
	st.epoch, st.seq = s.nextEpoch, 0
	st.hands, st.many = st.hands[:0], false
	s.nextEpoch += s.step
}

func allFailed(hands []Hand, failed func(Hand) bool) bool {
	for _, h := range hands {
		if h.Run == 0 || !failed(h) {
			return false
		}
	}
	return true
}

// Handed notes that a message of obj stamped st was handed (again) to to:
// a message routed afresh after its first hop (a retry, a bounce). A
// message of another epoch than the stream's current one changes nothing.
func (s *Streams) Handed(obj Object, st Stamp, to Hand) {
	if cur := s.m[obj]; cur != nil && cur.epoch == st.Epoch {
		cur.note(to)
	}
}

// Prune forgets the streams idle for the idle time and returns how many
// streams are left.
func (s *Streams) Prune(now int64) int {
	for obj, st := range s.m {
		if now-st.last >= s.idle {
			delete(s.m, obj)
		}
	}
	return len(s.m)
}

// Live reports whether obj has a stream not idle at now: a message was
// stamped for it within the idle time.
func (s *Streams) Live(obj Object, now int64) bool {
	st := s.m[obj]
	return st != nil && st.seq > 0 && now-st.last < s.idle
}

// Len returns the number of streams.
func (s *Streams) Len() int { return len(s.m) }
