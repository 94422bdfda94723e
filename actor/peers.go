package actor

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
)

// The peers part (peers): this host's side of the network — what it sends
// to other hosts and what it knows of them.
//
// Owns: the transport and the membership (set once by Start), the peer
// view (members from the membership watch, link states and loads from the
// transport's events and the peers' load reports, the runs a failure fact
// was about and the sends waiting on a run), the directory of
// addresses, this host's load reports, the per-peer state it keeps
// (inboundFrom: the permit source, slow lane, budget and credit of one
// peer), and every item it sends: frames, records, hints, control items,
// credit asks, pressure notices.
// Lock: peerView.mu (RW) and the per-peer locks (peerBudget.mu,
// peerCredit.mu, serial.mu) are leaves; nothing is sent under a lock of
// another part.
// May call: the transport, the membership, the leaves (serial, routes,
// stats, services).
// Invariants: a host without a transport sends nothing; an item the
// transport refuses past its bound is counted and logged, never queued
// here; the peer view changes only on a fact (the membership's events, the
// transport's link events, a peer's own report).

// The host's side of the seam between hosts (docs/architecture.md, "Packages", "Order, routing and transports"). A host
// reaches other hosts only through its transport (Config.Transport) —
// items of bytes, in order per peer, and link events — and learns who
// they are only from its membership (Config.Membership): their states,
// kinds and message limits. Nothing here reads another host's memory.
//
// What arrives is handled on the transport's goroutines (hostHandler):
// decoding, route-table updates and admission to local owners never wait
// for a store call or a lock another host's traffic needs; a message whose
// object is not here goes to the sending peer's slow lane (inbound.slow),
// where a store look-up may wait without stalling the peer's link.
//
// What this host knows of its peers (peerView) comes from three sources:
// the membership watch (members, their state and kinds), the transport's
// events (a link down, a peer leaving, gone) and the peers' load reports
// (control items a host sends when its number of objects changes).
//
// Lock order: peerView.mu is a leaf.

// Sending. Send does not keep the bytes it is given, so a frame's pooled
// buffer is released as soon as it is sent. A peer that is gone, unknown
// or leaving (frames only) is errHostGone: the caller routes again.

// malformedItem drops an item off a link that does not decode (counted as
// a protocol rejection). A lost hint is advice; a lost record is recovered
// by the relocation protocol; a lost control item ends its Relocate by the
// caller's deadline.
func (pr *peers) malformedItem(from string, err error) {
	pr.obs.Rejected("", RejectProtocol)
	pr.peerLogs.malformed.Warn(pr.log, "malformed item from a link dropped", "from", from, "err", err)
}

// sendHint tells host to that obj runs on host at with owner generation
// gen.
func (pr *peers) sendHint(to string, obj relocation.Object, at string, gen uint64) {
	_ = pr.sendItem(to, transport.Hint, appendHint(nil, obj, routeHint{host: at, gen: gen})) // advice: lost with a gone peer
}

// sendItem sends data as an item of kind k to host to.
func (pr *peers) sendItem(to string, k transport.Kind, data []byte) error {
	return pr.sendResult(to, k, pr.tr.Send(to, transport.Item{Kind: k, Data: data}))
}

// sendResult is sendError for an item of kind k sent to host to; a refusal
// because the link is past its bound (the host does not take what this
// host sends it) is ErrPeerBacklog, counted and logged (rate-limited).
func (pr *peers) sendResult(to string, k transport.Kind, err error) error {
	if err != nil && errors.Is(err, transport.ErrBacklog) {
		pr.linkBacklog(to, k)
		return ErrPeerBacklog
	}
	return sendError(err)
}

// linkBacklog counts and logs an item of kind k not sent to host to: the
// link to it is past its bound.
func (pr *peers) linkBacklog(to string, k transport.Kind) {
	pr.linkRefused.Add(1)
	pr.peerLogs.link.Warn(pr.log, "item not sent: the link to the host is past its bound (the host does not take what is sent to it)",
		"host", to, "kind", k.String())
}

// backlogged reports whether the link to host to is past its bound (a
// frame must not be stamped for it); counted and logged when it is.
func (pr *peers) backlogged(to string) bool {
	if !pr.tr.backlogged(to) {
		return false
	}
	pr.linkBacklog(to, transport.Frame)
	return true
}

// sendMessage sends m's frame to host to (as a Bounce: back to its
// origin); on success m is released, on failure it stays the caller's.
func (pr *peers) sendMessage(to string, m *payload.Message, k transport.Kind) error {
	f := m.Frame()
	if err := pr.sendItem(to, k, f); err != nil {
		return err
	}
	if k == transport.Frame {
		pr.sentFrame(to, len(f))
	}
	m.Release()
	return nil
}

// sendRecord sends a relocation record about obj; lost if the peer is
// gone (the relocation protocol recovers). A record with a state chunk is
// encoded into a buffer of its own that the transport takes over (Owned:
// no copy on the way); others into *buf, whose array is kept for the next
// record.
func (pr *peers) sendRecord(to string, obj relocation.Object, rec relocation.Record, buf *[]byte) error {
	if c, ok := rec.(*relocation.Chunk); ok && len(c.Data) > 1024 {
		b := relocation.AppendRecord(make([]byte, 0, len(c.Data)+128+len(obj.Kind)+len(obj.ID)), obj, rec)
		return pr.sendResult(to, transport.Record, pr.tr.Send(to, transport.Item{Kind: transport.Record, Data: b, Owned: true}))
	}
	*buf = relocation.AppendRecord((*buf)[:0], obj, rec)
	return pr.sendItem(to, transport.Record, *buf)
}

// sendControl sends a relocate request, answer or cancel, or a load
// report.
func (pr *peers) sendControl(to string, ctl any) error {
	return pr.sendItem(to, transport.Control, appendControl(nil, ctl))
}

// sendLoad tells peer to how many objects this host has.
func (pr *peers) sendLoad(to string, n int64) {
	_ = pr.sendControl(to, &loadReport{load: n})
}

// peerJobs registers the peer view's periodic job on the host's tick:
// this host's load goes to its peers when it changed and to every peer
// once a second (a peer that missed a report learns it then), and a peer
// whose link came up learns it (and its window) at once.
func (pr *peers) peerJobs(tick *schedule) {
	var lastAll time.Time
	tick.every("report the load", tickEvery, func(now time.Time) bool {
		all := now.Sub(lastAll) >= time.Second
		if all {
			lastAll = now
		}
		pr.reportLoad(all)
		return false
	})
}

// reportLoad tells every peer this host's number of objects when it
// changed since the last report or all is set (a periodic refresh, which
// also corrects the peers' estimates of what they placed here), and the
// peers that came up since the last report in any case (the tick
// calls it).
func (pr *peers) reportLoad(all bool) {
	n := pr.stats.owners.Load()
	changed := n != pr.loadSent || all
	pr.loadSent = n
	var to []string
	if changed {
		to = pr.tr.Peers()
	}
	var up []string
	pr.view.mu.Lock()
	for name, p := range pr.view.links {
		if p.needLoad {
			p.needLoad = false
			up = append(up, name)
			if !changed {
				to = append(to, name)
			}
		}
	}
	pr.view.mu.Unlock()
	for _, p := range to {
		pr.sendLoad(p, n)
	}
	for _, p := range up {
		// A peer that came up learns this host's window for its
		// messages (peerbudget.go).
		pr.credits.reportWindow(p)
	}
}

// waitRoom waits until the link to host has room for an external send
// and host has credit for it (peerbudget.go): at once,
// without a context of its own, when so; else until ctx ends (its error),
// SendTimeout passes (ErrSendTimeout), the host closes
// (ErrShuttingDown), or the run of host the wait began with is declared
// failed (a failure fact, peerView.whenFailed: an error wrapping
// ErrPeerFailed; nothing was sent). No lock is held while it waits.
func (pr *peers) waitRoom(ctx context.Context, host string, n int) error {
	c := pr.creditOf(host)
	if c.open(int64(n)) && pr.tr.WaitRoom(doneCtx, host) == nil {
		return nil
	}
	run := pr.view.runOf(host)
	wctx, cancel := context.WithTimeout(ctx, pr.cfg.SendTimeout)
	defer cancel()
	stop := context.AfterFunc(pr.life.ctx, cancel)
	defer stop()
	// A failed run never gives credit or room: the fact ends the wait.
	stopFailed := context.AfterFunc(pr.view.whenFailed(run), cancel)
	defer stopFailed()
	if !c.open(int64(n)) {
		// What this host sent the peer and the peer keeps fills its
		// window (peerbudget.go): wait for a credit report, asking the
		// peer for one (once per report).
		pr.waits.Add(1)
		for !c.open(int64(n)) && wctx.Err() == nil {
			ch := c.waitCh()
			if c.open(int64(n)) {
				break
			}
			if c.ask() {
				_ = pr.sendControl(host, &creditAsk{}) // a gone peer: its credit is reset
			}
			select {
			case <-ch:
			case <-wctx.Done():
			}
		}
	}
	if wctx.Err() == nil && pr.tr.WaitRoom(wctx, host) == nil {
		return nil
	}
	switch {
	case pr.life.ctx.Err() != nil:
		return ErrShuttingDown
	case pr.view.runFailed(run):
		return peerFailedUnsent(host)
	case ctx.Err() != nil:
		return ctxErr(ctx)
	}
	return ErrSendTimeout
}

// peers is this host's side of the network: its transport and
// membership, what it knows of the other hosts, and their addresses.
//
// Owns: tr, members, view, dir, origin, loadSent.
// Lock: view's mutex and dirMu, leaves; tr, members and origin are set
// once by Start (attached says when tr is; a gateway's new run replaces
// tr's attachment, runlink.go); dir is written under dirMu (Start, the
// membership watch, a new run); loadSent by the tick only.
// Invariants: with no transport the host stands alone: tr and members are
// nil and nothing is stamped or sent.
type peers struct {
	*hostEnv
	life     *lifecycle
	stats    *hostStats
	routes   *routes
	handler  func(ready <-chan struct{}) transport.Handler // what the transport delivers to (the inbound side's)
	credits  peerCredits                                   // this host's credit at each peer (the inbound side keeps it)
	pressure *pressureSet                                  // the objects outside senders wait for (a pause this host's owners take)
	tr       *runLink                                      // nil: the host stands alone
	attached atomic.Bool                                   // tr is set (items that come earlier wait for it)
	dirMu    sync.Mutex                                    // a leaf: tellDirectory, one call at a time
	kinds    []string                                      // the kinds the host offers (set by Start)
	members  membership.Membership                         // nil when tr is
	view     peerView                                      // what this host knows of its peers
	dir      map[string]peerAt                             // peers' addresses (and runs) told to a transport.Directory
	origin   string                                        // the origin stamped on messages: the name, with a transport
	loadSent int64                                         // the load last reported; the tick only

	waits       atomic.Int64 // outside sends that waited for a peer's credit (Stats.PeerWaits)
	linkRefused atomic.Int64 // items not sent: their link was past its bound (linkBacklog, Stats.LinkRefused)
}

// peerView is what this host knows of the other hosts: the members as
// its membership watch last reported them, and per peer what its
// transport and the peer's load reports said. Safe for concurrent use.
type peerView struct {
	mu      sync.RWMutex
	members map[string]membership.Member // by name, this host's own included
	links   map[string]*peerLink
	// now is, per name, what the send path reads without a lock: the
	// member's MaxMessage and run, and the newest run of the name a
	// failure fact was about. Rebuilt (under mu) by every event, before
	// apply returns the failed runs: a sender that reads it after noting
	// where its request went sees every failure reported before
	// (requestTable.handedTo).
	now atomic.Pointer[map[string]peerNow]
	// selfVersion is this host's application version (set before
	// Start); newer reports, without a lock, whether some member runs a
	// newer one (rebuilt with now): only then does a PlaceLocal
	// placement look at the candidates (router.placeNew).
	selfVersion string
	newer       atomic.Bool
	// failed is the newest run of each name a failure fact was about
	// (apply): one per name that ever failed, like dead.
	failed map[string]uint64
	// failWaits are the contexts of senders waiting for credit or room
	// on the link to a run (whenFailed), cancelled when a failure fact
	// is about that run or a newer one of its name; dropped, not
	// cancelled, when the run leaves having handed its work on.
	failWaits map[peerRun]failWait
	// handedOn are the runs (name → lease generation) that went Gone: they
	// handed all their work on, so their leaving is no failure.
	handedOn map[string]uint64
	// closing are the members that went Gone and have not left (or
	// expired) yet: no longer members to place on or route to, but their
	// link stays (addresses) so that their transport's graceful close is
	// answered — it waits for its peers to receive its last items, and a
	// link cut when the Gone is seen first would make it wait for
	// nothing.
	closing map[string]membership.Member
	// dead are the runs (name → the highest lease generation) a
	// suspicion showed past their lease in the Location Store before the
	// membership said so (suspect.go): the membership's later events of
	// those runs — a late state change, their expiry — change nothing
	// and report no second failure. A run never comes back.
	dead map[string]uint64
}

// peerLink is the transport's news of one peer.
type peerLink struct {
	down     bool  // the link is broken (Event Down)
	leaving  bool  // the peer is leaving: it takes no more frames
	gone     bool  // the peer left
	load     int64 // its objects, as it last reported
	placed   int64 // objects this host sent it to activate since that report
	needLoad bool  // it came up: tell it this host's load
	// downed is closed when the link next breaks (or the peer leaves or
	// goes); nil until someone waits for that (whenDown).
	downed chan struct{}
}

// broke notes that the link to the peer broke or the peer went: its
// waiters (whenDown) hear it.
func (p *peerLink) broke() {
	if p.downed != nil {
		close(p.downed)
		p.downed = nil
	}
}

// unreachable reports whether the link to peer name is broken, or the
// peer is leaving or gone.
func (v *peerView) unreachable(name string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.links[name]
	return p != nil && (p.down || p.leaving || p.gone)
}

// whenDown returns a channel closed once the link to peer name is broken
// or the peer is leaving or gone: at once if it is now.
func (v *peerView) whenDown(name string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.links[name]
	if p != nil && (p.down || p.leaving || p.gone) {
		return closedChan
	}
	if p == nil {
		if v.links == nil {
			v.links = map[string]*peerLink{}
		}
		p = &peerLink{}
		v.links[name] = p
	}
	if p.downed == nil {
		p.downed = make(chan struct{})
	}
	return p.downed
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// link changes the state of peer name with f.
func (v *peerView) link(name string, f func(*peerLink)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.links == nil {
		v.links = map[string]*peerLink{}
	}
	p := v.links[name]
	if p == nil {
		p = &peerLink{}
		v.links[name] = p
	}
	f(p)
}

func (v *peerView) setLoad(name string, n int64) {
	v.link(name, func(p *peerLink) { p.load, p.placed = n, 0 })
}

// markDead notes that run gen of host name is past its lease (a
// confirmed suspicion); the watch then applies its expiry.
func (v *peerView) markDead(name string, gen uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead == nil {
		v.dead = map[string]uint64{}
	}
	if gen > v.dead[name] {
		v.dead[name] = gen
	}
}

// isDead reports whether run gen of host name was shown dead (markDead).
func (v *peerView) isDead(name string, gen uint64) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.deadRun(name, gen)
}

// deadRun reports whether run gen of host name was shown dead (markDead).
// v.mu held.
func (v *peerView) deadRun(name string, gen uint64) bool {
	d, ok := v.dead[name]
	return ok && gen <= d
}

// peerRun is one run of a host: its name and its lease generation (run
// 0: a run the view did not list).
type peerRun struct {
	name string
	run  uint64
}

// peerNow is what the send path reads of a name without a lock
// (peerView.now).
type peerNow struct {
	maxMsg int64  // the member's MaxMessage (0: not a member)
	run    uint64 // the member's run (0: not a member)
	failed uint64 // the newest run of the name a failure fact was about (0: none)
}

// failWait is a context cancelled when a run is declared failed.
type failWait struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// apply applies one membership event to the view.
// It returns the runs whose leaving the event shows to be a failure —
// failure facts (gaps.go): an expiry; a leave of a run that had not gone
// Gone (it did not hand all its work on); a member missing from a Sync,
// or replaced by a new run of its name (its leave or expiry was not
// seen). A run that went Gone has handed its work on: its leave is no
// failure. The senders waiting for credit or room on the link to a
// failed run (whenFailed) are woken after the view's lock.
func (v *peerView) apply(ev membership.Event) (failed []peerRun) {
	v.mu.Lock()
	failed = v.applyLocked(ev)
	var wake []context.CancelFunc
	for _, r := range failed {
		if v.failed == nil {
			v.failed = map[string]uint64{}
		}
		v.failed[r.name] = max(v.failed[r.name], r.run)
		for w, fw := range v.failWaits {
			if w.name == r.name && w.run <= r.run {
				wake = append(wake, fw.cancel)
				delete(v.failWaits, w)
			}
		}
	}
	if ev.Type == membership.Left {
		// A run that handed its work on: its waiters end by their own
		// deadlines (nothing failed).
		delete(v.failWaits, peerRun{ev.Member.Name, ev.Member.LeaseGen})
	}
	v.publishLocked()
	v.mu.Unlock()
	for _, cancel := range wake {
		cancel()
	}
	return failed
}

// publishLocked rebuilds now from the members and the failed runs. v.mu
// held.
func (v *peerView) publishLocked() {
	m := make(map[string]peerNow, len(v.members)+len(v.failed))
	for name, run := range v.failed {
		m[name] = peerNow{failed: run}
	}
	for name, mem := range v.members {
		p := m[name]
		p.maxMsg, p.run = mem.MaxMessage, mem.LeaseGen
		m[name] = p
	}
	v.now.Store(&m)
	newer := false
	for _, mem := range v.members {
		if mem.Version != v.selfVersion && compareVersions(mem.Version, v.selfVersion) > 0 {
			newer = true
			break
		}
	}
	v.newer.Store(newer)
}

// at returns what the view knows of name now, without a lock.
func (v *peerView) at(name string) peerNow {
	if m := v.now.Load(); m != nil {
		return (*m)[name]
	}
	return peerNow{}
}

// runOf returns the run of host name that what is sent to it now
// reaches, as the view knows it: the member's; for a name that is no
// member, the newest run of it a failure fact was about (what is handed
// to it is handed to a failed run: a new run the view has not seen yet
// would answer, but none may come); else 0, unknown.
func (v *peerView) runOf(name string) peerRun {
	p := v.at(name)
	if p.run == 0 {
		return peerRun{name: name, run: p.failed}
	}
	return peerRun{name: name, run: p.run}
}

// runFailed reports whether a failure fact was about run r, or a newer
// run of its name, already (an unknown run, 0, never).
func (v *peerView) runFailed(r peerRun) bool {
	return r.run != 0 && v.at(r.name).failed >= r.run
}

// whenFailed returns a context cancelled once a failure fact is about run
// r (or a newer run of its name): at once if one was. An unknown run (0)
// gets a context that is never cancelled. The context is shared by every
// waiter of the run and lives until the run fails or leaves.
func (v *peerView) whenFailed(r peerRun) context.Context {
	if r.run == 0 {
		return context.Background()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failed[r.name] >= r.run {
		return doneCtx
	}
	fw, ok := v.failWaits[r]
	if !ok {
		if v.failWaits == nil {
			v.failWaits = map[peerRun]failWait{}
		}
		fw.ctx, fw.cancel = context.WithCancel(context.Background())
		v.failWaits[r] = fw
	}
	return fw.ctx
}

// applyLocked is apply's change of the members. v.mu held.
func (v *peerView) applyLocked(ev membership.Event) (failed []peerRun) {
	switch ev.Type {
	case membership.Sync:
		now := make(map[string]membership.Member, len(ev.Members))
		for _, m := range ev.Members {
			if !v.deadRun(m.Name, m.LeaseGen) {
				now[m.Name] = m
			}
		}
		for name, m := range v.closing {
			if cur, ok := now[name]; !ok || cur.LeaseGen != m.LeaseGen {
				delete(v.closing, name) // it left meanwhile
			}
		}
		for name, m := range v.members {
			if cur, ok := now[name]; !ok || cur.LeaseGen != m.LeaseGen {
				failed = append(failed, peerRun{name, m.LeaseGen})
			}
		}
		v.members = now
		return failed
	}
	if v.members == nil {
		v.members = map[string]membership.Member{}
	}
	if v.deadRun(ev.Member.Name, ev.Member.LeaseGen) {
		cur, listed := v.members[ev.Member.Name]
		if !listed || cur.LeaseGen != ev.Member.LeaseGen || (ev.Type != membership.Expired && ev.Type != membership.Left) {
			// A late event of a run already dropped as dead (its
			// failure was reported then), or a state change of it:
			// nothing to do.
			return nil
		}
		// The expiry a confirmed suspicion stands for: applied below.
	}
	switch {
	case ev.Type == membership.Joined, ev.Type == membership.StateChanged && ev.Member.State != membership.Gone:
		if cur, ok := v.members[ev.Member.Name]; ok && cur.LeaseGen != ev.Member.LeaseGen {
			failed = append(failed, peerRun{cur.Name, cur.LeaseGen}) // a new run of the name: the old one ended unseen
		}
		v.members[ev.Member.Name] = ev.Member
		return failed
	case ev.Type == membership.StateChanged: // Gone
		if v.handedOn == nil {
			v.handedOn = map[string]uint64{}
		}
		v.handedOn[ev.Member.Name] = ev.Member.LeaseGen
		if cur, ok := v.members[ev.Member.Name]; ok && cur.LeaseGen == ev.Member.LeaseGen {
			if v.closing == nil {
				v.closing = map[string]membership.Member{}
			}
			v.closing[ev.Member.Name] = cur
		}
	case ev.Type == membership.Expired:
		failed = append(failed, peerRun{ev.Member.Name, ev.Member.LeaseGen})
	case ev.Type == membership.Left:
		if gen, ok := v.handedOn[ev.Member.Name]; !ok || gen != ev.Member.LeaseGen {
			failed = append(failed, peerRun{ev.Member.Name, ev.Member.LeaseGen})
		}
	}
	if ev.Type == membership.Left || ev.Type == membership.Expired {
		if gen, ok := v.handedOn[ev.Member.Name]; ok && gen <= ev.Member.LeaseGen {
			delete(v.handedOn, ev.Member.Name)
		}
		if m, ok := v.closing[ev.Member.Name]; ok && m.LeaseGen <= ev.Member.LeaseGen {
			delete(v.closing, ev.Member.Name)
		}
	}
	if cur, ok := v.members[ev.Member.Name]; ok && cur.LeaseGen == ev.Member.LeaseGen {
		delete(v.members, ev.Member.Name)
	}
	return failed
}

// member returns what the membership says of host name.
func (v *peerView) member(name string) (membership.Member, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	m, ok := v.members[name]
	return m, ok
}

// maxMessage returns the largest message host name admits (0: unknown).
func (v *peerView) maxMessage(name string) int64 { return v.at(name).maxMsg }

// known reports whether host name is a member, or a peer this host's
// transport has reported (one that left since included: its messages may
// still be on their way through other hosts).
func (v *peerView) known(name string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if _, ok := v.members[name]; ok {
		return true
	}
	_, ok := v.links[name]
	return ok
}

// reachable reports whether peer name is on the network and its link is
// not down.
func (v *peerView) reachable(name string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.links[name]
	return p == nil || !(p.down || p.gone)
}

// candidate is a host that can take a new activation, with its load.
type candidate struct {
	name    string
	load    int64  // active owners
	version string // its application version (Config.AppVersion)
}

// candidates returns the serving hosts that have kind and take frames,
// sorted by name; self (with its own live load) only if takeSelf. While
// hosts of several application versions serve the kind, only those of
// the newest are candidates (version.go).
func (pr *peers) candidates(kind string, takeSelf bool) []candidate {
	v := &pr.view
	v.mu.RLock()
	out := make([]candidate, 0, len(v.members))
	for name, m := range v.members {
		if m.State != membership.Serving || !slices.Contains(m.Kinds, kind) {
			continue
		}
		if name == pr.name {
			if takeSelf {
				out = append(out, candidate{name: name, load: pr.stats.owners.Load(), version: pr.cfg.AppVersion})
			}
			continue
		}
		p := v.links[name]
		if p != nil && (p.leaving || p.gone) {
			continue
		}
		c := candidate{name: name, version: m.Version}
		if p != nil {
			c.load = p.load + p.placed
		}
		out = append(out, c)
	}
	v.mu.RUnlock()
	// A member whose certificate names it a gateway hosts nothing, whatever
	// kinds it claims (its role is read after the view's lock: the
	// transport's locks are not taken under it).
	out = slices.DeleteFunc(out, func(c candidate) bool { return c.name != pr.name && pr.peerRole(c.name) == transport.RoleGateway })
	out = newest(out)
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// peerRole returns the role peer authenticated as on its latest connection
// (transport.Roles), RoleNode where the transport has no roles.
func (pr *peers) peerRole(peer string) transport.Role {
	a := pr.tr.current()
	if a == nil {
		return transport.RoleNode
	}
	if r, ok := a.t.(transport.Roles); ok {
		return r.PeerRole(peer)
	}
	return transport.RoleNode
}

// placed notes that this host sent a new object to host name: until name
// reports its load again, count one more there (so that first messages
// sent close together spread out).
func (v *peerView) placed(name string) {
	v.link(name, func(p *peerLink) { p.placed++ })
}

// pickHost returns another serving host that has kind, the least loaded
// (ties: the lowest name), for a draining host to send new activations to
// ("" if none).
func (pr *peers) pickHost(kind string) string {
	best := ""
	var bestLoad int64
	for _, c := range pr.candidates(kind, false) {
		if best == "" || c.load < bestLoad {
			best, bestLoad = c.name, c.load
		}
	}
	return best
}

// attachRun attaches the host to its transport as run gen. Its run on the
// wire is its lease generation, which peers check against the membership
// (tellDirectory), if the transport can carry it. What arrives waits for
// ready to close (until the host has its transport).
func (pr *peers) attachRun(gen uint64, ready <-chan struct{}) (transport.Transport, error) {
	if ra, ok := pr.cfg.Transport.(transport.RunAttacher); ok {
		return ra.AttachRun(pr.name, gen, pr.handler(ready))
	}
	return pr.cfg.Transport.Attach(pr.name, pr.handler(ready))
}

// member is this host's membership record as run gen: its address on the
// current attachment, the kinds it offers and its message limit.
func (pr *peers) member(gen uint64) membership.Member {
	var addr string
	if d := pr.tr.current().dir; d != nil {
		addr = d.Addr()
	}
	return membership.Member{Name: pr.name, Address: addr, Kinds: pr.kinds, LeaseGen: gen,
		MaxMessage: pr.cfg.ApplicationLimits.Bytes - mailbox.ItemOverhead, Version: pr.cfg.AppVersion}
}

// forgetDirectory forgets what the transport was told of its peers (a new
// attachment knows none yet).
func (pr *peers) forgetDirectory() {
	pr.dirMu.Lock()
	pr.dir = nil
	pr.dirMu.Unlock()
}

// tellDirectory tells a transport that needs its peers' addresses
// (transport.Directory) where the members are, and which are gone — and
// one that checks its peers' runs against the membership
// (transport.RunDirectory) each member's lease generation. It runs where
// the view is applied (Start, then the membership watch), one call at a
// time; h.peers.dir is what the transport was told.
func (pr *peers) tellDirectory() {
	pr.dirMu.Lock()
	defer pr.dirMu.Unlock()
	a := pr.tr.current()
	d, rd := a.dir, a.runDir
	if d == nil {
		return
	}
	now := pr.view.addresses(pr.name)
	for name, at := range now {
		if pr.dir[name] == at {
			continue
		}
		var err error
		if rd != nil {
			err = rd.AddPeerRun(name, at.addr, at.run)
		} else {
			err = d.AddPeer(name, at.addr)
		}
		if err != nil {
			pr.log.Warn("transport refused a member's address", "peer", name, "address", at.addr, "err", err)
			delete(now, name) // told again with the next event
		}
	}
	for name := range pr.dir {
		if _, ok := now[name]; !ok {
			d.RemovePeer(name)
		}
	}
	pr.dir = now
}

// peerAt is where a member is, and its run (its lease generation).
type peerAt struct {
	addr string
	run  uint64
}

// addresses returns the address and run of every member but self that
// has an address, and of every one that went Gone and has not left yet
// (its graceful close still talks to this host).
func (v *peerView) addresses(self string) map[string]peerAt {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make(map[string]peerAt, len(v.members)+len(v.closing))
	for _, ms := range []map[string]membership.Member{v.closing, v.members} { // a member's own entry last
		for name, m := range ms {
			if name != self && m.Address != "" {
				out[name] = peerAt{addr: m.Address, run: m.LeaseGen}
			}
		}
	}
	return out
}

// knownHost reports whether the membership lists host name, asking it
// afresh if this host's view does not (a host that has just joined).
func (pr *peers) knownHost(name string) bool {
	if _, ok := pr.view.member(name); ok {
		return true
	}
	ctx, cancel := pr.life.storeContext()
	defer cancel()
	list, err := pr.members.Members(ctx)
	return err == nil && slices.ContainsFunc(list, func(m membership.Member) bool { return m.Name == name })
}

// otherHostsWithKind returns the other serving hosts that have kind —
// of the newest application version among them — sorted by name, asking
// the membership afresh (Drain, once per round: it must see hosts that
// joined a moment ago), each with its load as this host heard it.
func (pr *peers) otherHostsWithKind(kind string) []HostLoad {
	ctx, cancel := pr.life.storeContext()
	defer cancel()
	list, err := pr.members.Members(ctx)
	if err != nil {
		pr.log.Warn("membership not reachable; using the last view", "err", err)
		var out []HostLoad
		for _, c := range pr.candidates(kind, false) {
			out = append(out, HostLoad{Name: c.name, Objects: c.load})
		}
		return out
	}
	var cands []candidate
	for _, m := range list {
		if m.Name != pr.name && m.State == membership.Serving && slices.Contains(m.Kinds, kind) {
			if pr.view.leavingOrGone(m.Name) {
				continue
			}
			cands = append(cands, candidate{name: m.Name, version: m.Version})
		}
	}
	var out []HostLoad
	for _, c := range newest(cands) { // a rolling upgrade: onto the newest version only
		out = append(out, HostLoad{Name: c.name, Objects: pr.view.loadOf(c.name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// loadOf is peer name's load as this host heard it: its last report, plus
// the objects placed on it since.
func (v *peerView) loadOf(name string) int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if p := v.links[name]; p != nil {
		return p.load + p.placed
	}
	return 0
}

// linkOf reports whether m's run is still a member with a link (listed),
// and whether that link is down, or its peer leaving or gone.
func (v *peerView) linkOf(m membership.Member) (down, leaving, listed bool) {
	cur, ok := v.member(m.Name)
	if !ok || cur.LeaseGen != m.LeaseGen {
		return false, false, false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.links[m.Name]
	if p == nil {
		return false, false, false
	}
	return p.down, p.leaving || p.gone, true
}

// leavingOrGone reports whether peer name is leaving or gone.
func (v *peerView) leavingOrGone(name string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.links[name]
	return p != nil && (p.leaving || p.gone)
}

// setMemberState moves this host's membership entry to state to (a store
// call; a failure is logged: peers then learn of the change from the
// transport's Leaving and Gone events alone).
func (pr *peers) setMemberState(to membership.State) {
	ctx, cancel := pr.life.storeContext()
	defer cancel()
	if _, err := pr.members.SetState(ctx, pr.name, pr.routes.self().run, to); err != nil {
		pr.log.Warn("membership state not updated", "state", to.String(), "err", err)
	}
}

// creditOf returns this host's credit at peer name (kept with what it
// keeps of the peer's messages: inbound).
func (pr *peers) creditOf(name string) *peerCredit {
	return pr.credits.creditAt(name)
}

// peerCredits is what peers need of the inbound side, which keeps this
// host's credit at each peer with what it keeps of that peer's messages
// (inbound.go): the credit, and the report of this host's window to a
// peer that came up.
type peerCredits interface {
	creditAt(peer string) *peerCredit
	reportWindow(peer string)
}

// sentFrame counts a message frame of n bytes sent to peer to.
func (pr *peers) sentFrame(to string, n int) {
	pr.creditOf(to).sent(n)
}

// sentAgain counts a message the new run sent again from the old run's
// links (runLink.replace): a frame sent to peer to.
func (pr *peers) sentAgain(to string, it transport.Item) {
	pr.stats.sentAgain.Add(1)
	pr.sentFrame(to, len(it.Data))
}

// sendAgainToMembers sends what the new run still holds to send again
// (its peers' links were not up yet), and drops what it holds for hosts
// the membership no longer lists: what they had not taken was lost with
// them (Stats.LostOnRejoin). The membership renewer calls it.
func (pr *peers) sendAgainToMembers() {
	if pr.tr == nil {
		return
	}
	a := pr.tr.current()
	a.sendAllAgain()
	if n := a.dropAgain(func(name string) bool { _, ok := pr.view.member(name); return ok }); n > 0 {
		pr.stats.lostOnRejoin.Add(int64(n))
		pr.log.Warn("messages to send again to hosts that are no longer members were lost with them (Stats.LostOnRejoin)", "messages", n)
	}
}

// push tells sender to pause or resume its outside sends to object ref.
// Not under any lock of the owner.
func (pr *peers) push(ref Ref, sender string, pause bool) {
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	if sender == pr.name || sender == "" {
		if pause {
			pr.pressure.pause(obj, pr.name, false)
		} else {
			pr.pressure.resume(obj, pr.name)
		}
		return
	}
	if pr.tr == nil {
		return
	}
	// Advice: lost with a gone peer, whose pauses end there on that fact.
	_ = pr.sendItem(sender, transport.Control, appendControl(nil, &pressureItem{obj: obj, paused: pause}))
}

// errLinkDown: this host's transport is closed.
var errLinkDown = payload.NewError(payload.Unavailable, "actor", "the link to the host is down")

// errHostGone: the host a route names is no longer on the network.
var errHostGone = payload.NewError(payload.Unavailable, "actor", "the host is not on the network")

func sendError(err error) error {
	switch {
	case err == nil:
		return nil
	case transport.IsRetryable(err):
		return errHostGone
	}
	return errLinkDown
}

// doneCtx is a context that is already done: WaitRoom with it only tells
// whether there is room.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// sendRecords sends relocation records to host to, encoding them into
// *scratch (reused: the transport does not keep what it is given; nil: a
// new buffer); it reports whether that host has left the network (the
// records went nowhere), or the link to it was past its bound (refused:
// the records from the first refused one on were not sent).
func (pr *peers) sendRecords(to string, obj relocation.Object, scratch *[]byte, recs ...relocation.Record) (gone, refused bool) {
	if len(recs) == 0 || pr.tr == nil {
		return false, false
	}
	if scratch == nil {
		scratch = new([]byte)
	}
	for _, r := range recs {
		if err := pr.sendRecord(to, obj, r, scratch); err != nil {
			return errors.Is(err, errHostGone), errors.Is(err, ErrPeerBacklog)
		}
	}
	return false, false
}
