package actor

import (
	"context"
	"errors"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Location is where an object lives, as the Location Store records it.
type Location struct {
	// Host is the owner host's name.
	Host string
	// ObjectGeneration is stable across moves; OwnerGeneration grows by one
	// on every change of owner (a move, a reactivation after a crash).
	ObjectGeneration, OwnerGeneration uint64
}

// Locate returns where object ref lives, from any host of the network (or
// on a standalone host, itself): the owner host and generations the
// Location Store records. It does not activate the object. While a move is
// under way it returns the owner until the move commits.
//
// A Tell returns once the message is accepted, before the host it went to
// has activated (and recorded) the object: a Locate right after a Tell
// that activates the object may find it not active yet (ErrNotActive).
// An Ask returns after the object ran it, so a Locate after an Ask finds it.
//
// Errors: NotFound (no such kind on this host), ErrNotActive, Unavailable
// (the store did not answer within StoreTimeout or ctx).
func (h *Host) Locate(ctx context.Context, ref Ref) (Location, error) {
	const op = "actor.Host.Locate"
	if h.owners.kind(ref.Kind) == nil {
		return Location{}, payload.NewError(payload.NotFound, op, "no kind "+ref.Kind+" on host "+h.name)
	}
	if ctx.Err() != nil {
		return Location{}, ctxErr(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	defer cancel()
	row, err := h.store.Get(sctx, relocation.Object{Kind: ref.Kind, ID: ref.ID})
	switch {
	case errors.Is(err, relocation.ErrNoRow):
		return Location{}, ErrNotActive
	case err != nil:
		return Location{}, &payload.Error{Kind: payload.Unavailable, Op: op, Detail: "location store", Err: err}
	case row.State == relocation.Preserved || row.Host == "":
		return Location{}, ErrNotActive
	case row.Host != h.name && !h.router.peerLive(row.Host, row.LeaseGen):
		return Location{}, ErrNotActive
	}
	return Location{Host: row.Host, ObjectGeneration: row.ObjectGen, OwnerGeneration: row.OwnerGen}, nil
}

// Addr returns the address other hosts reach this one at — what it
// publishes as its membership Address — when its transport has one (a
// network transport, transport.Directory); else "".
func (h *Host) Addr() string {
	if d := h.peers.tr.current().dir; d != nil {
		return d.Addr()
	}
	return ""
}

// Peers returns the names of the other hosts this host knows from its
// membership, serving or draining, as the membership last reported them,
// sorted; nil for a host without a transport. A host learns of a host
// that joined after it a moment after that host's Start returned (the
// membership's watch), so a program that starts several hosts and wants
// each to place objects on all the others waits until their Peers list
// them.
func (h *Host) Peers() []string {
	return h.peers.view.others(h.name)
}
