package actor

import (
	"context"
	"errors"
	"hash/maphash"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"golang.org/x/sync/errgroup"
)

// DrainState is where a host is in draining (Host.Drain).
type DrainState int32

// Drain states, in order.
const (
	// Serving: the host runs its objects normally.
	Serving DrainState = iota
	// Relocating: the host moves its objects away and activates no new one
	// (new activations go to other hosts).
	Relocating
	// Relocated: every object has moved away (or was deactivated, for kinds
	// that do not relocate); forwarding routes remain.
	Relocated
	// Draining: the host stops gracefully.
	Draining
	// Stopped: the host has stopped.
	Stopped
)

// String returns the state's name.
func (s DrainState) String() string {
	return [...]string{"serving", "relocating", "relocated", "draining", "stopped"}[s]
}

// DrainState returns the host's drain state.
func (h *Host) DrainState() DrainState { return DrainState(h.drainState.Load()) }

// ErrNowhereToDrain: Drain found objects of a kind that relocates and no
// other host serving that kind.
var ErrNowhereToDrain = errors.New("nowhere to drain to")

// strandedKind returns a kind that relocates, has objects here, and has no
// other host to go to ("" if none).
func (h *Host) strandedKind() string {
	for name, kr := range h.kinds {
		if kr.spec.policy != DisableRelocation && len(kr.all()) > 0 && len(h.otherHostsWithKind(name)) == 0 {
			return name
		}
	}
	return ""
}

// drainWorkers bounds the moves a drain runs at once.
const drainWorkers = 64

// Drain moves every owner off this host while traffic continues, then
// stops the host gracefully: Serving → Relocating → Relocated → Draining →
// Stopped. Objects of kinds that relocate move to the other hosts of the
// network (spread by object id over the hosts that have the kind); a move
// that aborts is tried again with another host, and an object that cannot
// move is deactivated instead (its hook runs; it activates again elsewhere
// on its next message), as are objects of kinds with DisableRelocation.
// Messages that arrive meanwhile follow their objects. It returns the
// first error of the final Stop, or ctx's.
//
// A host with objects of a kind that relocates and no other host serving
// that kind has nowhere to drain to: Drain returns Unavailable at once and
// the host keeps serving (Stop deactivates objects instead).
func (h *Host) Drain(ctx context.Context) error {
	if h.tr == nil {
		return ErrNoNetwork
	}
	if !h.acceptsExternal() || h.DrainState() != Serving {
		return payload.NewError(payload.InvalidOperation, "actor.Host.Drain", "the host is not serving")
	}
	// Objects whose state moves need somewhere to go: otherwise refuse, and
	// keep serving, rather than drop their state.
	if name := h.strandedKind(); name != "" {
		return &payload.Error{Kind: payload.Unavailable, Op: "actor.Host.Drain",
			Detail: "no other host serves kind " + name + ": its objects have nowhere to go (the host keeps serving)", Err: ErrNowhereToDrain}
	}
	if !h.drainState.CompareAndSwap(int32(Serving), int32(Relocating)) {
		return payload.NewError(payload.InvalidOperation, "actor.Host.Drain", "the host is not serving")
	}
	h.draining.Store(true)
	h.setMemberState(membership.Draining) // peers place no new objects here
	for round := 0; round < 5 && ctx.Err() == nil; round++ {
		if h.drainRound(ctx) == 0 {
			break
		}
	}
	h.drainState.Store(int32(Relocated))
	h.drainState.Store(int32(Draining))
	err := h.stop(ctx)
	h.drainState.Store(int32(Stopped))
	return err
}

// drainRound moves or deactivates every object here now, drainWorkers at
// a time; it returns how many it found.
func (h *Host) drainRound(ctx context.Context) int {
	var g errgroup.Group
	g.SetLimit(drainWorkers)
	n := 0
	for _, kr := range h.kinds {
		objects := kr.all()
		if len(objects) == 0 {
			continue
		}
		// The hosts to move to, asked of the membership afresh once per
		// round and kind (not once per object: a drain moves thousands).
		var targets []string
		if kr.spec.policy != DisableRelocation {
			targets = h.otherHostsWithKind(kr.spec.name)
		}
		for _, o := range objects {
			if o.incoming.Load() {
				continue
			}
			n++
			g.Go(func() error {
				h.drainOne(ctx, kr, o, targets)
				return nil
			})
		}
	}
	_ = g.Wait() // drainOne reports nothing: a move that fails is retried or replaced by a deactivation
	return n
}

var drainSeed = maphash.MakeSeed()

// drainOne moves one object away, trying targets (the other hosts with
// its kind) in turn; if none takes it, it deactivates the object.
func (h *Host) drainOne(ctx context.Context, kr *kindRuntime, o *owner, targets []string) {
	ref := o.ref
	if kr.spec.policy != DisableRelocation {
		if n := len(targets); n > 0 {
			first := int(maphash.String(drainSeed, ref.ID) % uint64(n))
			for i := 0; i < n && ctx.Err() == nil; i++ {
				err := h.relocateLocal(ctx, kr, ref, targets[(first+i)%n])
				if err == nil || errors.Is(err, ErrNotLocal) || errors.Is(err, ErrMoveInProgress) {
					return
				}
				h.log.Info("drain: move failed; trying another host", "object", ref.String(), "err", err)
			}
		}
	}
	o.requestDeactivate()
}
