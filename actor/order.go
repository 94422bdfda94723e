package actor

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// Order per sending host (docs/architecture.md, "Order, routing and transports"; the rules are package route's).
//
// With a transport, every message a host sends to an object is stamped — its
// origin (this host), an epoch and a sequence number per object — in the
// step that routes it (stamp), and keeps that stamp however it travels:
// forwarded, relayed, captured in a move record, sent back to its origin.
// Each object owner runs arrivals through its route.Inbox (owner.admit),
// which decides; this file carries its steps out: a message whose turn
// has come enters the mailbox, then those held behind it; one ahead of its
// turn is held, encoded and undecoded, without its job permit; a skip
// notice (a frame with flagSkip, sent by whichever host dropped a stamped
// message: dropped) closes its gap at once. A gap nobody closes waits —
// however long — until a failure fact covers it: the membership reports a
// host gone (failed), or the object was taken over from a crashed owner;
// then it closes after Config.GapTimeout (TakeoverGapTimeout for a
// takeover), counted (Stats.GapsClosed). A sender past the reorder bound
// is logged and counted; nothing is released out of order for it.
//
// While an owner is sealed for a move, or is a move's incoming owner,
// its inbox is frozen: arrivals go to the mailbox's hold unchecked, and
// are checked where the object opens (the target, or the source after an
// abort). The order state travels in the move record, and rests in the
// Location Store row while the object is deactivated.
//
// Hosts without a transport stamp nothing: objects never move there.

// flagSkip marks a skip notice: a frame that carries a stamp and nothing
// to run.
const flagSkip uint8 = 4

// Bounces (how often a message went back to its origin) are kept in the
// flags' upper nibble.
const (
	bounceShift = 4
	bounceMask  = 0xF0
)

func bouncesOf(flags uint8) uint8 { return flags >> bounceShift }

// DefaultGapTimeout is how long, after the membership reports a host gone,
// an owner still waits for the messages missing in its gaps (they may be
// on live links) before it gives up on them (Config.GapTimeout). No gap
// closes while every host is up.
const DefaultGapTimeout = 5 * time.Second

// DefaultTakeoverGapTimeout is the wait of the gaps of an object taken
// over from a crashed owner, open or opening soon after its activation
// (Config.TakeoverGapTimeout): their messages died with that owner.
const DefaultTakeoverGapTimeout = 250 * time.Millisecond

// streamIdle is how long a host keeps an idle sending stream; owners keep
// an idle sender's state twice as long (route.Order.Forget), so a sender
// always forgets first.

func streamIdleFor(follow time.Duration) time.Duration { return 2 * follow }

// stamp gives m, a message this host sends to t's object, its place in
// this host's stream for the object, unless it has one (a retry).
func (ad *admission) stamp(t target, m *payload.Message) {
	h := ad.h
	if h.peers.tr == nil || t.kr == nil {
		return
	}
	if hv := m.Header(); hv.Seq() != 0 || string(hv.Origin()) != h.name {
		return // stamped already, or another host's message
	}
	obj := t.obj()
	sh := h.routes.streamShard(obj)
	sh.mu.Lock()
	st := sh.s.Next(obj, h.routes.coarseNow())
	sh.mu.Unlock()
	m.Stamp(st.Epoch, st.Seq)
}

// hint applies a route hint: obj runs on host with owner generation gen.
// A host that runs obj itself ignores it.
func (rt *router) hint(obj relocation.Object, host string, gen uint64) {
	h := rt.h
	if host == h.name {
		return
	}
	if kr := h.owners.kinds[obj.Kind]; kr == nil || kr.local(obj.ID) != nil {
		return
	}
	h.routes.update(obj, host, gen)
}

// tickEvery is the period of the host's tick: the coarse route clock, the
// gap deadlines, deferred sends and skip notices, load reports and the
// moves' ticks run at it.
const tickEvery = 25 * time.Millisecond

// orderJobs registers the order's periodic jobs on the host's tick: the
// coarse clock first (the others read it), the gaps' deadlines, skip
// notices waiting for their host, and the pruning of idle routes and
// senders.
func (rt *router) orderJobs(tick *schedule) {
	h := rt.h
	tick.every("advance the coarse clock", tickEvery, func(time.Time) bool { h.routes.clk.Store(nanotime()); return false })
	tick.every("close the gaps past their deadline", tickEvery, func(time.Time) bool { h.router.closeGaps(); return false })
	tick.every("send the skip notices that waited", tickEvery, func(time.Time) bool { h.router.retrySkips(); return false })
	tick.every("prune idle routes", time.Second, func(time.Time) bool { h.routes.prune(nanotime()); return false })
	tick.every("forget idle senders", 10*time.Second, func(time.Time) bool { h.owners.forgetIdleSenders(); return false })
}

// admitHow says how an item enters its owner.
type admitHow uint8

const (
	// admitWait: lane limits apply; when full, the caller gets ErrFull and
	// a channel to wait on.
	admitWait admitHow = iota
	// admitInline: as admitWait, and an idle owner runs the turn on the
	// calling goroutine (Config.InlineAsk).
	admitInline
	// admitOverflow: no lane limits (the item was granted its permit
	// asynchronously, or comes from a link or a move).
	admitOverflow
)

// admit runs e, an application item for owner o, through the owner's
// inbox and admits it (see the top of this file). Nothing that can call
// back into an admission (returning a permit: Permits.Release may grant it
// to a waiting source at once) happens under seqMu. ran and room are those
// of the mailbox's AdmitOrRun and AdmitOrWait. On an error nothing changed
// and e stays the caller's; otherwise e is the owner's (held, or admitted,
// or — a skip notice — ended).
func (o *owner) admit(e *mailbox.Envelope, how admitHow) (ran bool, room <-chan struct{}, err error) {
	h := o.host
	if h.cfg.IdleTimeout > 0 {
		// Idleness counts from the last accepted message (the coarse clock
		// ticks only with a transport).
		if h.peers.tr != nil {
			o.lastActive.Store(h.routes.coarseNow())
		} else {
			o.lastActive.Store(nanotime())
		}
	}
	hv := e.Msg.Header()
	st := route.Stamp{Epoch: hv.Epoch(), Seq: hv.Seq()}
	if st.IsZero() || o.kr == nil {
		return o.admitBox(e, how)
	}
	// The origin's bytes are lent by the frame, which may be released as
	// soon as e is admitted: keep a copy (on the stack).
	var originBuf [64]byte
	origin := append(originBuf[:0], hv.Origin()...)
	skip := hv.Flags()&flagSkip != 0
	now := h.routes.coarseNow()

	o.seqMu.Lock()
	var claimed bool
	var a orderAfter
	switch step, over := o.inbox.Offer(origin, st, skip, e, now); step {
	case route.StepRefuse:
		o.seqMu.Unlock()
		return false, nil, mailbox.ErrClosed
	case route.StepKeep:
		// Sealed for a move, or incoming: the hold keeps it, unchecked.
		err = o.mb.AdmitOverflow(e)
		o.seqMu.Unlock()
		return false, nil, err
	case route.StepHeld:
		if p := e.TakePermit(); p != nil {
			a.permits = append(a.permits, p)
		}
		if over {
			a.over = true
			if o.pushBackLocked(origin) {
				a.pushTo = string(origin)
			}
		}
	case route.StepSkipped:
		a.stray = append(a.stray, e)
	default:
		if how == admitInline {
			claimed, room, err = o.mb.AdmitOrClaim(e)
		} else {
			room, err = o.admitBoxRoom(e, how)
		}
		if err != nil {
			o.seqMu.Unlock()
			return false, room, err
		}
		o.inbox.Admitted(origin, st, now)
	}
	o.readyLocked(&a, nil)
	o.seqMu.Unlock()
	h.router.orderDone(o, a)
	if claimed {
		o.mb.RunClaimed(e)
		return true, nil, nil
	}
	return false, nil, nil
}

// admitBox admits an item that is not ordered.
func (o *owner) admitBox(e *mailbox.Envelope, how admitHow) (bool, <-chan struct{}, error) {
	if how == admitInline {
		return o.mb.AdmitOrRun(e)
	}
	room, err := o.admitBoxRoom(e, how)
	return false, room, err
}

func (o *owner) admitBoxRoom(e *mailbox.Envelope, how admitHow) (<-chan struct{}, error) {
	if how == admitOverflow {
		return nil, o.mb.AdmitOverflow(e)
	}
	return o.mb.AdmitOrWait(e)
}

// orderAfter is what an order step leaves for after the owner's seqMu:
// items to end (skip notices taken in) or to route again (the owner closed
// meanwhile); permits of held messages to give back; the counts.
type orderAfter struct {
	stray   []*mailbox.Envelope
	permits []*mailbox.Permits
	counts  route.Counts
	over    bool     // the sender is past the reorder bound
	pushTo  string   // the sender to tell to pause (pressure.go)
	resume  []string // the senders to tell to resume
}

// readyLocked takes the held messages whose turn came, in order: skip
// notices (taken in now) go to a.stray to be ended; the others are
// admitted — or, with into, appended to *into (the mailbox reopens with
// them). Then it collects the counts and notes what is still held.
func (o *owner) readyLocked(a *orderAfter, into *[]*mailbox.Envelope) {
	for {
		e, ok := o.inbox.Next()
		if !ok {
			break
		}
		switch {
		case e.Msg.Header().Flags()&flagSkip != 0:
			a.stray = append(a.stray, e)
		case into != nil:
			*into = append(*into, e)
		case o.mb.AdmitOverflow(e) != nil:
			a.stray = append(a.stray, e)
		}
	}
	a.counts.Add(o.inbox.Order().TakeCounts())
	o.noteHeldLocked()
	a.resume = append(a.resume, o.relievedLocked(false)...)
}

// orderDone finishes an order step outside the owner's lock: counts, the
// list of owners holding messages, strays.
func (rt *router) orderDone(o *owner, a orderAfter) {
	h := rt.h
	for _, p := range a.permits {
		p.Release()
	}
	if a.over {
		h.gaps.overBound(o, a.pushTo)
	}
	if a.pushTo != "" {
		h.peers.push(o, a.pushTo, true)
	}
	for _, s := range a.resume {
		h.peers.push(o, s, false)
	}
	if a.counts.GapsClosed > 0 {
		h.stats.gapsClosed.Add(int64(a.counts.GapsClosed))
		h.log.Warn("gap in a sender's messages given up on after a host failure", "object", o.ref.String(), "messages", a.counts.GapsClosed)
	}
	if a.counts.Late > 0 {
		h.stats.late.Add(int64(a.counts.Late))
	}
	for _, e := range a.stray {
		if e.Msg.Header().Flags()&flagSkip != 0 {
			e.Release()
			continue
		}
		h.redispatch(e)
	}
}

// overBound notes an arrival past the reorder bound at o: counted, and
// (when the sender is told to pause) logged at most once per gapLogEvery.
func (gp *gapFacts) overBound(o *owner, pushed string) {
	h := gp.h
	h.gaps.overHeld.Add(1)
	if pushed != "" && h.gaps.boundLog.allow(nanotime()) {
		h.log.Warn("a sender is past the reorder bound of an object: it is told to pause until an older message arrives",
			"object", o.ref.String(), "sender", pushed, "bound", h.cfg.ReorderBound)
	}
}

// noteHeldLocked records, with o.seqMu held, how many messages o holds
// out of order now: the host's gauge and its list of owners with gaps.
// Lock order: seqMu, then Host.heldMu.
func (o *owner) noteHeldLocked() {
	n := o.inbox.Held()
	if o.heldCount == n {
		return
	}
	h := o.host
	h.owners.heldMu.Lock()
	h.stats.heldOut.Add(int64(n - o.heldCount))
	o.heldCount = n
	if n > 0 {
		if h.owners.held == nil {
			h.owners.held = map[*owner]struct{}{}
		}
		h.owners.held[o] = struct{}{}
	} else {
		delete(h.owners.held, o)
	}
	h.owners.heldMu.Unlock()
}

// Failure facts (route.Fact): what lets a gap close.

// maxFacts bounds the failure facts a host keeps; past it the oldest two
// merge into one that covers what both did.
const maxFacts = 64

// factKeep is how long a host keeps a failure fact past its window and
// wait: an owner frozen meanwhile (a move) applies it when it opens.
const factKeep = 10 * time.Minute

// failed records a failure fact: the membership reported host gone
// without handing on its work (its lease expired, or it left without
// draining).
func (gp *gapFacts) failed(host string, why string) {
	h := gp.h
	f := route.Fact{At: nanotime(), Window: h.gaps.factWindow(), Wait: int64(h.cfg.GapTimeout)}
	h.gaps.factsMu.Lock()
	h.gaps.facts = append(h.gaps.facts, f)
	if len(h.gaps.facts) > maxFacts {
		a, b := h.gaps.facts[0], h.gaps.facts[1]
		h.gaps.facts[1] = route.Fact{At: a.At, Window: b.At + b.Window - a.At, Wait: max(a.Wait, b.Wait)}
		h.gaps.facts = append(h.gaps.facts[:0], h.gaps.facts[1:]...)
	}
	h.gaps.factsMu.Unlock()
	h.gaps.failures.Add(1)
	h.gaps.pressure.resumeBy(host) // its pauses end on the fact
	h.log.Info("a host failed: gaps open now, or opening soon, close after the gap timeout", "failed", host, "why", why)
}

// factWindow is how long after a failure fact a gap that opens still
// counts as caused by it: FollowDuration and GapTimeout. A message that
// died with the failed host leaves its gap open only when the sender's
// next message reaches the object, which can be long after the fact: the
// sender's route to the dead host lives up to RouteCacheTTL, a forwarding
// route up to FollowDuration (always longer), and then the message still
// has its way to go.
func (gp *gapFacts) factWindow() int64 {
	h := gp.h
	return int64(h.cfg.FollowDuration + h.cfg.GapTimeout)
}

// currentFacts returns the failure facts that can still close a gap,
// forgetting the others.
func (gp *gapFacts) currentFacts(now int64) []route.Fact {
	h := gp.h
	h.gaps.factsMu.Lock()
	defer h.gaps.factsMu.Unlock()
	keep := h.gaps.facts[:0]
	for _, f := range h.gaps.facts {
		if now <= f.At+f.Window+f.Wait+int64(factKeep) {
			keep = append(keep, f)
		}
	}
	clear(h.gaps.facts[len(keep):])
	h.gaps.facts = keep
	if len(keep) == 0 {
		return nil
	}
	return slices.Clone(keep)
}

// gapLogEvery spaces the log lines about long gaps.
const gapLogEvery = 5 * time.Second

// gapReportAfter is how long a gap waits before the host logs it.
const gapReportAfter = time.Second

// closeGaps gives up on the gaps a failure fact covers (route.Fact), on
// every owner that holds messages, and updates the oldest-gap gauge; a
// long gap is logged (rate-limited) with the hosts it may wait for.
func (rt *router) closeGaps() {
	h := rt.h
	h.owners.heldMu.Lock()
	owners := make([]*owner, 0, len(h.owners.held))
	for o := range h.owners.held {
		owners = append(owners, o)
	}
	h.owners.heldMu.Unlock()
	now := nanotime()
	facts := h.gaps.currentFacts(now)
	var oldest route.Gap
	var oldestAt *owner
	var awaited []string
	for _, o := range owners {
		o.seqMu.Lock()
		if o.inbox.CloseGaps(now, facts) > 0 {
			var a orderAfter
			o.readyLocked(&a, nil)
			o.seqMu.Unlock()
			h.router.orderDone(o, a)
			o.seqMu.Lock()
		}
		if g, ok := o.inbox.Order().OldestGap(now); ok && g.Waited > oldest.Waited {
			oldest, oldestAt = g, o
			awaited = awaited[:0]
			for _, t := range o.trail.Live(now) {
				awaited = append(awaited, t.Host)
			}
		}
		o.seqMu.Unlock()
	}
	h.gaps.oldestGap.Store(oldest.Waited)
	if oldestAt != nil && oldest.Waited >= int64(gapReportAfter) && h.gaps.gapLog.allow(now) {
		h.log.Warn("a gap in a sender's messages is waiting for an older message (no host failed: it waits)",
			"object", oldestAt.ref.String(), "sender", oldest.Sender, "missing", oldest.Missing,
			"held", oldest.Held, "waited", time.Duration(oldest.Waited), "forwarding", awaited)
	}
}

// rateLimit lets one event through per gapLogEvery; each log line has
// its own.
type rateLimit struct{ next atomic.Int64 }

func (r *rateLimit) allow(now int64) bool {
	n := r.next.Load()
	return now >= n && r.next.CompareAndSwap(n, now+int64(gapLogEvery))
}

// forgetIdleSenders drops the order state of senders idle for twice the
// streams' idle time, on every owner (they hold nothing).
func (ow *ownerTable) forgetIdleSenders() {
	h := ow.h
	now := nanotime()
	idle := 2 * int64(streamIdleFor(h.cfg.FollowDuration))
	for _, kr := range h.owners.kinds {
		for _, o := range kr.all() {
			o.seqMu.Lock()
			if ord := o.inbox.Order(); ord.Senders() > 0 {
				ord.Forget(now, idle)
			}
			o.seqMu.Unlock()
		}
	}
}

// openOrderLocked thaws the owner's inbox: items (already checked, in
// order) go first, then each of unchecked (relayed or held, in arrival
// order) is offered; then the mailbox opens with all of them in order.
// With seqMu held; the caller finishes with orderDone.
func (o *owner) openOrderLocked(items, unchecked []*mailbox.Envelope) orderAfter {
	now := o.host.routes.coarseNow()
	var a orderAfter
	o.inbox.Thaw()
	for _, e := range unchecked {
		hv := e.Msg.Header()
		st := route.Stamp{Epoch: hv.Epoch(), Seq: hv.Seq()}
		switch step, over := o.inbox.Offer(hv.Origin(), st, hv.Flags()&flagSkip != 0, e, now); step {
		case route.StepHeld:
			if p := e.TakePermit(); p != nil {
				a.permits = append(a.permits, p)
			}
			if over {
				a.over = true
				if o.pushBackLocked(hv.Origin()) && a.pushTo == "" {
					a.pushTo = string(hv.Origin())
				}
			}
			continue
		case route.StepSkipped:
			a.stray = append(a.stray, e)
		case route.StepAdmit:
			o.inbox.Admitted(hv.Origin(), st, now)
			items = append(items, e)
		default: // shut meanwhile: route it again
			a.stray = append(a.stray, e)
			continue
		}
		o.readyLocked(&a, &items)
	}
	o.mb.Reopen(items)
	o.readyLocked(&a, nil) // the counts, and what is held now
	return a
}

// orderSnapshotLocked encodes the owner's order state and trail (move
// record, store row); with seqMu held.
func (o *owner) orderSnapshotLocked(now int64) []byte {
	snap := o.inbox.Order().Snapshot(now, func(e *mailbox.Envelope) []byte { return e.Msg.Frame() })
	snap.Trail = o.trail.Snapshot(now)
	if len(snap.Senders) == 0 && len(snap.Trail) == 0 {
		return nil
	}
	return route.AppendSnapshot(nil, snap)
}

// restoreOrderLocked takes in an order snapshot (already decoded); with
// seqMu held. Held frames are copied in (the boundary copy).
func (o *owner) restoreOrderLocked(snap route.Snapshot, now int64) {
	h := o.host
	o.inbox.Order().Restore(snap, now, func(_ uint64, frame []byte) (*mailbox.Envelope, bool) {
		e := h.envelopeOf(frame)
		return e, e != nil
	})
	o.trail.Restore(snap.Trail, now)
}

// deferSkip keeps a skip notice whose object's host is leaving and takes
// no frames: it is routed again on each move tick (retrySkips) until it
// reaches the object wherever it is handed on — never dropped while every
// host is up, since nothing else would close its gap. It reports false if
// the host is closing.
func (gp *gapFacts) deferSkip(m *payload.Message) bool {
	h := gp.h
	h.gaps.skipMu.Lock()
	defer h.gaps.skipMu.Unlock()
	if h.gaps.skipClosed {
		return false
	}
	h.gaps.skips = append(h.gaps.skips, m)
	return true
}

// retrySkips routes the deferred skip notices again (tick).
func (rt *router) retrySkips() {
	h := rt.h
	h.gaps.skipMu.Lock()
	ms := h.gaps.skips
	h.gaps.skips = nil
	h.gaps.skipMu.Unlock()
	for _, m := range ms {
		_ = payload.SetForward(m.Frame(), 0, 0)
		h.redispatchMessage(m)
	}
}

// closeSkips releases the deferred skip notices of a closing host.
func (gp *gapFacts) closeSkips() {
	h := gp.h
	h.gaps.skipMu.Lock()
	ms := h.gaps.skips
	h.gaps.skips, h.gaps.skipClosed = nil, true
	h.gaps.skipMu.Unlock()
	for _, m := range ms {
		m.Release()
	}
}

// dropped is called when this host ends a stamped message without
// delivering it to its object (a routing failure, a rejected send): it
// sends a skip notice with the message's stamp after it, so that the
// owner does not wait for it. Best effort: a skip that cannot be placed
// ends, and the gap closes after GapTimeout.
func (rt *router) dropped(hv *payload.HeaderView) {
	h := rt.h
	if buf, ok := h.router.skipNotice(hv); ok {
		h.redispatchBuffer(buf)
	}
}

// skipNotice returns the skip notice of a stamped message this host
// drops, counted (Stats.Dropped); false for a message that needs none.
func (rt *router) skipNotice(hv *payload.HeaderView) (payload.Buffer, bool) {
	h := rt.h
	if hv.Seq() == 0 || hv.Flags()&flagSkip != 0 || hv.Scope() != payload.ScopeObject || !h.acceptsInternal() {
		return payload.Buffer{}, false
	}
	h.stats.droppedMsgs.Add(1)
	buf, err := payload.Encode(h.pool, h.reg, payload.Header{
		Type:   "berth.skip",
		Target: payload.Target{Scope: payload.ScopeObject, Name: string(hv.TargetName()), ID: string(hv.TargetID())},
		Op:     hv.Op(),
		Flags:  flagSkip,
		Origin: string(hv.Origin()),
		Epoch:  hv.Epoch(),
		Seq:    hv.Seq(),
	}, struct{}{})
	return buf, err == nil
}

// gapFacts is a host's failure facts and what it reports of its gaps.
type gapFacts struct {
	h         *Host
	factsMu   sync.Mutex   // a leaf
	facts     []route.Fact // guarded by factsMu
	failures  atomic.Int64 // failure facts recorded
	oldestGap atomic.Int64 // ns the oldest gap had waited at the last closeGaps
	overHeld  atomic.Int64 // arrivals that found their sender past the reorder bound
	gapLog    rateLimit    // the long-gap line (closeGaps)
	boundLog  rateLimit    // the past-the-bound line (overBound)
	// skips: skip notices waiting for their object's leaving host to hand
	// it on (deferSkip).
	skipMu     sync.Mutex // a leaf
	skips      []*payload.Message
	skipClosed bool
	// pressure: objects this host's outside senders wait for (pressure.go).
	pressure      pressureSet
	pressureWaits atomic.Int64 // outside sends that waited for one
	// peers' budgets (peerbudget.go)
	peerWaits   atomic.Int64 // outside sends that waited for a peer's credit
	peerRefused atomic.Int64 // peers' messages refused past their budget
	linkRefused atomic.Int64 // items not sent: their link was past its bound (linkBacklog)
}
