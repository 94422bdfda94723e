package actor

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/route"
)

// The gaps part (gapFacts): failure facts and what this host reports of
// its gaps; skip notices waiting for a leaving host; the pressure this
// host's senders wait on.
//
// Owns: the failure facts, the gauges and logs of gaps, the deferred
// skip notices, the pressure set and its counters.
// Lock: factsMu, skipMu and pressureSet.mu, all leaves.
// May call: the leaves.
// Invariants: a fact is recorded only from the membership (a host gone)
// and kept for factKeep; facts are bounded (maxFacts).

// overBound notes an arrival past the reorder bound at o: counted, and
// (when the sender is told to pause) logged at most once per gapLogEvery.
func (gp *gapFacts) overBound(o *owner, pushed string) {
	h := gp.h
	gp.overHeld.Add(1)
	if pushed != "" && gp.boundLog.allow(nanotime()) {
		h.log.Warn("a sender is past the reorder bound of an object: it is told to pause until an older message arrives",
			"object", o.ref.String(), "sender", pushed, "bound", h.cfg.ReorderBound)
	}
}

// failed records a failure fact: the membership reported host gone
// without handing on its work (its lease expired, or it left without
// draining).
func (gp *gapFacts) failed(host string, why string) {
	h := gp.h
	f := route.Fact{At: nanotime(), Window: gp.factWindow(), Wait: int64(h.cfg.GapTimeout)}
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

// deferSkip keeps a skip notice whose object's host is leaving and takes
// no frames: it is routed again on each move tick (retrySkips) until it
// reaches the object wherever it is handed on — never dropped while every
// host is up, since nothing else would close its gap. It reports false if
// the host is closing.
func (gp *gapFacts) deferSkip(m *payload.Message) bool {
	gp.skipMu.Lock()
	defer gp.skipMu.Unlock()
	if gp.skipClosed {
		return false
	}
	gp.skips = append(gp.skips, m)
	return true
}

// closeSkips releases the deferred skip notices of a closing host.
func (gp *gapFacts) closeSkips() {
	gp.skipMu.Lock()
	ms := gp.skips
	gp.skips, gp.skipClosed = nil, true
	gp.skipMu.Unlock()
	for _, m := range ms {
		m.Release()
	}
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
