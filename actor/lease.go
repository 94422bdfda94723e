package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// The lease part (leaseKeeper): this run's host lease, and jeopardy.
//
// Owns: the lease's generation, its local-time copy and deadline; the
// ownership checks after a lapse; the turns waiting for the lease. Two
// renewers, each on a schedule of its own: the Location Store's lease
// (leaseTick) and the membership's (memberTick), so that neither's slow
// or failing call delays the other's renewal.
// Lock: mu, a leaf (never held across a store call or a send).
// May call: the Location Store, the membership, the owners (marking one
// taken over, posting it a control item), peers (a new run's transport),
// inbound (a new run's per-peer entries), requests (the asks a new run
// ends), the leaves (routes, the event log); the host's Close through
// lifecycle.
// Invariants: no turn of an object starts past the lease's deadline, nor
// after a lapse before the object's ownership was checked; a host closes
// itself only on a fact that its run is over (a newer run holds the
// lease, the membership ended the run), never because a renewal was slow.
//
// # Jeopardy (docs/operations.md, "Jeopardy")
//
// A host whose lease passes its local deadline before a renewal is
// answered is in jeopardy: it starts no turn of its objects (another host
// may own them by now), but it keeps them, their state, what arrives for
// them (within the usual bounds: job permits, lanes, peers' credit) and
// its links, and keeps renewing. When the store answers:
//
//   - the lease had not lapsed by the store's clock (a slow store, a slow
//     answer, a stalled process that still renewed in time), or a silence
//     of the store kept it (relocation.Store, "Silences"): nothing was
//     taken over; turns resume at once, in order, nothing lost;
//   - it had lapsed (Lease.Lapsed): other hosts may have taken some of its
//     objects over. Each object's ownership is checked (Store.Owned)
//     before its next turn: an object still this run's runs on; one that
//     is not is dropped (its in-memory state too; a persistent object's
//     state is in the store) and what it held goes to its new owner.
//
// A host closes itself only when its run is over: the store says a newer
// run of its name holds the lease. When the membership refuses the run's
// renewal (it expired the run, which peers then saw fail, or the run
// left), the host drops that run's objects and joins again as a new run
// (newRun). A host with its private in-memory store (no transport, no
// Store) holds a lease nobody else can take and never enters jeopardy.

// leaseKeeper is this run's host lease: its generation, the local-time
// lease the renewals earned, and the ownership checks a lapse calls for.
// The deadline and the lapse epoch every turn reads are in the gate.
//
// Owns: gen, ttl, every, private (set by Start), local, uncertain and
// jeopardy (the store renewer's: Start, then the lease's own service, one
// goroutine). The membership's renewer touches none of them; a host's
// new run (newRun, joinAgain) is its work.
// Invariants: the gate's deadline never moves past local's deadline; the
// gate's epoch grows by one for each renewal that found the lease lapsed
// (or followed one whose answer was lost), before that renewal's deadline
// is published.
type leaseKeeper struct {
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	events   *eventLog
	gate     *leaseGate
	routes   *routes
	store    relocation.Store
	peers    *peers
	requests *requestTable
	owners   *ownerTable
	in       *inbounds
	ttl      time.Duration // Config.LeaseTTL
	every    time.Duration // Config.LeaseRenew
	private  bool          // the host's private store: nobody else can take its objects

	local         membership.LocalLease // the lease as this host's clock holds it
	uncertain     bool                  // a renewal's outcome is unknown: the next answer is checked as if it said Lapsed
	jeopardy      time.Time             // local time the renewer saw the current jeopardy begin (zero: none)
	storeAway     bool                  // the last store renewal answered failed (the renewer's own: the event log's store-unreachable)
	joining       atomic.Bool           // a new run is attached and not yet in the membership (newRun; Ready reads it)
	memberRenewed time.Time             // local time the last membership renewal answered without an error was sent (memberTick's own)
	memberTTL     time.Duration         // the membership's lease, as its last Join said (memberTick's own)

	// The renewals in flight of each lease (renewals.go): the store's
	// lease's are its renewer's, the membership's its renewer's. flights
	// counts their goroutines; Close ends them and waits for them
	// (stopFlights) once the renewers have stopped.
	storeRenewals  *renewer[relocation.Lease]
	memberRenewals *renewer[membership.Lease]
	flights        sync.WaitGroup
	flightCtx      context.Context // the renewals' parent: ends when Close stops them (stopFlights)
	endFlights     context.CancelFunc

	// Counters of Stats, this part's own.
	checks       atomic.Int64 // ownership checks of all objects after a lapse or a lost answer (Stats.OwnershipChecks)
	jeopardies   atomic.Int64 // times the lease ran out before a renewal was answered (Stats.Jeopardies)
	jeopardyTime spells       // time spent in jeopardy (Stats.JeopardyTime)
	lapses       atomic.Int64 // renewals that found the lease lapsed in the store (Stats.LeaseLapses)
	rejoins      atomic.Int64 // times a gateway joined again as a new run (Stats.Rejoins)
}

// run returns this run's lease generation: its run on the wire, kept as
// the routes' own run (routes.self), which the lower parts read. It
// changes only when the host joins again as a new run (newRun).
func (lk *leaseKeeper) run() uint64 { return lk.routes.selfRunNow() }

// errRunEnded: the host's run is over — a newer run holds the lease (the
// host closes itself), or the membership refuses this run's renewal (it
// joins again as a new run: mayRejoin, newRun).
var errRunEnded = errors.New("the host's run is over")

// init sets the lease up for Start.
func (lk *leaseKeeper) init(private bool) {
	lk.routes.setSelf(lk.name, uint64(time.Now().UnixNano()))
	lk.ttl, lk.every = lk.cfg.LeaseTTL, lk.cfg.LeaseRenew
	lk.private = private
	lk.local = membership.LocalLease{Margin: leaseMargin(lk.ttl, lk.every)}
	var storeObs, memberObs func(time.Duration, error)
	if o, ok := lk.cfg.Observer.(LeaseObserver); ok {
		storeObs = func(d time.Duration, err error) { o.LeaseRenewed(LeaseStore, d, err) }
		memberObs = func(d time.Duration, err error) { o.LeaseRenewed(LeaseMembership, d, err) }
	}
	lk.storeRenewals = newRenewer[relocation.Lease](&lk.flights, storeObs)
	lk.memberRenewals = newRenewer[membership.Lease](&lk.flights, memberObs)
	lk.flightCtx, lk.endFlights = context.WithCancel(context.Background())
	lk.gate.changed, lk.gate.kick = make(chan struct{}), make(chan struct{}, 1)
	if private {
		lk.ttl = privateLease
	}
}

// privateLease is the lease of a host on its private store: no other host
// can take its objects, so it never needs renewing.
const privateLease = 100 * 365 * 24 * time.Hour

// leaseMargin is how much earlier than a renewal's send time + TTL a host
// stops trusting its lease: membership.DefaultMargin, or less for a short
// lease (half of what a renewal leaves).
func leaseMargin(ttl, every time.Duration) time.Duration {
	return min(membership.DefaultMargin, (ttl-every)/2)
}

// renewLease renews this run's lease in the Location Store once and
// waits for the answer: Start's first renewal, before the renewer runs.
// (The renewer, leaseTick, sends its renewals as renewals.go says.)
func (lk *leaseKeeper) renewLease() error {
	sent, run := time.Now(), lk.run()
	l, err := lk.callRenewLease(run)
	return lk.leaseAnswer(renewed[relocation.Lease]{sent: sent, run: run, v: l, err: err}, true)
}

// stopFlights ends the renewals still in flight (renewals.go) and waits
// for their goroutines: Close calls it once the renewers have stopped (no
// renewal starts after), when the host has left the membership and no
// turn starts.
func (lk *leaseKeeper) stopFlights() {
	if lk.endFlights == nil {
		return // never started
	}
	lk.endFlights()
	lk.flights.Wait()
}

// callRenewLease is one renewal of run's lease in the Location Store. It
// may take as long as renewalsInFlight spacings (or StoreTimeout, if
// longer): it keeps the lease live in the store for as long as it is in
// flight, however late its answer comes.
func (lk *leaseKeeper) callRenewLease(run uint64) (relocation.Lease, error) {
	ctx, cancel := context.WithTimeout(lk.flightCtx, lk.renewTimeout())
	defer cancel()
	return lk.store.RenewLease(ctx, lk.name, run, lk.ttl)
}

// renewTimeout bounds one renewal: StoreTimeout, or renewalsInFlight
// spacings of the store's lease, if longer — as long as a renewal keeps
// the lease live in the store where the round trip is that long. (A
// renewal whose context ends on a slow database closes its connection,
// and a new one takes round trips more to open.)
func (lk *leaseKeeper) renewTimeout() time.Duration {
	return max(lk.life.storeTimeout(), renewalsInFlight*lk.storeSpacing())
}

// storeSpacing is how long the Location Store lease's renewal is out
// before another is sent beside it: the lease less its margin, past which
// its answer can no longer extend the lease by this host's clock.
// (It reads only what Start set: the renewals' own goroutines call it.)
func (lk *leaseKeeper) storeSpacing() time.Duration {
	return lk.ttl - leaseMargin(lk.ttl, lk.every)
}

// leaseAnswer judges a renewal's answer (renewLease, leaseTick). The
// host's own deadline follows the local-time rule
// (membership.LocalLease): the send time of the renewal + TTL − margin,
// by this machine's clock — never the deadline the store computed on its
// clock, and a slow answer can only shorten it. Only an alone answer (no
// other renewal in flight: renewals.answered) extends it.
//
// A renewal that finds the lease lapsed raises the epoch at once: every
// owner is checked (checkOwners) before its next turn. So does the first
// alone answer after one whose outcome is unknown (which may have found
// it so), before the new deadline is published. It returns errRunEnded
// (wrapped) when the run is over, and another error when the store could
// not answer (the host stays or goes into jeopardy and asks again).
func (lk *leaseKeeper) leaseAnswer(a renewed[relocation.Lease], alone bool) error {
	if a.run != lk.run() {
		// The host became a new run meanwhile (memberTick): this answer
		// is about the old one. The next renewal is the new run's.
		return nil
	}
	if a.err != nil {
		if errors.Is(a.err, payload.Rejected) {
			return errors.Join(errRunEnded, a.err) // a newer run of the name holds the lease
		}
		// The store may have handled it, and found the lease lapsed, with
		// the answer lost: the next answer is checked as if it said so.
		lk.uncertain = true
		return &payload.Error{Kind: payload.Unavailable, Op: "actor.Host", Detail: "cannot renew the host lease", Err: a.err}
	}
	l := a.v
	lk.gate.betweenRuns.Store(false) // the store holds this run's lease: its rows name it
	if l.Lapsed {
		lk.lapses.Add(1)
	}
	if !alone {
		// Another renewal is in flight: it may have landed first and
		// found the lease lapsed, so this answer cannot extend the lease.
		// A lapse it found starts the checks now.
		if l.Lapsed {
			lk.lapsed()
		}
		return nil
	}
	if l.Lapsed || lk.uncertain {
		lk.uncertain = false
		lk.lapsed()
	}
	lk.local = lk.local.Renewed(a.sent, membership.Lease{Name: lk.name, Gen: a.run, TTL: l.TTL})
	lk.gate.publish(wallNanoOf(lk.local.Deadline())) // monotonic: a wall clock step does not stretch it
	return nil
}

// lapsed notes a lapse: every owner of a kind needs its ownership checked
// before its next turn, and is queued for the check. Called by the
// renewer before it publishes the renewal's deadline.
func (lk *leaseKeeper) lapsed() {
	lk.gate.epoch.Add(1)
	lk.checks.Add(1)
	var all []*owner
	for _, kr := range lk.owners.allKinds() {
		all = append(all, kr.all()...)
	}
	lk.log.Warn("the host's lease lapsed in the Location Store (or a renewal's answer was lost): its objects are checked before they run again (those other hosts took over are dropped)", "objects", len(all))
	for _, o := range all {
		lk.gate.request(o)
	}
}

// checkOwners runs until the host closes (a service of its own): it asks
// the Location Store which of the owners waiting for a check still belong
// to this run (Store.Owned). Those that do are current at the epoch the
// check began in; the others were taken over by other hosts and are
// dropped (owner.takenOver). A move's target that was not yet open when
// the store was asked is left alone (its row named the source; its open
// sets its epoch): its commit may land while the question is out. A
// store that cannot answer is asked again after a renewal interval: the
// owners keep waiting, their messages held.
func (lk *leaseKeeper) checkOwners(stop <-chan struct{}) {
	for {
		select {
		case <-lk.gate.kick:
		case <-stop:
			return
		}
		for {
			owners := lk.gate.takePending()
			if len(owners) == 0 {
				break
			}
			ep := lk.gate.epoch.Load()
			objs := make([]relocation.Object, len(owners))
			incoming := make([]bool, len(owners))
			for i, o := range owners {
				objs[i] = relocation.Object{Kind: o.ref.Kind, ID: o.ref.ID}
				// Before the store is asked: a move's target that commits
				// while the question is out opens with its row the
				// answer no longer sees (the answer says another host's).
				incoming[i] = o.incoming.Load()
			}
			ctx, cancel := lk.life.storeContext()
			owned, err := lk.store.Owned(ctx, lk.name, lk.run(), objs)
			cancel()
			if err != nil {
				lk.log.Warn("the ownership check of a lapsed lease failed; asking again", "objects", len(objs), "err", err)
				for _, o := range owners {
					lk.gate.request(o)
				}
				t := time.NewTimer(lk.every)
				select {
				case <-t.C:
				case <-stop:
					t.Stop()
					return
				}
				continue
			}
			for i, o := range owners {
				switch {
				case owned[i]:
					o.epoch.Store(ep)
				case incoming[i]: // (an owner is incoming from its making, or never)
					// A move's target: its open sets its epoch (and
					// its first turn asks for a check if a lapse came
					// since its commit was sent).
				default:
					o.takenOver()
				}
			}
			lk.gate.broadcast()
		}
	}
}

// leaseTick renews the lease at local time now. A renewal that fails
// leaves the host in (or takes it into) jeopardy, logged once when it
// begins and once when it ends; it reports whether the host's run is over
// (the host then closes itself: Host.Err is ErrLeaseLost).
func (lk *leaseKeeper) leaseTick(now time.Time) (over bool) {
	if lk.life.current() == stateClosed {
		return true // Close runs: it leaves the membership, and nothing is renewed
	}
	if lk.joining.Load() {
		// A new run renews its lease once it joined the
		// membership (memberTick).
		return lk.life.lost()
	}
	lk.noteJeopardy(now)
	run := lk.run()
	return lk.storeRenewals.tick(lk.storeSpacing(), run,
		func() (relocation.Lease, error) { return lk.callRenewLease(run) },
		lk.leaseAnswered, lk.life.closing(),
		lk.local.Deadline(), func() { lk.noteJeopardy(time.Now()) })
}

// noteJeopardy notes, once, a jeopardy that began by now: the lease ran
// out before a renewal was answered. The renewer checks at each tick, and
// at the lease's deadline if that passes while a renewal is out.
func (lk *leaseKeeper) noteJeopardy(now time.Time) {
	if lk.local.Valid(now) || !lk.jeopardy.IsZero() {
		return
	}
	lk.jeopardy = now
	lk.jeopardies.Add(1)
	lk.jeopardyTime.begin(now)
	lk.events.addSelf(EventJeopardy, lk.run(), 0, "")
	lk.log.Warn("the host's lease ran out before a renewal was answered: jeopardy — its objects run no turn, and keep what arrives, until the Location Store answers",
		"deadline", lk.local.Deadline())
}

// leaseAnswered handles a renewal's answer on the lease's renewer: it
// judges it (leaseAnswer) and reports whether the host's run is over.
func (lk *leaseKeeper) leaseAnswered(a renewed[relocation.Lease], alone bool) (over bool) {
	err := lk.leaseAnswer(a, alone)
	switch {
	case err != nil && !errors.Is(err, errRunEnded) && !lk.storeAway:
		lk.storeAway = true
		lk.events.addSelf(EventStoreUnreachable, lk.run(), 0, err.Error())
	case err == nil && lk.storeAway && a.err == nil:
		lk.storeAway = false
		lk.events.addSelf(EventStoreReachable, lk.run(), 0, "")
	}
	switch {
	case errors.Is(err, errRunEnded) && lk.life.current() == stateClosed:
		return true // Close began meanwhile: not a run that ended
	case errors.Is(err, errRunEnded):
		lk.endRun(err)
		return true
	case err != nil && lk.jeopardy.IsZero():
		lk.log.Warn("lease renewal failed; the host goes on while its lease lasts", "err", err, "left", lk.local.Remaining(time.Now()))
	case err == nil && !lk.jeopardy.IsZero() && lk.local.Valid(time.Now()):
		lk.log.Warn("the lease is live again: the host's objects run again", "jeopardy", time.Since(lk.jeopardy).Round(time.Millisecond))
		lk.events.addSelf(EventResumed, lk.run(), 0, "in jeopardy "+time.Since(lk.jeopardy).Round(time.Millisecond).String())
		lk.jeopardy = time.Time{}
		lk.jeopardyTime.end(time.Now())
	}
	return false
}

// memberTick renews this run's membership lease, on a schedule of its own
// beside the Location Store's (a store call that hangs or fails does not
// delay it: after a database outage, the first calls on a pool's dead
// connections fail while the membership's may already succeed). A
// membership that refuses the renewal ended the run — it expired it, and
// peers saw the host fail, or the run left: the host joins again as a
// new run (newRun, joinAgain), dropping the old run's objects. It reports
// whether the host's run is over.
func (lk *leaseKeeper) memberTick(time.Time) (over bool) {
	if lk.life.current() == stateClosed {
		return true // Close runs: it leaves the membership, and nothing is renewed
	}
	if lk.joining.Load() {
		if lk.joinAgain() {
			lk.takeNewRunLease()
		}
		return lk.life.lost() // else asked again at the next tick
	}
	run := lk.run()
	return lk.memberRenewals.tick(lk.memberSpacing(), run,
		func() (membership.Lease, error) { return lk.callRenewMembership(run) },
		lk.memberAnswered, lk.life.closing(), time.Time{}, nil)
}

// memberSpacing is how long the membership lease's renewal is out before
// another is sent beside it: a third of the membership's lease (at least
// a renewal interval). Its answers gate no turn, so they may overlap
// freely, and the shorter spacing keeps one renewal that lands late — a
// round trip spent on a ping of a connection idle for a second, a wait
// for a row lock — from leaving the lease without a renewal for longer
// than the lease: another lands meanwhile. With renewalsInFlight of them
// in flight, they land in time on a round trip of up to the lease plus
// two spacings.
func (lk *leaseKeeper) memberSpacing() time.Duration {
	ttl := lk.memberTTL
	if ttl <= 0 {
		ttl = lk.ttl
	}
	return max(lk.every, ttl/renewalsInFlight)
}

// memberAnswered handles a membership renewal's answer on the
// membership's renewer (every answer is judged: the membership's lease
// gates no turn) and reports whether the host's run is over.
func (lk *leaseKeeper) memberAnswered(a renewed[membership.Lease], _ bool) (over bool) {
	if a.run != lk.run() {
		return lk.life.lost() // about the host's old run: its new run renews its own
	}
	err := lk.judgeMembership(a.sent, a.err)
	switch {
	case err == nil:
		lk.peers.sendAgainToMembers()
		return false
	case !errors.Is(err, errRunEnded):
		lk.log.Warn("membership lease renewal failed; the host goes on and asks again", "err", err)
		return false
	case lk.life.current() == stateClosed:
		return true // Close began meanwhile and left the membership: not a run that ended
	}
	if lk.mayRejoin(err) {
		if lk.newRun(err) && lk.joinAgain() {
			lk.takeNewRunLease()
		}
		return lk.life.lost()
	}
	lk.endRun(err)
	return true
}

// renewMembershipWhileStarting renews the membership lease between the
// steps of Start that wait on the database (the first store renewal, the
// membership watch, the rest of Start), before the renewer's schedule
// runs: the Join's lease must not run out while a slow database or a
// starved process draws Start out. A refusal is acted on by the
// renewer's first tick (memberTick); a failure is logged, and the next
// renewal asks again.
func (lk *leaseKeeper) renewMembershipWhileStarting() {
	if err := lk.renewMembership(); err != nil && !errors.Is(err, errRunEnded) {
		lk.log.Warn("membership lease renewal failed while the host starts; it asks again", "err", err)
	}
}

// renewMembership renews this run's membership lease once. It returns
// the membership's error — transient (the host asks again), or, joined
// with errRunEnded, a refusal that says the run is over: the membership
// expired it (peers saw the host fail), or it left, or a newer run of the
// name joined. The refusal says how long before the membership had last
// renewed the run and how long this renewal took: a stall of the process
// or of the database, or something else.
func (lk *leaseKeeper) renewMembership() error {
	sent, run := time.Now(), lk.run()
	_, err := lk.callRenewMembership(run)
	return lk.judgeMembership(sent, err)
}

// callRenewMembership is one renewal of run's membership lease; like a
// store renewal (callRenewLease), it may be out for several spacings.
func (lk *leaseKeeper) callRenewMembership(run uint64) (membership.Lease, error) {
	ctx, cancel := context.WithTimeout(lk.flightCtx, lk.renewTimeout())
	defer cancel()
	return lk.peers.members.Renew(ctx, lk.name, run)
}

// judgeMembership judges the answer of a membership renewal sent at sent
// (renewMembership says what it returns).
func (lk *leaseKeeper) judgeMembership(sent time.Time, err error) error {
	var ge *membership.GenerationError
	switch {
	case err == nil:
		if sent.After(lk.memberRenewed) {
			lk.memberRenewed = sent
		}
		return nil
	case !errors.Is(err, membership.ErrLeaseExpired) && !errors.Is(err, membership.ErrNotMember) && !errors.As(err, &ge):
		return err
	}
	return errors.Join(errRunEnded, err, fmt.Errorf("the membership last renewed this run's lease %v before this renewal was sent, which it answered %v later (the membership's lease: %v)",
		sent.Sub(lk.memberRenewed).Round(time.Millisecond), time.Since(sent).Round(time.Millisecond), lk.memberTTL))
}

// takeNewRunLease takes the Location Store's lease for the host's new run
// as soon as it joined, rather than at the renewer's next tick. Its
// success ends betweenRuns (so does any renewal of the new run answered);
// the rest of the answer is the renewer's to judge: its next renewal,
// under the new run, finds the lease held.
func (lk *leaseKeeper) takeNewRunLease() {
	ctx, cancel := lk.life.storeContext()
	defer cancel()
	if _, err := lk.store.RenewLease(ctx, lk.name, lk.run(), lk.ttl); err != nil {
		lk.log.Warn("the host's new run cannot take its lease yet; its renewer asks again", "err", err)
		return
	}
	lk.gate.betweenRuns.Store(false) // activations and moves in commit under the new run from now on
}

// mayRejoin reports whether the host whose run ended (why) joins again as
// a new run rather than closing: its run was ended by the membership (its
// lease expired while the host was paused or starved, or it was swept
// out). A newer run of its name (the store's lease, or the membership's
// generation) is another process of that name: the host closes.
func (lk *leaseKeeper) mayRejoin(why error) bool {
	if lk.peers.tr == nil || errors.Is(why, payload.Rejected) {
		return false
	}
	var ge *membership.GenerationError
	if errors.As(why, &ge) && ge.Current > lk.run() {
		return false
	}
	return errors.Is(why, membership.ErrLeaseExpired) || errors.Is(why, membership.ErrNotMember) || ge != nil
}

// newRun makes a host whose run the membership ended a new run of its
// name (why: the membership's refusal): a stall is not a death (DESIGN
// §9c), and the host goes on. Its peers saw the old run fail: every
// object it owned belongs to that run, whose rows any host may take over
// once the new run holds the lease. So it drops them all, as a lapse
// drops the objects another host took over: after the run changed, the
// epoch grows and every owner is checked under the new run
// (checkOwners); none is the new run's, and each is dropped (with its
// in-memory state, as a crash would lose it; a persistent object
// restores from its last write), the messages it held handed on to
// where the object activates next (owner.takenOver). No turn runs
// meanwhile: an owner checked at an older epoch runs none.
//
// An activation may race the change: its Reserve lands under the old
// run (the store still holds the old run's lease). So betweenRuns is
// set first; an activation reads the epoch and then betweenRuns: one
// that read the epoch before it grew is checked, and dropped; one that
// read it after finds betweenRuns set and does not reserve
// (router.activate; a move's commit likewise) until the store holds the
// new run's lease, under which its row names the new run.
//
// The old run's links close as a
// crash's would — its peers saw it fail, and take nothing more from it —
// and the new run attaches under a new generation, higher than every
// earlier one; sends from this host wait for it (runLink). The messages
// the old run's peers had not seen taken go to them again on the new
// run's links, first and in order, marked so that an owner that had one
// drops it (runLink.replace): so the new run's streams go on where the
// old run's stopped, with no gap at the owners. (Over a transport that
// cannot hand them back they are lost, and the streams start afresh, so
// that no owner waits for them.) Its credit at every peer counts from
// zero. The requests it had handed to other hosts end with ErrRejoined
// (they may have run; their replies would go to the old run) — but for
// those whose message is among what goes again, whose answer comes to the
// new run (an owner that had taken one from the old run answers it with
// ErrRejoined: it ran, and its answer went to the old run). Requests
// whose message is still on this host go on. The caller then joins the
// membership as the new run (joinAgain) and renews its lease. It reports
// false if the host is stopping or closing (it closes as the old run), or
// cannot attach again (it closes: Host.Err says why).
//
// It runs on the lease's service, under life.mu: Stop and Close wait for
// it, and it does not start on a host that stops or closes.
func (lk *leaseKeeper) newRun(why error) bool {
	var (
		owned int
		gen   uint64
		r     rejoined
		err   error
	)
	if !lk.life.whileRunning(func() {
		lk.gate.betweenRuns.Store(true)
		owned = lk.owners.count()
		gen = max(uint64(time.Now().UnixNano()), lk.run()+1)
		r, err = lk.peers.tr.replace(func() (transport.Transport, error) {
			t, err := lk.peers.attachRun(gen, closedChan)
			if err == nil {
				lk.in.newRun() // before anything is sent on the new run's links
			}
			return t, err
		}, lk.peers.sentAgain)
		if err == nil {
			lk.routes.newRun(gen, !r.reclaimed)
		}
	}) {
		lk.endRun(why)
		return false
	}
	if err != nil {
		lk.endRun(errors.Join(why, fmt.Errorf("cannot attach as a new run: %w", err)))
		return false
	}
	// Every owner is checked under the new run, and dropped (see above).
	lk.gate.epoch.Add(1)
	for _, kr := range lk.owners.allKinds() {
		for _, o := range kr.all() {
			lk.gate.request(o)
		}
	}
	lk.joining.Store(true)
	lk.rejoins.Add(1)
	lk.events.addSelf(EventRejoined, gen, owned, "the membership had ended its run: "+why.Error())
	lk.peers.noteLostOnRejoin(r.lost)
	failed := lk.requests.failHanded(ErrRejoined, r.asks)
	lk.peers.forgetDirectory() // the new attachment knows no peer yet
	lk.peers.tellDirectory()
	lk.peers.tr.current().sendAllAgain()
	lk.log.Warn("the membership ended this host's run (it was paused or starved past its lease, and its peers saw it fail): it joins again as a new run; the objects of the old run are dropped (their messages handed on), the messages its peers had not taken go to them again, and what cannot go again is lost with the old run (Stats.LostOnRejoin)",
		"why", why, "run", gen, "objects_dropped", owned, "requests_ended", failed, "sent_again", r.again, "lost", r.lost)
	return true
}

// joinAgain joins the membership as the new run newRun made, and reports
// whether it did (a membership that cannot answer is asked again at the
// next tick; the host is not ready meanwhile). A membership that
// names another live run of the name, or a newer one, is a fact: the host
// closes (endRun). It joins under
// life.mu, on a running host only: a Close that began leaves the
// membership after it, never before.
func (lk *leaseKeeper) joinAgain() bool {
	joined := false
	lk.life.whileRunning(func() { joined = lk.joinAgainRunning() })
	return joined
}

// joinAgainRunning is joinAgain while the host is running (under the
// lifecycle's lock: Stop and Close wait for it).
func (lk *leaseKeeper) joinAgainRunning() bool {
	ctx, cancel := lk.life.storeContext()
	defer cancel()
	sent := time.Now()
	ml, err := lk.peers.members.Join(ctx, lk.peers.member(lk.run()))
	if err != nil {
		var ge *membership.GenerationError
		if errors.Is(err, membership.ErrNameTaken) || errors.As(err, &ge) {
			// Another run of the name is live, or joined after this one
			// began: another process of that name. The host closes.
			lk.endRun(errors.Join(errRunEnded, err))
			return false
		}
		lk.log.Warn("the host's new run cannot join the membership yet; asking again", "err", err)
		return false
	}
	lk.memberRenewed, lk.memberTTL = sent, ml.TTL
	lk.joining.Store(false)
	return true
}

// endRun closes the host whose run is over: no turn starts from now on,
// and it closes itself as a crashed host would (Host.Err is ErrLeaseLost),
// without the graceful goodbyes its peers, which saw it fail, no longer
// answer.
func (lk *leaseKeeper) endRun(why error) {
	err := fmt.Errorf("%w: %w", ErrLeaseLost, why)
	if !lk.life.setLost(err) {
		return // the other renewer found the run over first
	}
	lk.log.Error("the host's run is over: another run of its name holds the lease, or the membership ended this run; closing the host", "err", why)
	lk.events.addSelf(EventRunEnded, lk.run(), 0, why.Error())
	lk.gate.publish(1)     // no turn starts from now on
	go lk.life.closeHost() // not here: Close waits for this goroutine
}

// spells sums the time spent in spells of a state (jeopardy), the
// current one included, so that the sum only grows.
type spells struct {
	mu    sync.Mutex
	ended time.Duration // the spells that ended
	since time.Time     // the current spell's start; zero: none
}

// begin starts a spell at now.
func (s *spells) begin(now time.Time) {
	s.mu.Lock()
	s.since = now
	s.mu.Unlock()
}

// end ends the current spell at now.
func (s *spells) end(now time.Time) {
	s.mu.Lock()
	if !s.since.IsZero() {
		s.ended += now.Sub(s.since)
		s.since = time.Time{}
	}
	s.mu.Unlock()
}

// total is the time of every spell up to now.
func (s *spells) total(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.ended
	if !s.since.IsZero() {
		t += now.Sub(s.since)
	}
	return t
}
