package actor

import (
	"context"
	"errors"
	"time"

	"github.com/berthrt/berth/payload"
)

// Relocate moves the object's owner, with its queued messages and (per
// the kind's policy) its state, to the host named target while messages
// keep flowing: none is lost or run twice, per-sender order is kept, every
// request completes once. It may be called on any host of the network:
// when the object lives on another host, that host is asked to move it
// (found through the Location Store, as Locate does), with the same result
// and errors. It returns when the move ended: nil when the target owns the
// object; an error when the move was refused (preflight), aborted before
// the point of no return (the object then runs where it was, nothing
// lost), or abandoned. If ctx ends before the target acknowledged the
// move, the move is aborted; after that point it completes anyway and
// Relocate returns ctx.Err().
//
// Errors: ErrNoNetwork; NotFound for an unknown kind or host;
// InvalidOperation when the kind does not relocate or the object already
// lives on target; ErrNotActive when the object is not active on any host
// (it activates where its next message is sent, or by its kind's
// Placement); ErrMoveInProgress; Rejected (preflight refused); Unavailable
// (aborted, or the owner's host did not answer); ShuttingDown.
func (h *Host) Relocate(ctx context.Context, ref Ref, target string) error {
	const op = "actor.Host.Relocate"
	if !h.life.acceptsExternal() {
		return ErrShuttingDown
	}
	if h.peers.tr == nil {
		return ErrNoNetwork
	}
	kr := h.owners.kind(ref.Kind)
	if kr == nil {
		return payload.NewError(payload.NotFound, op, "no kind "+ref.Kind)
	}
	if target != h.name && !h.peers.knownHost(target) {
		return payload.NewError(payload.NotFound, op, "no host named "+target+" on the network")
	}
	if kr.def().policy == DisableRelocation {
		return payload.NewError(payload.InvalidOperation, op, "kind "+ref.Kind+" does not relocate (DisableRelocation)")
	}
	// The owner may move or leave between the look-up and the request:
	// look again a few times.
	var err error
	for try := 0; try < 4; try++ {
		if o := kr.local(ref.ID); o != nil && !o.incoming.Load() {
			if target == h.name {
				return alreadyThere(ref, target)
			}
			err = h.moves.relocateLocal(ctx, kr, ref, target)
		} else {
			var loc Location
			if loc, err = h.Locate(ctx, ref); err != nil {
				return err
			}
			switch loc.Host {
			case target:
				return alreadyThere(ref, target)
			case h.name:
				err = ErrNotLocal // between an activation and its owner here, or mid-move
			default:
				err = h.moves.remote.relocateVia(ctx, loc.Host, ref, target)
			}
		}
		if !errors.Is(err, ErrNotLocal) && err != errHostGone {
			return err
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
	}
	if err == errHostGone {
		return &payload.Error{Kind: payload.Unavailable, Op: op, Detail: "the owner's host of " + ref.String() + " left before it could be asked", Err: err}
	}
	return err
}

// Pauses returns the pause of every move this host was the source of
// since the last call (at most the newest 65,536), and forgets them. A
// pause runs from the seal here (no turn of the object starts any more) to
// the opening of the object at the target (its turns run there). Hosts
// compare no clocks: the pause is this host's time from the seal to the
// send of the Prepare record, plus the Prepare's way over (half the
// shorter of two round trips of the move on the link, as NTP estimates a
// one-way delay), plus the target's time from the Prepare's arrival to the
// opening, which the target reports in its Committed record. (Should the target not report it, the pause is taken
// up to the Committed's arrival here: an upper bound.)
func (h *Host) Pauses() []time.Duration {
	return h.moves.record.take()
}

// RecentPauses returns the pauses of the last moves (at most 1,024) this
// host was the source of, oldest first, as Pauses works them out, without
// taking them: Pauses still returns them. For dashboards.
func (h *Host) RecentPauses() []time.Duration {
	p := &h.moves.record
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(p.n, recentPauses)
	out := make([]time.Duration, 0, n)
	for i := p.n - n; i < p.n; i++ {
		out = append(out, p.recent[i%recentPauses])
	}
	return out
}

// RecentMoves returns the moves this host was the source of that ended
// after the one numbered after (MoveEntry.Seq), oldest first: at most the
// last 256, moved or not. RecentMoves(0) returns the last 256; a watcher
// passes the last Seq it saw to get only the newer ones (when more than
// 256 ended meanwhile, the older ones are gone: the first Seq returned
// then is above after+1). It takes nothing away, and costs nothing
// unless called.
func (h *Host) RecentMoves(after uint64) []MoveEntry { return h.moves.record.since(after) }

// DrainState returns the host's drain state.
func (h *Host) DrainState() DrainState { return h.drainer.current() }

// Drain moves every owner off this host while traffic continues, then
// stops the host gracefully: Serving → Relocating → Relocated → Draining →
// Stopped. Objects of kinds that relocate move to the other hosts of the
// network (spread by object id over the hosts that have the kind); a move
// that aborts is tried again with another host, and an object that cannot
// move is deactivated instead (its hook runs; it activates again elsewhere
// on its next message), as are objects of kinds with DisableRelocation.
// Messages that arrive meanwhile follow their objects. It returns nil
// once the host has stopped, or the final stop's error.
//
// If ctx ends first, Drain returns promptly with an error of kind
// DeadlineExceeded that wraps ctx.Err() (errors.Is matches
// context.DeadlineExceeded or context.Canceled), and the host does not
// close; nothing accepted is dropped. Moves under way when ctx ended are
// aborted (their objects stay here) or completed, and no object is
// deactivated for want of time. The host stays where the drain got to:
// Relocating — its objects not moved yet keep running and peers keep
// sending to them, but no new object is placed here — or, once every
// object is handed on, Draining, leaving as Stop leaves (see Stop). A
// later Drain or Stop goes on from there; only Close drops work.
//
// A host with objects of a kind that relocates and no other host serving
// that kind has nowhere to drain to: Drain returns Unavailable
// (ErrNowhereToDrain) at once and the host keeps serving (Stop
// deactivates objects instead). Concurrent calls of Drain and Stop run one
// at a time.
func (h *Host) Drain(ctx context.Context) error {
	const op = "actor.Host.Drain"
	if h.peers.tr == nil {
		return ErrNoNetwork
	}
	release, err := h.drainer.stopTurnTake(ctx, op)
	if err != nil {
		return err
	}
	defer release()
	return h.drainer.drain(ctx, op)
}
