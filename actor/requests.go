package actor

import (
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
)

// reply is a request's terminal result: an encoded reply frame or an error.
type reply struct {
	buf payload.Buffer
	err error
}

// pending is a request waiting for its reply. Whoever takes it out of the
// table owns its completion: the replier sends exactly one reply on ch, or
// the waiter gives up. Pooled with its timer.
type pending struct {
	ch    chan reply
	timer *time.Timer
}

var pendings = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pending{ch: make(chan reply, 1), timer: t}
}}

// requestTable maps operation ids of outstanding requests to their waiters.
type requestTable struct {
	h      *Host
	shards [16]struct {
		mu sync.Mutex
		m  map[payload.OpID]*pending
		_  [40]byte
	}
}

func (t *requestTable) shard(op payload.OpID) int { return int(op[15] & 15) }

func (t *requestTable) add(op payload.OpID, p *pending) {
	s := &t.shards[t.shard(op)]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[payload.OpID]*pending)
	}
	s.m[op] = p
	s.mu.Unlock()
}

// take removes and returns the waiter for op, or nil if it is gone.
func (t *requestTable) take(op payload.OpID) *pending {
	s := &t.shards[t.shard(op)]
	s.mu.Lock()
	p := s.m[op]
	if p != nil {
		delete(s.m, op)
	}
	s.mu.Unlock()
	return p
}

// complete delivers a reply to the waiter of op. A reply nobody waits for
// any more (late, or a duplicate) is dropped and its frame released; it
// reports whether the reply was delivered.
func (t *requestTable) complete(op payload.OpID, r reply) bool {
	p := t.take(op)
	if p == nil {
		if !r.buf.IsZero() {
			r.buf.Release()
		}
		return false
	}
	p.ch <- r
	return true
}
