package actor

import (
	"context"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
)

// Relocate called on a host that does not own the object asks the owner's
// host to move it: a relocateRequest on the link to that host, answered
// by a relocateAnswer (a relocateCancel withdraws it when the caller's
// context ends first). The owner's host runs the move as its own
// Relocate would, under the caller's deadline.
type (
	relocateRequest struct {
		op       payload.OpID
		ref      Ref
		target   string
		deadline int64 // wall clock, Unix ns; 0: none
	}
	relocateAnswer struct {
		op  payload.OpID
		err *HandlerError // nil: moved
	}
	relocateCancel struct{ op payload.OpID }
)

// remoteOps are the relocate requests this host waits on (asked) and runs
// for other hosts (serving). Lock order: remoteOps.mu is a leaf.
type remoteOps struct {
	mu      sync.Mutex
	asked   map[payload.OpID]remoteWaiter
	serving map[payload.OpID]context.CancelFunc
	closed  bool
	wg      sync.WaitGroup // serving goroutines
}

type remoteWaiter struct {
	peer string
	ch   chan error
}

// relocateVia asks host owner to move ref to target and waits for its
// answer. errHostGone: the owner's host is not on the network.
func (h *Host) relocateVia(ctx context.Context, owner string, ref Ref, target string) error {
	req := &relocateRequest{op: payload.NewOpID(), ref: ref, target: target}
	if dl, ok := ctx.Deadline(); ok {
		req.deadline = dl.UnixNano()
	}
	ch := make(chan error, 1)
	r := &h.remote
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
	if err := h.sendControl(owner, req); err != nil {
		h.takeAsked(req.op)
		return errHostGone
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		if _, waiting := h.takeAsked(req.op); waiting {
			_ = h.sendControl(owner, &relocateCancel{op: req.op}) // the owner's host aborts the move if it can
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
func (h *Host) takeAsked(op payload.OpID) (w remoteWaiter, ok bool) {
	r := &h.remote
	r.mu.Lock()
	w, ok = r.asked[op]
	delete(r.asked, op)
	r.mu.Unlock()
	return w, ok
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
func (h *Host) onControl(from string, ctl any) {
	r := &h.remote
	switch c := ctl.(type) {
	case *relocateRequest:
		ctx, cancel := context.WithDeadline(context.Background(), remoteDeadline(time.Now(), c.deadline))
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			cancel()
			h.answerRelocate(from, c.op, ErrShuttingDown)
			return
		}
		if r.serving == nil {
			r.serving = map[payload.OpID]context.CancelFunc{}
		}
		r.serving[c.op] = cancel
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			err := h.relocateHere(ctx, c.ref, c.target)
			r.mu.Lock()
			delete(r.serving, c.op)
			r.mu.Unlock()
			cancel()
			h.answerRelocate(from, c.op, err)
		}()
	case *relocateCancel:
		r.mu.Lock()
		cancel := r.serving[c.op]
		r.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case *relocateAnswer:
		if w, ok := h.takeAsked(c.op); ok {
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
func (h *Host) relocateHere(ctx context.Context, ref Ref, target string) error {
	if !h.acceptsExternal() {
		return ErrShuttingDown
	}
	kr := h.kinds[ref.Kind]
	if kr == nil {
		return payload.NewError(payload.NotFound, "actor.Host.Relocate", "host "+h.name+" has no kind "+ref.Kind)
	}
	if target == h.name {
		if kr.local(ref.ID) != nil {
			return alreadyThere(ref, target)
		}
		return ErrNotLocal
	}
	return h.relocateLocal(ctx, kr, ref, target)
}

// answerRelocate sends the result of a relocate request back to the host
// that asked.
func (h *Host) answerRelocate(to string, op payload.OpID, err error) {
	a := &relocateAnswer{op: op}
	if err != nil {
		a.err = handlerError(err)
	}
	_ = h.sendControl(to, a) // if it left, nobody waits for the answer
}

// remoteClose ends the relocate requests of a closing host: moves run for
// other hosts are aborted (and their answers sent), and Relocate calls
// waiting on other hosts end with ShuttingDown. It waits for the moves.
func (h *Host) remoteClose() {
	r := &h.remote
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
func (h *Host) remotePeerGone(peer string) {
	r := &h.remote
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
