package route

import "github.com/berthrt/berth/relocation"

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
		st.epoch, st.seq = s.nextEpoch, 0
		s.nextEpoch += s.step
	}
	st.seq++
	st.last = now
	return Stamp{Epoch: st.epoch, Seq: st.seq}
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

// Len returns the number of streams.
func (s *Streams) Len() int { return len(s.m) }
