package actor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The lease part (leaseKeeper): this run's host lease.
//
// Owns: the lease's generation, its local-time copy and deadline.
// Lock: none (the lease's own service renews it; the deadline is atomic).
// May call: the Location Store, the membership, the host's Close through
// lifecycle.
// Invariants: past its lease a host starts no turn and closes itself.

// leaseKeeper is this run's host lease: its generation, the local-time
// lease the renewals earned, and the deadline past which no turn starts.
//
// Owns: gen (set once by Start), local, deadline.
// Lock: none. local is touched only by renewLease, which runs in Start and
// then on the lease's own service (one goroutine); deadline is atomic and
// read by every turn.
// May call: the Location Store and the membership (renewLease), Close when
// the lease is lost.
// Invariants: deadline never moves past local's deadline; once the lease
// is lost deadline is 1 (past) and stays so: the host closes itself, and
// a program that wants it back starts a new run with a new generation.
type leaseKeeper struct {
	h        *Host
	gen      uint64                // this run's lease generation (its run on the wire)
	local    membership.LocalLease // the lease as this host's clock holds it
	deadline atomic.Int64          // local's deadline, wall clock, Unix ns; past it no turn starts
}

// renewLease renews this run's lease in the Location Store. The host's own
// deadline follows the local-time rule (membership.LocalLease): the send
// time of the renewal + LeaseTTL − DefaultMargin, by this machine's clock —
// never the deadline the store computed on its clock, and a slow answer
// can only shorten it. Renewals run one at a time (Start, then the
// renewer), so the lease needs no lock.
//
// A renewal is waited for at most until the lease it extends runs out,
// and one answered after that counts for nothing (errLeaseGap): the store
// may have handled it after the lease had run out by its clock, granting
// a fresh lease while another host took the objects over in between — a
// renewal answered in time was handled before the old lease ended by any
// clock (the store's deadline is at least the previous send time + TTL,
// later than this host's by the margin).
func (lk *leaseKeeper) renewLease() error {
	h := lk.h
	ctx, cancel := h.life.storeContext()
	defer cancel()
	prev := lk.local
	if !prev.Sent.IsZero() {
		var cancelPrev context.CancelFunc
		ctx, cancelPrev = context.WithDeadline(ctx, prev.Deadline())
		defer cancelPrev()
	}
	sent := time.Now()
	_, err := h.store.RenewLease(ctx, h.name, lk.gen, 0)
	if !prev.Sent.IsZero() && !prev.Valid(time.Now()) {
		return errLeaseGap
	}
	if err != nil {
		return &payload.Error{Kind: payload.Unavailable, Op: "actor.Host", Detail: "cannot renew the host lease", Err: err}
	}
	if h.peers.members != nil && h.life.state.Load() != stateCreated {
		if _, err := h.peers.members.Renew(ctx, h.name, lk.gen); err != nil {
			h.log.Error("membership lease renewal failed", "err", err)
		}
	}
	lk.local = lk.local.Renewed(sent, membership.Lease{Name: h.name, Gen: lk.gen, TTL: relocation.LeaseTTL})
	lk.deadline.Store(lk.local.Deadline().UnixNano())
	return nil
}

// leaseTick renews the lease at local time now, unless this run's lease
// ran out before it: then the host may no longer trust that it owns its
// objects (past the lease another host may have taken them over, and the
// store would grant this same run a fresh lease all the same), so it
// stops as a crashed host would — no turn starts from now on, and it
// closes itself (Host.Err is ErrLeaseLost). It reports whether the lease
// was lost. A program that wants the host back starts a new one: a new
// run, with a new lease generation.
func (lk *leaseKeeper) leaseTick(now time.Time) (lost bool) {
	h := lk.h
	if !lk.local.Valid(now) {
		h.log.Error("the host's lease ran out before it was renewed; closing the host", "deadline", lk.local.Deadline())
		lk.deadline.Store(1) // no turn starts from now on
		err := ErrLeaseLost
		h.life.lostErr.Store(&err)
		go h.life.close() // not here: Close waits for this goroutine
		return true
	}
	if err := lk.renewLease(); errors.Is(err, errLeaseGap) {
		return lk.leaseTick(time.Now()) // lost: the lease ran out meanwhile
	} else if err != nil {
		h.log.Error("lease renewal failed", "err", err)
	}
	return false
}

// errLeaseGap: a renewal's answer came after the lease it was to extend
// had run out (renewLease).
var errLeaseGap = errors.New("the lease ran out before its renewal was answered")
