package actor

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/route"
)

// The gaps part (gapFacts): failure facts and what this host reports of
// its gaps; messages waiting to be routed again; the pressure this
// host's senders wait on.
//
// Owns: the failure facts, the gauges and logs of gaps, the messages
// waiting to be routed again, the pressure set and its counters.
// Lock: factsMu, waitMu and pressureSet.mu, all leaves.
// May call: peers (is there a transport), the leaves.
// Invariants: a fact is recorded only from the membership (a host gone)
// and kept for factKeep; facts are bounded (maxFacts).

// overBound notes an arrival past the reorder bound at object ref:
// counted, and (when the sender is told to pause) logged at most once per
// gapLogEvery.
func (gp *gapFacts) overBound(ref Ref, pushed string) {
	gp.overHeld.Add(1)
	if pushed != "" && gp.boundLog.allow(gp.nanotime()) {
		gp.log.Warn("a sender is past the reorder bound of an object: it is told to pause until an older message arrives",
			"object", ref.String(), "sender", pushed, "bound", gp.cfg.ReorderBound)
	}
}

// failed records a failure fact: the membership reported host gone
// without handing on its work (its lease expired, or it left without
// draining).
func (gp *gapFacts) failed(host string, why string) {
	f := route.Fact{At: gp.nanotime(), Window: gp.factWindow(), Wait: int64(gp.cfg.GapTimeout)}
	gp.factsMu.Lock()
	gp.facts = append(gp.facts, f)
	if len(gp.facts) > maxFacts {
		a, b := gp.facts[0], gp.facts[1]
		gp.facts[1] = route.Fact{At: a.At, Window: b.At + b.Window - a.At, Wait: max(a.Wait, b.Wait)}
		gp.facts = append(gp.facts[:0], gp.facts[1:]...)
	}
	gp.factsMu.Unlock()
	gp.failures.Add(1)
	gp.pressure.resumeBy(host) // its pauses end on the fact
	gp.log.Info("a host failed: gaps open now, or opening soon, close after the gap timeout", "failed", host, "why", why)
}

// factWindow is how long after a failure fact a gap that opens still
// counts as caused by it: FollowDuration and GapTimeout. A message that
// died with the failed host leaves its gap open only when the sender's
// next message reaches the object, which can be long after the fact: the
// sender's route to the dead host lives up to RouteCacheTTL, a forwarding
// route up to FollowDuration (always longer), and then the message still
// has its way to go.
func (gp *gapFacts) factWindow() int64 {
	return int64(gp.cfg.FollowDuration + gp.cfg.GapTimeout)
}

// currentFacts returns the failure facts that can still close a gap,
// forgetting the others.
func (gp *gapFacts) currentFacts(now int64) []route.Fact {
	gp.factsMu.Lock()
	defer gp.factsMu.Unlock()
	keep := gp.facts[:0]
	for _, f := range gp.facts {
		if now <= f.At+f.Window+f.Wait+int64(factKeep) {
			keep = append(keep, f)
		}
	}
	clear(gp.facts[len(keep):])
	gp.facts = keep
	if len(keep) == 0 {
		return nil
	}
	return slices.Clone(keep)
}

// rateLimit lets one event through per gapLogEvery; each log line has
// its own.
type rateLimit struct{ next atomic.Int64 }

func (r *rateLimit) allow(now int64) bool {
	n := r.next.Load()
	return now >= n && r.next.CompareAndSwap(n, now+int64(gapLogEvery))
}

// waitToRoute keeps a message this host cannot route for now, to be
// routed again by the next round of routeWaiting: a skip notice whose
// object's host is leaving or that found no way (nothing else would close
// its gap while every host is up), or a message whose look-up the
// Location Store could not answer (errStoreAway: the store out of reach
// or slow, this host's lease not renewed yet — a stall, not a loss). It
// reports false (the caller ends m) if the host is closing or has no
// network, or past the bounds: maxWaiting messages, maxWaitingBytes of
// them (skip notices, which are small, only count).
func (gp *gapFacts) waitToRoute(m *payload.Message) bool {
	skip := m.Header().Flags()&flagSkip != 0
	n := int64(len(m.Frame()))
	gp.waitMu.Lock()
	defer gp.waitMu.Unlock()
	if gp.waitClosed || gp.peers.tr == nil || len(gp.waitList) >= maxWaiting || (!skip && gp.waitingBytes+n > maxWaitingBytes) {
		return false
	}
	gp.waitList = append(gp.waitList, m)
	gp.waitingBytes += n
	gp.waiting.Store(int64(len(gp.waitList)))
	return true
}

// takeWaiting returns the messages waiting to be routed, oldest first,
// and forgets them.
func (gp *gapFacts) takeWaiting() []*payload.Message {
	gp.waitMu.Lock()
	defer gp.waitMu.Unlock()
	ms := gp.waitList
	gp.waitList, gp.waitingBytes = nil, 0
	gp.waiting.Store(0)
	return ms
}

// putBack returns ms (oldest first) to the front of the waiting messages,
// before any that came meanwhile: a round that stopped early keeps the
// rest in their order. It reports false (the caller ends them) if the
// host is closing.
func (gp *gapFacts) putBack(ms []*payload.Message) bool {
	gp.waitMu.Lock()
	defer gp.waitMu.Unlock()
	if gp.waitClosed {
		return false
	}
	for _, m := range ms {
		gp.waitingBytes += int64(len(m.Frame()))
	}
	gp.waitList = append(ms, gp.waitList...)
	gp.waiting.Store(int64(len(gp.waitList)))
	return true
}

// The bounds of the messages waiting to be routed (waitToRoute).
const (
	maxWaiting      = 1 << 16
	maxWaitingBytes = 256 << 20
)

// closeWaiting returns the messages waiting to be routed of a closing host,
// for Close to end, and takes no more from now on.
func (gp *gapFacts) closeWaiting() []*payload.Message {
	gp.waitMu.Lock()
	defer gp.waitMu.Unlock()
	ms := gp.waitList
	gp.waitList, gp.waitClosed, gp.waitingBytes = nil, true, 0
	gp.waiting.Store(0)
	return ms
}

// gapFacts is a host's failure facts and what it reports of its gaps.
type gapFacts struct {
	*hostEnv
	peers     *peers
	factsMu   sync.Mutex   // a leaf
	facts     []route.Fact // guarded by factsMu
	failures  atomic.Int64 // failure facts recorded
	oldestGap atomic.Int64 // ns the oldest gap had waited at the last closeGaps
	overHeld  atomic.Int64 // arrivals that found their sender past the reorder bound
	gapLog    rateLimit    // the long-gap line (closeGaps)
	boundLog  rateLimit    // the past-the-bound line (overBound)
	// waitList: messages waiting to be routed again (waitToRoute), oldest
	// first; waitingBytes their frames' bytes.
	waitMu       sync.Mutex // a leaf
	waitList     []*payload.Message
	waitingBytes int64
	waitClosed   bool
	waiting      atomic.Int64 // len(waitList), read without waitMu (Stats.WaitingToRoute)
	// pressure: objects this host's outside senders wait for (pressure.go);
	// a host's failure ends its pauses.
	pressure *pressureSet
	// peers' budgets (peerbudget.go)
}

// noteOldestGap notes how long the oldest gap had waited at now (the
// gauge), and reports whether its line may be logged now (rate-limited).
func (gp *gapFacts) noteOldestGap(waited, now int64) (logIt bool) {
	gp.oldestGap.Store(waited)
	return waited >= int64(gapReportAfter) && gp.gapLog.allow(now)
}

// anyWaiting reports whether messages wait to be routed again.
func (gp *gapFacts) anyWaiting() bool { return gp.waiting.Load() > 0 }

// maxFacts bounds the failure facts a host keeps; past it the oldest two
// merge into one that covers what both did.
const maxFacts = 64

// factKeep is how long a host keeps a failure fact past its window and
// wait: an owner frozen meanwhile (a move) applies it when it opens.
const factKeep = 10 * time.Minute

// gapLogEvery spaces the log lines about long gaps.
const gapLogEvery = 5 * time.Second

// gapReportAfter is how long a gap waits before the host logs it.
const gapReportAfter = time.Second
