package actor

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

// The per-peer bound on what a host keeps of one peer's messages, and the
// credit that holds a peer's outside senders below it (docs/architecture.md, "Identity, bounds and hostile input";
// Config.PeerInbound).
//
// The transport bounds what it read from a peer and the handler has not
// taken yet; the handler takes a message at once (it never blocks the
// link: replies to this host's own requests come on it too), so what it
// then keeps is bounded here: the messages off the link that wait for a
// job permit behind the peer's earlier ones (inbound.in), and those that
// wait on the peer's slow lane for a look-up or for room on the link they
// are forwarded on (inbound.slow). A message leaves the budget when its
// admission begins (it holds a permit from then on: the permits bound it)
// or its forward was handed to the transport.
//
// Credit. Each host counts the message frames it sent to a peer (this run
// of it), and the peer counts those it received and, of them, the ones it
// no longer keeps: settled. The peer reports its settled count, and its
// window — half its bound — whenever it grew by an eighth of its bound
// since the last report, and when a waiting sender asked and it keeps
// nothing of the sender's (the arithmetic is below). A send from outside
// the handlers waits (up to SendTimeout, then ErrSendTimeout: nothing was
// sent) while the messages sent and not reported settled fill the window,
// or their bytes with its own do not fit it — but one message always goes
// when nothing is outstanding, whatever its size. So what the
// outside senders of a host that keeps to the protocol have at a peer —
// on the link or kept there — stays within the window, however fast they
// send and however slow the peer's objects are. A report lost with a gone
// peer needs nothing: both sides start counting afresh on that fact.
//
// Refusal. Sends from handlers, forwards and skip notices do not wait for
// credit (one of them may be what a turn that holds the permits waits
// for), so they can fill the other half: past the bound a message from
// the peer is refused — an Ask gets ErrPeerBacklog (Unavailable), a
// one-way message is counted (Stats.PeerRefused) and logged at most once
// a second, and a stamped one leaves its skip notice in its place so the
// object's order does not wait for it. Skip notices (small) have a second
// allowance as large again; past it a skip notice goes back to its
// origin, to be routed there, or, if this host is its origin or the origin
// is gone, is dropped, counted.
//
// Lock order: peerBudget.mu and peerCredit.mu are leaves; no send runs
// under them.

// peerBudget is what this host keeps of one peer's messages and what it
// reported settled (see above). Takes and frames not kept are counted on
// the peer's delivery goroutine; releases on any goroutine. The frames of
// the peer received here are takenN + unkeptN; kept, takenN − relN;
// settled, unkeptN + relN: each message costs one count in and one out,
// and the two halves of the count sit on cache lines of their own (the
// releases are made on other goroutines).
type peerBudget struct {
	lim            mailbox.Limits
	shiftN, shiftB uint8               // a check every 2^shift counts out, or bytes (check)
	send           func(*creditReport) // sends a credit report to the peer

	// Written by the peer's delivery goroutine only.
	takenN, takenB     atomic.Int64 // received frames kept, counted in
	unkeptN, unkeptB   atomic.Int64 // received frames never kept (refused, undeliverable, …)
	relSeenN, relSeenB int64        // relN and relB as take last read them (they only grow)
	_                  [64]byte
	relN, relB         atomic.Int64 // received frames kept, counted out
	waiting            atomic.Bool  // the peer asked for a report: it waits for credit
	_                  [64]byte
	skipN, skipB       atomic.Int64 // skip notices kept in place of refused frames (rare)

	repN, repB atomic.Int64 // settled counts last reported (written under mu)
	mu         sync.Mutex   // a leaf: guards sending
	sending    bool         // a goroutine is reporting
}

// kept returns the received frames, and their bytes, kept now.
func (b *peerBudget) kept() (int64, int64) {
	relN, relB := b.relN.Load(), b.relB.Load() // first: a count out never precedes its count in
	return b.takenN.Load() - relN, b.takenB.Load() - relB
}

// take counts a kept message of n bytes — a skip notice if skip — and
// reports false, counting nothing, past the bound (the skip notices'
// allowance for skip). One message always fits an empty budget, whatever
// its size.
func (b *peerBudget) take(n int64, skip bool) bool {
	// What is kept, from the counts out as last read: at least the true
	// count. They are read afresh (a cache line the releases write) only
	// when that comes near the window.
	keptN, keptB := b.takenN.Load()-b.relSeenN, b.takenB.Load()-b.relSeenB
	if 2*(keptN+1) > int64(b.lim.Items) || 2*(keptB+n) > b.lim.Bytes {
		b.relSeenN, b.relSeenB = b.relN.Load(), b.relB.Load()
		keptN, keptB = b.takenN.Load()-b.relSeenN, b.takenB.Load()-b.relSeenB
	}
	items, bytes := keptN, keptB
	if skipN := b.skipN.Load(); skipN != 0 {
		items, bytes = items+skipN, bytes+b.skipB.Load()
	}
	maxItems, maxBytes := int64(b.lim.Items), b.lim.Bytes
	if skip {
		maxItems, maxBytes = 2*maxItems, 2*maxBytes
	}
	if items > 0 && (items >= maxItems || bytes+n > maxBytes) {
		return false
	}
	if skip {
		b.skipN.Add(1)
		b.skipB.Add(n)
	} else {
		b.takenN.Add(1)
		b.takenB.Add(n)
	}
	return true
}

// release counts a kept message of n bytes out (a skip notice if skip)
// and reports the peer's credit if it is due (report).
func (b *peerBudget) release(n int64, skip bool) {
	if skip {
		b.skipN.Add(-1)
		b.skipB.Add(-n)
		return
	}
	if b.check(b.relN.Add(1), b.relB.Add(n), n) || b.waiting.Load() {
		b.report(false)
	}
}

// unkept counts a frame of n bytes off the link that onFrame did not keep
// and, as release, reports the peer's credit if it is due.
func (b *peerBudget) unkept(n int64) {
	if b.check(b.unkeptN.Add(1), b.unkeptB.Add(n), n) || b.waiting.Load() {
		b.report(false)
	}
}

// settled returns how many frames of the peer, and bytes, this host
// received and no longer keeps.
func (b *peerBudget) settled() (int64, int64) {
	relN, relB := b.relN.Load(), b.relB.Load()
	return b.unkeptN.Load() + relN, b.unkeptB.Load() + relB
}

// The report's arithmetic. The settled count is reported when it grew by
// a step (an eighth of the bound, in messages or bytes) since the last
// report, checked whenever the count of messages let go of (released, or
// never kept) passes a multiple of about a 32nd of the bound, in messages
// or bytes (a message that large always passes one): a sender that sends
// flat out hears of its credit about eight times a window, and rarely
// waits. A sender that waits asks for a report
// (a creditAsk; once per report it got); the host then also reports as
// soon as it keeps nothing of the peer's and the count changed since its
// last report — so a waiting sender is told once everything it sent has
// been let go of here, whatever the step.

// step returns the growth of the settled count that is reported.
func (b *peerBudget) step() (int64, int64) {
	return max(1, int64(b.lim.Items)/8), max(1, b.lim.Bytes/8)
}

// check reports whether a count of messages let go of that came to count
// messages and bytes bytes (n more) passed a multiple of a 32nd of the
// bound (rounded down to a power of two: shifts, no division on the
// message path).
func (b *peerBudget) check(count, bytes, n int64) bool {
	return count>>b.shiftN != (count-1)>>b.shiftN || bytes>>b.shiftB != (bytes-n)>>b.shiftB
}

// setLimits sets the bound and the check cadence that goes with it.
func (b *peerBudget) setLimits(lim mailbox.Limits) {
	b.lim = lim
	b.shiftN = uint8(bits.Len64(uint64(max(1, int64(lim.Items)/32))) - 1)
	b.shiftB = uint8(bits.Len64(uint64(max(1, lim.Bytes/32))) - 1)
}

// report sends the peer its settled counts if they are due — they grew by
// a step since the last report, or the peer waits and this host keeps
// nothing of its (see above) — or with force in any case (the peer came
// up and has yet to learn the window): one goroutine at a time, the
// newest counts last, no lock held across the send.
func (b *peerBudget) report(force bool) {
	stepN, stepB := b.step()
	grown := func() bool {
		n, by := b.settled()
		dn, db := n-b.repN.Load(), by-b.repB.Load()
		if dn >= stepN || db >= stepB {
			return true
		}
		if b.waiting.Load() && (dn != 0 || db != 0) {
			keptN, keptB := b.kept()
			return keptN == 0 && keptB == 0
		}
		return false
	}
	if !force && !grown() {
		return // the common case: no lock
	}
	b.mu.Lock()
	if b.sending {
		b.mu.Unlock()
		return // the reporting goroutine reports the newest counts after its send
	}
	b.sending = true
	for {
		n, by := b.settled()
		if n == b.repN.Load() && by == b.repB.Load() && !force {
			break
		}
		force = false
		b.repN.Store(n)
		b.repB.Store(by)
		if keptN, keptB := b.kept(); keptN == 0 && keptB == 0 {
			b.waiting.Store(false) // told of everything: the peer asks again if it must
		}
		b.mu.Unlock()
		b.send(&creditReport{settledN: uint64(max(n, 0)), settledB: uint64(max(by, 0)),
			windowN: uint64(b.lim.Items / 2), windowB: uint64(b.lim.Bytes / 2)})
		b.mu.Lock()
		if !grown() {
			break
		}
	}
	b.sending = false
	b.mu.Unlock()
}

// restart starts the counts afresh for a new run of the peer (the old one
// is gone): what it sent and this host still keeps is counted as settled
// when it leaves, as if the new run had sent it.
func (b *peerBudget) restart() {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Settled becomes 0 by taking it off the count of frames not kept
	// (an Add: a frame of the new run counted meanwhile is not lost).
	n, by := b.settled()
	b.unkeptN.Add(-n)
	b.unkeptB.Add(-by)
	b.repN.Store(0)
	b.repB.Store(0)
}

// asked notes that the peer waits for credit (a creditAsk) and reports at
// once if it keeps nothing of the peer's and has not reported everything.
func (b *peerBudget) asked() {
	b.waiting.Store(true)
	b.report(false)
}

// creditAsk asks a peer for a credit report: this host's outside senders
// wait for credit.
type creditAsk struct{}

// creditReport tells a peer how many of its message frames (and bytes)
// this host received and no longer keeps, and how many it may have
// outstanding here.
type creditReport struct {
	settledN, settledB uint64
	windowN, windowB   uint64
}

// peerCredit is this host's count of what it sent to a peer and what the
// peer reported settled: its outside senders wait while the difference
// fills the peer's window.
type peerCredit struct {
	sentN, sentB atomic.Int64
	setN, setB   atomic.Int64 // as last reported
	winN, winB   atomic.Int64 // the peer's window, as last reported

	asking  atomic.Bool  // a creditAsk was sent and no report came since
	reports atomic.Int64 // reports taken in

	mu   sync.Mutex    // a leaf: guards wake
	wake chan struct{} // closed at the next report (or reset); nil: nobody waits
}

// open reports whether an outside send of n bytes may go now: the
// messages outstanding at the peer are fewer than its window, and those
// bytes with n fit it — or nothing is outstanding (one message always
// goes, whatever its size).
func (c *peerCredit) open(n int64) bool {
	outB := c.sentB.Load() - c.setB.Load()
	return c.sentN.Load()-c.setN.Load() < c.winN.Load() && (outB+n <= c.winB.Load() || outB <= 0)
}

// ask reports whether this host is to ask the peer for a report now (it
// did not since the last report).
func (c *peerCredit) ask() bool { return c.asking.CompareAndSwap(false, true) }

// waitCh returns a channel closed at the next report or reset.
func (c *peerCredit) waitCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	return c.wake
}

// wakeAll wakes the senders waiting for credit.
func (c *peerCredit) wakeAll() {
	c.mu.Lock()
	ch := c.wake
	c.wake = nil
	c.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// apply takes a report in (counts only grow: a report overtaken by a
// newer one changes nothing).
func (c *peerCredit) apply(r *creditReport) {
	raise(&c.setN, int64(r.settledN))
	raise(&c.setB, int64(r.settledB))
	if r.windowN > 0 && r.windowB > 0 {
		c.winN.Store(int64(min(r.windowN, 1<<62)))
		c.winB.Store(int64(min(r.windowB, 1<<62)))
	}
	c.asking.Store(false)
	c.reports.Add(1)
	c.wakeAll()
}

// reset starts the counts afresh (the peer is gone; a new run of it
// counts from zero).
func (c *peerCredit) reset() {
	c.sentN.Store(0)
	c.sentB.Store(0)
	c.setN.Store(0)
	c.setB.Store(0)
	c.asking.Store(false)
	c.wakeAll()
}

func raise(v *atomic.Int64, to int64) {
	for {
		cur := v.Load()
		if to <= cur || v.CompareAndSwap(cur, to) {
			return
		}
	}
}

// budgetBytes is what message m counts in a budget: its frame's length,
// at most 4 GiB (a pendingSend keeps it in 32 bits).
func budgetBytes(m *payload.Message) int64 { return budgetLen(m.Len()) }

// budgetLen is what a frame of n bytes counts in a budget and in credit.
func budgetLen(n int) int64 { return min(int64(n), math.MaxUint32) }

// sent counts a message frame of n bytes sent to the peer.
func (c *peerCredit) sent(n int) {
	c.sentN.Add(1)
	c.sentB.Add(budgetLen(n))
}
