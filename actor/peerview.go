package actor

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/membership"
)

// The peer view (peerView), a leaf of the peers part: what this host
// knows of the other hosts — the members as its membership watch last
// reported them, each peer's link state and load, the runs that failed,
// and the sends waiting on a run.
//
// Owns: the members, the links' states, the failed runs, the published
// copy the send path reads. Lock: peerView.mu (RW), a leaf; the waits a
// failure ends are cancelled after it.
// May call: nothing.
// Invariants: the published copy is rebuilt under mu by every event,
// before apply returns the failed runs.

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

// placed notes that this host sent a new object to host name: until name
// reports its load again, count one more there (so that first messages
// sent close together spread out).
func (v *peerView) placed(name string) {
	v.link(name, func(p *peerLink) { p.placed++ })
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

// linkUp notes that the link to peer name is up (a new link: the peer
// hears this host's load).
func (v *peerView) linkUp(name string) {
	v.link(name, func(p *peerLink) { p.down, p.gone, p.needLoad = false, false, true })
}

// linkDown notes that the link to peer name broke.
func (v *peerView) linkDown(name string) {
	v.link(name, func(p *peerLink) { p.down = true; p.broke() })
}

// linkLeaving notes that peer name is about to leave.
func (v *peerView) linkLeaving(name string) {
	v.link(name, func(p *peerLink) { p.leaving = true; p.broke() })
}

// linkGone notes that peer name left the network.
func (v *peerView) linkGone(name string) {
	v.link(name, func(p *peerLink) { p.broke(); *p = peerLink{gone: true} })
}

// others returns the members' names but self, sorted.
func (v *peerView) others(self string) []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for name := range v.members {
		if name != self {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// hasNewer reports whether a member runs a newer application version
// than this host.
func (v *peerView) hasNewer() bool { return v.newer.Load() }

// closedChan is a closed channel.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// doneCtx is a context that is already done: WaitRoom with it only tells
// whether there is room.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
