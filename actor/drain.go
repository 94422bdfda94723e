package actor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"golang.org/x/sync/errgroup"
)

// The drainer part (drainer): Drain and the stages of a graceful Stop.
//
// Owns: the drain state, the one Stop or Drain that runs, the drain
// rounds. Lock: none (atomics; stopTurn is a one-slot channel).
// May call: every part below it, the lease (its leave stages); the
// host's Close through lifecycle.
// Invariants: the drain state only moves forward; a Stop that returns nil
// dropped nothing it had accepted.

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

// drainer is where the host is in draining and leaving: the drain state,
// the one Stop or Drain that runs, and the drain rounds.
//
// Lock: none; atomics, and stopTurn (one slot) held by the Stop or Drain
// that runs.
// Invariants: draining and leaving only turn on; state only moves forward
// (Serving → … → Stopped).
type drainer struct {
	view *peerView // what this host knows of its peers (the peers' leaf)
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	events   *eventLog
	jobs     *jobQueue
	peers    *peers
	owners   *ownerTable
	moves    *moveTable
	in       *inbounds
	lease    *leaseKeeper
	leaving  atomic.Bool // beginLeave ran
	state    atomic.Int32
	stopTurn chan struct{}  // one slot: held by the Stop or Drain that runs
	rounds   sync.WaitGroup // drain rounds (one may outlive a cut-short Drain briefly)

	// Counters of Stats, this part's own.
	stateDropped atomic.Int64 // objects whose in-memory state a drain ended: no host took them (Stats.DrainStateDropped)
}

// current returns the drain state.
func (dr *drainer) current() DrainState { return DrainState(dr.state.Load()) }

// strandedKind returns a kind that relocates, has objects here, and has no
// other host to go to ("" if none).
func (dr *drainer) strandedKind() string {
	for name, kr := range dr.owners.allKinds() {
		if kr.def().policy != DisableRelocation && len(kr.all()) > 0 && len(dr.peers.otherHostsWithKind(name)) == 0 {
			return name
		}
	}
	return ""
}

// drain is Drain once no other Stop or Drain runs; op names the caller in
// errors. It begins a drain, or goes on with one whose context ended.
func (dr *drainer) drain(ctx context.Context, op string) error {
	switch dr.current() {
	case Serving:
		if !dr.life.acceptsExternal() {
			return payload.NewError(payload.InvalidOperation, op, "the host is not serving")
		}
	case Stopped:
		return dr.life.closeHost() // the drain finished: the host has closed
	}
	if dr.current() <= Relocating {
		// Objects whose state moves need somewhere to go: otherwise refuse,
		// and keep serving, rather than drop their state.
		if name := dr.strandedKind(); name != "" {
			return &payload.Error{Kind: payload.Unavailable, Op: op,
				Detail: "no other host serves kind " + name + ": its objects have nowhere to go (the host keeps serving)", Err: ErrNowhereToDrain}
		}
		if dr.state.CompareAndSwap(int32(Serving), int32(Relocating)) {
			dr.events.addSelf(EventDrainStarted, dr.lease.run(), dr.owners.count(), "")
			dr.life.beginDraining()
			dr.peers.setMemberState(membership.Draining) // peers place no new objects here
		}
		err := dr.relocateAll(ctx, op)
		detail := ""
		if err != nil {
			detail = err.Error()
		}
		dr.events.addSelf(EventDrainEnded, dr.lease.run(), dr.owners.count(), detail)
		if err != nil {
			return err
		}
		dr.state.Store(int32(Relocated))
	}
	dr.state.Store(int32(Draining))
	err := dr.stop(ctx, op)
	if err == nil {
		dr.state.Store(int32(Stopped))
	}
	return err
}

// relocateAll moves the host's objects to other hosts, round after round
// (at most five) until a round finds none; its error is the one that cut
// it short (ctx ended, the host closed, a round failed).
func (dr *drainer) relocateAll(ctx context.Context, op string) error {
	for round := 0; round < 5; round++ {
		n, err := dr.drainRoundUntil(ctx, op)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if ctx.Err() != nil {
		return dr.cutShort(ctx, op)
	}
	return nil
}

// drainRoundUntil runs a drain round on a goroutine of its own and returns
// how many objects it found — or, as soon as ctx ends (or the host
// closes), cutShort's error: not once every move of the round has heard
// of it, which on a starved machine is many goroutines' turns. The
// round's moves then end on their own, aborted or, past the point of no
// return, done; Close waits for them.
func (dr *drainer) drainRoundUntil(ctx context.Context, op string) (int, error) {
	if ctx.Err() != nil {
		return 0, dr.cutShort(ctx, op)
	}
	// No round starts once Close began (it waits for drainers).
	if !dr.life.unlessClosed(func() { dr.rounds.Add(1) }) {
		return 0, closedMidStop(op)
	}
	found := make(chan int, 1)
	go func() {
		defer dr.rounds.Done()
		found <- dr.drainRound(ctx)
	}()
	select {
	case n := <-found:
		return n, nil
	case <-ctx.Done():
		return 0, dr.cutShort(ctx, op)
	case <-dr.life.closing():
		return 0, closedMidStop(op)
	}
}

// drainRound moves or deactivates every object here now, drainWorkers at
// a time; it returns how many it found.
func (dr *drainer) drainRound(ctx context.Context) int {
	var g errgroup.Group
	g.SetLimit(drainWorkers)
	n := 0
	for _, kr := range dr.owners.allKinds() {
		objects := kr.all()
		if len(objects) == 0 {
			continue
		}
		// The hosts to move to, asked of the membership afresh once per
		// round and kind (not once per object: a drain moves thousands).
		var targets []HostLoad
		if kr.def().policy != DisableRelocation {
			targets = dr.peers.otherHostsWithKind(kr.def().name)
		}
		for _, o := range objects {
			if ctx.Err() != nil {
				break // the caller returns: the rest stay, and serve
			}
			if o.incoming.Load() {
				continue
			}
			n++
			g.Go(func() error {
				dr.drainOne(ctx, kr, o, targets)
				return nil
			})
		}
	}
	_ = g.Wait() // drainOne reports nothing: a move that fails is retried or replaced by a deactivation
	return n
}

// drainOne moves one object away, trying targets (the other hosts with
// its kind) in turn; if none takes it, it deactivates the object — unless
// ctx ended: then the object stays, and serves, for a later drain.
//
// The first target is chosen by the object's id, among the targets this
// host's links reach; those whose link is broken (or that are leaving)
// come last. A move whose target's link breaks before the target
// declared relay-ready is aborted when another target's link works — the
// object stays here, and that target is tried next — rather than waiting
// for the link to come back or for the membership to report the target
// gone. With no other target reachable, the move waits, as any move does:
// a slow or cut-off host is not a dead one, and the object keeps its
// state. (A move past relay-ready goes on; the object is no longer here.)
func (dr *drainer) drainOne(ctx context.Context, kr *kindRuntime, o *owner, targets []HostLoad) {
	ref := o.ref
	var lastErr error
	if kr.def().policy != DisableRelocation {
		if len(targets) > 0 {
			tries := drainTries(kr.def().placement, ref.ID, targets)
			n := len(tries)
			order := make([]string, 0, n)
			var later []string
			for _, t := range tries {
				if dr.view.unreachable(t) {
					later = append(later, t)
				} else {
					order = append(order, t)
				}
			}
			order = append(order, later...)
			for i := 0; i < n && ctx.Err() == nil; i++ {
				err := dr.moveTo(ctx, kr, ref, order[i], order[i+1:])
				if errors.Is(err, ErrMoveInProgress) {
					dr.awaitMove(ctx, kr, o) // the next round finds it again if it stayed
					return
				}
				if err == nil || errors.Is(err, ErrNotLocal) {
					return
				}
				if ctx.Err() != nil {
					return
				}
				dr.tallies.drainRetry.Add(dr.log, 0, "object", ref.String(), "err", err)
				lastErr = err
			}
		}
	}
	if ctx.Err() != nil {
		return
	}
	if lastErr != nil && kr.def().policy == PreserveState && !kr.def().persist && o.stateEnded.CompareAndSwap(false, true) {
		// Not silent: the state a move would have kept ends here (counted
		// once: a later round may find the owner before it deactivated).
		dr.stateDropped.Add(1)
		dr.tallies.drainEnded.Add(dr.log, 0, "object", ref.String(), "hosts", len(targets), "err", lastErr)
	}
	o.requestDeactivate()
}

// errTargetLinkDown ends a drain's move whose target's link broke.
var errTargetLinkDown = errors.New("the link to the target broke")

// moveTo moves ref to target for a drain (relocateLocal): the move is
// aborted, if it has not passed relay-ready, when the link to target
// breaks or target is leaving (peerView.whenDown) while the link to one of
// next (the targets to try after it) works.
func (dr *drainer) moveTo(ctx context.Context, kr *kindRuntime, ref Ref, target string, next []string) error {
	mctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	down := dr.view.whenDown(target)
	watch := make(chan struct{})
	defer close(watch)
	go func() {
		select {
		case <-down:
			if slices.ContainsFunc(next, func(t string) bool { return !dr.view.unreachable(t) }) {
				cancel(errTargetLinkDown)
			}
		case <-watch:
		}
	}()
	err := dr.moves.relocateLocal(mctx, kr, ref, target)
	if err != nil && ctx.Err() == nil && context.Cause(mctx) == errTargetLinkDown {
		return fmt.Errorf("%w (%w)", err, errTargetLinkDown)
	}
	return err
}

// awaitMove waits until a move of o that another caller began — a
// Relocate, or one that a drain cut short by its context had asked for
// and that goes on — has ended (o moved away, or reopened here), or ctx
// ends, or the host closes. Deactivating o meanwhile would race with the
// move.
func (dr *drainer) awaitMove(ctx context.Context, kr *kindRuntime, o *owner) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for o.moving.Load() && kr.local(o.ref.ID) == o {
		select {
		case <-ctx.Done():
			return
		case <-dr.life.closing():
			return
		case <-tick.C:
		}
	}
}

// stopTurnTake waits until no other Stop or Drain runs, or ctx ends; it
// returns the function that ends this call's turn.
func (dr *drainer) stopTurnTake(ctx context.Context, op string) (release func(), err error) {
	select {
	case dr.stopTurn <- struct{}{}:
	default:
		select {
		case dr.stopTurn <- struct{}{}:
		case <-ctx.Done():
			return nil, dr.cutShort(ctx, op)
		}
	}
	return func() { <-dr.stopTurn }, nil
}

// cutShort is the error of a Stop or Drain whose context ended before the
// host stopped: of kind DeadlineExceeded, wrapping ctx's error. The host
// keeps running what it has not handed on.
func (dr *drainer) cutShort(ctx context.Context, op string) error {
	n := 0
	for _, kr := range dr.owners.allKinds() {
		n += len(kr.all())
	}
	return &payload.Error{Kind: payload.DeadlineExceeded, Op: op,
		Detail: "the context ended before the host stopped; it keeps serving its " + itoa(n) +
			" objects not handed on yet (Stop again to finish, or Close to drop what is left)", Err: ctx.Err()}
}

// stop is Stop without the drain; op names the caller in errors. It goes
// on from where an earlier stop whose context ended got to.
//
// On a network the host first stops the other hosts from routing here
// (leaving): what they send from now on goes to the objects' new hosts, or
// waits in its sender (up to SendTimeout) until this host has deactivated
// the object — so Stop ends in bounded time however hard they send. What
// they sent before, queued on the links, is still delivered and handled
// (forwarded if its object is gone). If ctx ends first, stop returns
// cutShort's error and the host goes on serving, leaving; nothing is
// dropped.
func (dr *drainer) stop(ctx context.Context, op string) error {
	if !dr.life.beginStopping() && dr.life.current() != stateStopping {
		return dr.life.closeHost() // never started (Close), or closed: returns once closed
	}
	if dr.peers.tr != nil {
		dr.beginLeave()
	}
	// Deactivate every object once nothing is queued; hooks may send to
	// objects that activate meanwhile, so repeat until no object is left.
	for {
		if err := dr.quiesce(ctx, op); err != nil {
			return err
		}
		if dr.owners.deactivateAll() == 0 {
			break
		}
	}
	if dr.peers.tr != nil {
		if err := dr.waitHandedOn(ctx, op); err != nil {
			return err
		}
		// Everything was handed on: peers take this host's leave as no
		// failure (no gap of theirs closes on it).
		dr.peers.setMemberState(membership.Gone)
	}
	return dr.life.closeHost()
}

// beginLeave starts this host's leave: peers stop placing objects here
// (its membership state is Draining), forget their routes here and send
// it no more frames (the transport's Leaving event); what they sent
// before is still delivered. A second call (a Stop after one whose
// context ended) does nothing.
func (dr *drainer) beginLeave() {
	dr.life.beginDraining()
	if dr.leaving.Swap(true) {
		return
	}
	dr.peers.setMemberState(membership.Draining)
	dr.peers.tr.Leave()
}

// quiesce waits until no message is queued, waiting for a permit, or
// running. It polls: the conditions span many owners and there is no single
// event to wait on. It returns cutShort's error if ctx ends first, and
// closedMidStop's if the host closes.
func (dr *drainer) quiesce(ctx context.Context, op string) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if dr.jobs.permits.InUse() == 0 && dr.jobs.permits.Waiters() == 0 && dr.owners.turnsRunning() == 0 &&
			dr.jobs.counters.Queued(mailbox.Application) == 0 && dr.jobs.counters.Queued(mailbox.Lifecycle) == 0 &&
			(dr.peers.tr == nil || dr.in.pending() == 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return dr.cutShort(ctx, op)
		case <-dr.life.closing():
			return closedMidStop(op)
		case <-tick.C:
		}
	}
}

// waitHandedOn waits until everything sent here has been handled, as
// quiesce does.
func (dr *drainer) waitHandedOn(ctx context.Context, op string) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for quiet := 0; ; {
		if dr.in.pendingIn() == 0 && dr.jobs.permits.InUse() == 0 && dr.owners.turnsRunning() == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == 3 { // a few quiet polls: senders that resolved just before the mark
			return nil
		}
		select {
		case <-ctx.Done():
			return dr.cutShort(ctx, op)
		case <-dr.life.closing():
			return closedMidStop(op)
		case <-tick.C:
		}
	}
}

// drainTries is p's order of the targets to move object id to, without
// the names that are not targets or come twice; if p names none of them,
// every target in berth's order (drainOrder): a placement's mistake does
// not end an object's state.
func drainTries(p Placement, id string, targets []HostLoad) []string {
	var tries []string
	for _, t := range p.Drain(id, targets) {
		if slices.ContainsFunc(targets, func(h HostLoad) bool { return h.Name == t }) && !slices.Contains(tries, t) {
			tries = append(tries, t)
		}
	}
	if len(tries) == 0 {
		return drainOrder(id, targets)
	}
	return tries
}

// closedMidStop is the error of a Stop or Drain during which Close closed
// the host: of kind ShuttingDown; what was left was dropped
// (Stats.DroppedOnClose).
func closedMidStop(op string) error {
	return payload.NewError(payload.ShuttingDown, op, "Close closed the host before it stopped gracefully")
}
