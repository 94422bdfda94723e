package actor

import (
	"context"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
)

// The remote moves part (remoteOps): Relocate asked across hosts — this
// host asking the owner's host to move an object, and serving such asks.
//
// Owns: the asks waiting for an answer, the asks served here (bounded
// per asking peer). Lock: remoteOps.mu, a leaf; answers are sent, moves
// run and waiters are woken after it.
// May call: the mover, the owners (the kind asked), peers and the leaves.
// Invariants: every ask completes once (answer, error, the peer gone,
// the caller's deadline); a peer can cancel only its own asks.

// remoteOps are the relocate requests this host waits on (asked) and runs
// for other hosts (serving). Lock order: remoteOps.mu is a leaf.
type remoteOps struct {
	t         *moveTable // the moves' part, whose Relocate it serves and asks
	mu        sync.Mutex
	asked     map[payload.OpID]remoteWaiter
	serving   map[servedOp]context.CancelFunc
	servingBy map[string]int // requests served per asking peer (maxServedPerPeer)
	closed    bool
	wg        sync.WaitGroup // serving goroutines
}

// servedOp names a relocate request served here: the asking peer (its
// authenticated link) and the request's operation id — a peer can cancel
// only its own requests.
type servedOp struct {
	peer string
	op   payload.OpID
}

// maxServedPerPeer bounds the relocate requests of one peer this host
// runs at once (each runs a move on a goroutine of its own); past it a
// request is answered with ErrTooManyRelocations.
const maxServedPerPeer = 256

type remoteWaiter struct {
	peer string
	ch   chan error
}

// relocateVia asks host owner to move ref to target and waits for its
// answer. errHostGone: the owner's host is not on the network.
func (ro *remoteOps) relocateVia(ctx context.Context, owner string, ref Ref, target string) error {
	req := &relocateRequest{op: payload.NewOpID(), ref: ref, target: target}
	if dl, ok := ctx.Deadline(); ok {
		req.deadline = dl.UnixNano()
	}
	ch := make(chan error, 1)
	r := &ro.t.remote
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrShuttingDown
	}
	if r.asked == nil {
		r.asked = map[payload.OpID]remoteWaiter{}
	}
	r.asked[req.op] = remoteWaiter{peer: owner, ch: ch}
	r.mu.Unlock()
	if err := ro.t.peers.sendControl(owner, req); err != nil {
		ro.takeAsked(req.op)
		return errHostGone
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		if _, waiting := ro.takeAsked(req.op); waiting {
			_ = ro.t.peers.sendControl(owner, &relocateCancel{op: req.op}) // the owner's host aborts the move if it can
		} else if err := <-ch; err == nil {
			// The answer came at the same moment: it wins if the move
			// completed (as a local Relocate's does).
			return nil
		}
		return ctxErr(ctx)
	}
}

// takeAsked removes and returns the waiter of relocate request op; ok is
// false if it is gone (answered or ended).
func (ro *remoteOps) takeAsked(op payload.OpID) (w remoteWaiter, ok bool) {
	return ro.takeAskedOf("", op)
}

// takeAskedOf is takeAsked for an answer from peer (unless ""): only the
// host the request was sent to answers it.
func (ro *remoteOps) takeAskedOf(peer string, op payload.OpID) (w remoteWaiter, ok bool) {
	r := &ro.t.remote
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok = r.asked[op]
	if !ok || peer != "" && w.peer != peer {
		return remoteWaiter{}, false
	}
	delete(r.asked, op)
	return w, true
}

// maxRemoteRelocate bounds the deadline of a relocate request from
// another host (the asker's Relocate context, sent along).
const maxRemoteRelocate = 5 * time.Minute

// remoteDeadline is the deadline a relocate request from a peer runs
// under, at now: the one it carries (wall clock, Unix ns; 0: none), at
// most maxRemoteRelocate away — none, or one far off, would let one
// request hold the object moving (no other move, no drain) for as long
// as its target does not answer.
func remoteDeadline(now time.Time, deadline int64) time.Time {
	limit := now.Add(maxRemoteRelocate)
	if deadline != 0 && time.Unix(0, deadline).Before(limit) {
		return time.Unix(0, deadline)
	}
	return limit
}

// onControl handles a relocate request, answer or cancel off the link
// from host from, on the link's goroutine: a request's move runs on a
// goroutine of its own.
func (ro *remoteOps) onControl(from string, ctl any) {
	r := &ro.t.remote
	switch c := ctl.(type) {
	case *relocateRequest:
		ctx, cancel := context.WithDeadline(context.Background(), remoteDeadline(time.Now(), c.deadline))
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			cancel()
			ro.answerRelocate(from, c.op, ErrShuttingDown)
			return
		}
		key := servedOp{peer: from, op: c.op}
		if _, dup := r.serving[key]; dup || r.servingBy[from] >= maxServedPerPeer {
			r.mu.Unlock()
			cancel()
			if !dup { // a repeated request is answered once, when its move ends
				ro.answerRelocate(from, c.op, ErrTooManyRelocations)
			}
			return
		}
		if r.serving == nil {
			r.serving, r.servingBy = map[servedOp]context.CancelFunc{}, map[string]int{}
		}
		r.serving[key] = cancel
		r.servingBy[from]++
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			err := ro.relocateHere(ctx, c.ref, c.target)
			r.mu.Lock()
			delete(r.serving, key)
			if r.servingBy[from]--; r.servingBy[from] == 0 {
				delete(r.servingBy, from)
			}
			r.mu.Unlock()
			cancel()
			ro.answerRelocate(from, c.op, err)
		}()
	case *relocateCancel:
		r.mu.Lock()
		cancel := r.serving[servedOp{peer: from, op: c.op}]
		r.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case *relocateAnswer:
		if w, ok := ro.takeAskedOf(from, c.op); ok {
			var err error
			if c.err != nil {
				err = c.err
			}
			w.ch <- err
		}
	}
}

// relocateHere is a relocate request from another host: the object's
// owner is expected here.
func (ro *remoteOps) relocateHere(ctx context.Context, ref Ref, target string) error {
	if !ro.t.life.acceptsExternal() {
		return ErrShuttingDown
	}
	kr := ro.t.owners.kind(ref.Kind)
	if kr == nil {
		return payload.NewError(payload.NotFound, "actor.Host.Relocate", "host "+ro.t.name+" has no kind "+ref.Kind)
	}
	if target == ro.t.name {
		if kr.local(ref.ID) != nil {
			return alreadyThere(ref, target)
		}
		return ErrNotLocal
	}
	return ro.t.relocateLocal(ctx, kr, ref, target)
}

// answerRelocate sends the result of a relocate request back to the host
// that asked.
func (ro *remoteOps) answerRelocate(to string, op payload.OpID, err error) {
	a := &relocateAnswer{op: op}
	if err != nil {
		a.err = handlerError(err)
	}
	_ = ro.t.peers.sendControl(to, a) // if it left, nobody waits for the answer
}

// remoteClose ends the relocate requests of a closing host: moves run for
// other hosts are aborted (and their answers sent), and Relocate calls
// waiting on other hosts end with ShuttingDown. It waits for the moves.
func (ro *remoteOps) remoteClose() {
	r := &ro.t.remote
	r.mu.Lock()
	r.closed = true
	for _, cancel := range r.serving {
		cancel()
	}
	asked := r.asked
	r.asked = nil
	r.mu.Unlock()
	for _, w := range asked {
		w.ch <- ErrShuttingDown
	}
	r.wg.Wait()
}

// remotePeerGone ends the relocate requests waiting on host peer, which
// left the network without answering.
func (ro *remoteOps) remotePeerGone(peer string) {
	r := &ro.t.remote
	r.mu.Lock()
	var gone []remoteWaiter
	for op, w := range r.asked {
		if w.peer == peer {
			gone = append(gone, w)
			delete(r.asked, op)
		}
	}
	r.mu.Unlock()
	for _, w := range gone {
		w.ch <- payload.NewError(payload.Unavailable, "actor.Host.Relocate",
			"host "+peer+", which owned the object, left before it answered; the move may or may not have happened (Locate tells)")
	}
}
