package actor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The requests part (requestTable): Asks waiting for their reply, and
// replies on their way back.
//
// Owns: the outstanding requests by operation id, and for each the run of
// the host its message was last handed to. Lock: the table's shard
// mutexes, leaves; nothing is sent, and no waiter woken, under them.
// May call: peers (a reply to another host, the peer view) and the
// leaves.
// Invariants: every request completes exactly once (reply, error,
// deadline, cancellation, shutdown, or the failure of the host its
// message was last handed to): whoever takes it out of the table
// completes it.
//
// Callers of a failed host learn at once (docs/architecture.md, "Submit
// and completion"). When this host hands the message of one of its own
// requests to another host — the transport accepted it for that host
// (admission.sendRemote, router.forward), or a move past relay-ready
// carries it there (moveDriver.takeHeld) — the sender notes that host's
// run, as the peer view knows it, in the request's entry (handedTo): a
// field of the pooled pending, written under the shard mutex the Ask
// takes anyway, so a request to a local owner costs nothing more, and
// one to another host one more shard lock. A later hand-over (the message
// came back, or was routed again) replaces it. When a failure fact is
// about run R of host H (the membership watch: peerView.apply), failRun
// takes out of the table exactly the requests whose message was last
// handed to R, and completes each with ErrPeerFailed: the request may
// have run, on H or on a host H forwarded it to (which H's failure does
// not tell: that is H's business, and the request is failed with H). A
// reply that came first took its request already; one that comes after
// is dropped (take arbitrates). The fact and a hand-over may cross: the
// view publishes the failed run before failRun scans, and handedTo checks
// the view after noting the run, so one of the two sees the other — a
// message handed to a run already failed fails at once. A request whose
// message is still on this host (in an owner's queue or outbox, waiting
// for a permit, for credit or room — see peers.waitRoom — or among the
// deferred sends) was handed to no one: it goes on, and is routed afresh
// when it leaves.

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
	// to is the run of the host the request's message was last handed
	// to (handedTo); zero while none. Guarded by its shard's mutex.
	to peerRun
}

var pendings = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pending{ch: make(chan reply, 1), timer: t}
}}

// requestTable maps operation ids of outstanding requests to their waiters.
type requestTable struct {
	view *peerView // what this host knows of its peers (the peers' leaf)
	*hostEnv
	life   *lifecycle
	stats  *hostStats
	peers  *peers
	shards [16]struct {
		mu sync.Mutex
		m  map[payload.OpID]*pending
		_  [40]byte
	}

	// Counters of Stats, this part's own.
	failedWithPeer atomic.Int64 // requests ended because the host their message was handed to failed (Stats.RequestsFailedWithPeer)
}

func (t *requestTable) shard(op payload.OpID) int { return int(op[15] & 15) }

func (t *requestTable) add(op payload.OpID, p *pending) {
	s := &t.shards[t.shard(op)]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[payload.OpID]*pending)
	}
	p.to = peerRun{}
	s.m[op] = p
	s.mu.Unlock()
}

// own returns the operation id of m if m is a request this host asked:
// its reply comes here (read before m is handed on and released).
func (t *requestTable) own(m *payload.Message) (payload.OpID, bool) {
	hv := m.Header()
	if string(hv.ReplyTo()) != t.name {
		return payload.OpID{}, false
	}
	return hv.Op(), true
}

// handedTo notes that the message of request op, this host's, was handed
// to run to (the transport accepted it for that host, or a move carried
// it there). If that run was declared failed already — the fact came
// before the note, and failRun did not see it — the request fails now.
func (t *requestTable) handedTo(op payload.OpID, to peerRun) {
	s := &t.shards[t.shard(op)]
	s.mu.Lock()
	p := s.m[op]
	if p != nil {
		p.to = to
	}
	s.mu.Unlock()
	if p == nil || !t.view.runFailed(to) {
		return
	}
	s.mu.Lock()
	if p = s.m[op]; p != nil && p.to == to {
		delete(s.m, op)
	} else {
		p = nil // answered meanwhile, or handed on again
	}
	s.mu.Unlock()
	if p != nil {
		t.failedWithPeer.Add(1)
		p.ch <- reply{err: peerFailed(to.name)}
	}
}

// failRun completes with ErrPeerFailed every request whose message was
// last handed to run r, which a failure fact is about, and those handed
// to r's host while the view knew no run of it (run 0: whichever run the
// transport reached, and this fact is the first about the host since).
// It runs on the membership watch's goroutine; each shard's mutex is held
// only to take its requests out, and they are completed after it.
func (t *requestTable) failRun(r peerRun) {
	var failed []*pending
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for op, p := range s.m {
			if p.to.name == r.name && (p.to.run == r.run || p.to.run == 0) {
				delete(s.m, op)
				failed = append(failed, p)
			}
		}
		s.mu.Unlock()
	}
	if len(failed) == 0 {
		return
	}
	t.failedWithPeer.Add(int64(len(failed)))
	err := peerFailed(r.name)
	for _, p := range failed {
		p.ch <- reply{err: err} // buffered: its one terminal
	}
	t.log.Info("requests ended: the host their messages were handed to failed (they may have run)",
		"host", r.name, "run", r.run, "requests", len(failed))
}

// failHanded ends every request whose message this host had handed to
// another host with err, but those in except, and returns how many it
// ended: a gateway's new run (lease.go, newRun) — their replies would come
// to the old run. The requests in except are sent again by the new run:
// their answers come to it.
func (t *requestTable) failHanded(err error, except map[payload.OpID]bool) int {
	var failed []*pending
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for op, p := range s.m {
			if p.to != (peerRun{}) && !except[op] {
				delete(s.m, op)
				failed = append(failed, p)
			}
		}
		s.mu.Unlock()
	}
	for _, p := range failed {
		p.ch <- reply{err: err} // buffered: its one terminal
	}
	return len(failed)
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
	if flags&flagError != 0 {
		rerr := rq.decodeWireError(buf)
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
	case <-rq.life.closing():
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
	if string(route) == rq.name {
		rq.complete(op, r)
		return
	}
	if rq.peers.tr == nil {
		rq.log.Warn("reply route unknown; reply dropped", "route", string(route))
		if !r.buf.IsZero() {
			r.buf.Release()
		}
		return
	}
	buf := r.buf
	if r.err != nil {
		var err error
		if buf, err = rq.encodeWireError(op, r.err); err != nil {
			rq.log.Error("error reply not encodable", "err", err)
			return
		}
	}
	err := rq.peers.sendItem(string(route), transport.Reply, buf.Bytes())
	buf.Release()
	if err != nil && !errors.Is(err, ErrPeerBacklog) { // that one is counted and logged
		// The asker's host is not reachable from here (it left the
		// network): nobody there waits for this reply any more.
		rq.peerLogs.replyLost.Warn(rq.log, "reply lost: the asker's host is not reachable", "route", string(route), "err", err)
	}
}
