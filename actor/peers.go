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
	n := pr.stats.ownersNow()
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
	stop := context.AfterFunc(pr.life.context(), cancel)
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
	case pr.life.context().Err() != nil:
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

	// Counters of Stats, this part's own.
	sentAgainN   atomic.Int64 // messages a new run sent again from the old run's links (Stats.SentAgain)
	lostOnRejoin atomic.Int64 // items the old run's links had not delivered at a rejoin, not sent again (Stats.LostOnRejoin)
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
				out = append(out, candidate{name: name, load: pr.stats.ownersNow(), version: pr.cfg.AppVersion})
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
	pr.sentAgainN.Add(1)
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
		pr.lostOnRejoin.Add(int64(n))
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

// noteLostOnRejoin counts n items the old run's links had not delivered at
// a rejoin, not sent again (Stats.LostOnRejoin).
func (pr *peers) noteLostOnRejoin(n int) { pr.lostOnRejoin.Add(int64(n)) }

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
