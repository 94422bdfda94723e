package actor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The requests part (requestTable): Asks waiting for their reply, and
// replies on their way back.
//
// Owns: the outstanding requests by operation id. Lock: the table's shard
// mutexes, leaves.
// May call: peers (a reply to another host) and the leaves.
// Invariants: every request completes exactly once (reply, error,
// deadline, cancellation or shutdown).

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

// onReply completes the request op with a reply frame from a link.
func (rq *requestTable) onReply(op payload.OpID, flags uint8, buf payload.Buffer) {
	h := rq.h
	if flags&flagError != 0 {
		rerr := decodeWireError(h, buf)
		buf.Release()
		rq.complete(op, reply{err: rerr})
		return
	}
	rq.complete(op, reply{buf: buf})
}

// await waits for the request's terminal. If the waiter gives up but finds
// the reply already taken by its deliverer, the reply came first and is
// returned.
func (rq *requestTable) await(ctx context.Context, op payload.OpID, p *pending, left time.Duration) (reply, error) {
	h := rq.h
	select {
	case r := <-p.ch: // already answered (a turn run inline, or a fast owner)
		pendings.Put(p)
		return r, nil
	default:
	}
	p.timer.Reset(left)
	var err error
	select {
	case r := <-p.ch:
		p.timer.Stop()
		pendings.Put(p)
		return r, nil
	case <-ctx.Done():
		err = ctxErr(ctx)
	case <-p.timer.C:
		err = ErrRequestTimeout
	case <-h.life.done:
		err = ErrShuttingDown
	}
	p.timer.Stop()
	if rq.take(op) == nil {
		r := <-p.ch
		pendings.Put(p)
		return r, nil
	}
	pendings.Put(p)
	return reply{}, err
}

// routeReply delivers a reply to the asker's host. Replies take no permit.
func (rq *requestTable) routeReply(route []byte, op payload.OpID, r reply) {
	h := rq.h
	if string(route) == h.name {
		rq.complete(op, r)
		return
	}
	if h.peers.tr == nil {
		h.log.Warn("reply route unknown; reply dropped", "route", string(route))
		if !r.buf.IsZero() {
			r.buf.Release()
		}
		return
	}
	buf := r.buf
	if r.err != nil {
		var err error
		if buf, err = encodeWireError(h, op, r.err); err != nil {
			h.log.Error("error reply not encodable", "err", err)
			return
		}
	}
	err := h.peers.sendItem(string(route), transport.Reply, buf.Bytes())
	buf.Release()
	if err != nil && !errors.Is(err, ErrPeerBacklog) { // that one is counted and logged
		// The asker's host is not reachable from here (it left the
		// network): nobody there waits for this reply any more.
		h.peerLogs.replyLost.Warn(h.log, "reply lost: the asker's host is not reachable", "route", string(route), "err", err)
	}
}
