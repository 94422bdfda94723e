package tcp

import (
	"slices"
	"strings"
	"time"

	"github.com/berthrt/berth/transport"
)

// The counts part (Stats, Links): what the transport did, for tests and
// metrics.
//
// Owns: Stats and LinkStats and their reading; delivered, which counts an
// item handed to the handler. The counts live in the sessions
// (sessionStats), the Transport (unknown, refused, malformed; removed,
// of removed peers) and the peers (atomics).
// Lock: Transport.mu (read) for the removed peers' counts, then peer.mu
// per peer, not nested in it.
// May call: the sessions' stats, connRTT (rtt_*.go).
// Invariants: reading the counts changes nothing; Stats includes what
// removed peers counted, Links only the current peers.

// Stats counts what the transport did, for tests and metrics.
type Stats struct {
	// Resent is how many items went on the wire again (after a
	// connection ended, or a gap).
	Resent uint64
	// Duplicates is how many items were received again and dropped.
	Duplicates uint64
	// Gaps is how many items arrived after a missing one and were dropped
	// (they come again).
	Gaps uint64
	// Stale is how many envelopes of another incarnation were dropped.
	Stale uint64
	// Lost is how many sent items a peer had not taken when it crashed,
	// restarted or was removed.
	Lost uint64
	// Dropped is how many non-frame items a gracefully closed peer had
	// not taken (frames are Returned).
	Dropped uint64
	// Unknown is how many authenticated connections came from members
	// that are not peers (yet).
	Unknown uint64
	// Refused is how many connections were refused before they carried
	// anything: a failed TLS handshake (no certificate, another CA's, an
	// expired one), a certificate that does not name the member the
	// connection claims, a bad preamble, one meant for another host, too
	// many handshakes at once.
	Refused uint64
	// Malformed is how many connections were closed for a malformed
	// frame.
	Malformed uint64
	// Oversized is how many items past Options.MaxItem were received
	// (their data read and dropped, never kept; the peer's Send refuses
	// them once it knows this host's limit, from its answer to the
	// connection, so this counts only those sent before).
	Oversized uint64
	// Restarts is how many times a peer's frames carried a new
	// incarnation of it: each ended the session with the old one (what
	// it had not taken is Lost), and the handler got Gone then Up. Only
	// the member a connection is authenticated as can claim one of its
	// own.
	Restarts uint64
	// Backlog is how many items Send refused with transport.ErrBacklog:
	// their link held as much as Options.MaxPendingItems or
	// MaxPendingBytes allow of what its peer had not taken.
	Backlog uint64
}

// Stats returns the transport's counts so far.
func (t *Transport) Stats() Stats {
	t.mu.RLock()
	sum := t.removed
	t.mu.RUnlock()
	for _, p := range t.peerList() {
		p.mu.Lock()
		sum.add(p.s.stats)
		p.mu.Unlock()
	}
	return Stats{Resent: sum.resent, Duplicates: sum.duplicates, Gaps: sum.gaps, Stale: sum.stale,
		Lost: sum.lost, Dropped: sum.dropped, Unknown: t.unknown.Load(), Refused: t.refused.Load(), Malformed: t.malformed.Load(),
		Oversized: sum.oversized, Restarts: sum.restarts, Backlog: sum.backlog}
}

// delivered counts an item handed to the handler.
func (p *peer) delivered(it transport.Item) {
	p.recvItems.Add(1)
	p.recvBytes.Add(uint64(len(it.Data)))
}

// LinkStats are one link's counts (Links): what this host sent its peer
// and received from it, and the session's counts for that peer.
type LinkStats struct {
	Peer string
	// SentItems and SentBytes count the items Send accepted for the peer
	// (each once, however often it went on the wire) and their data.
	SentItems, SentBytes uint64
	// ReceivedItems and ReceivedBytes count the items from the peer
	// handed to the handler, and their data.
	ReceivedItems, ReceivedBytes uint64
	// Resent, Duplicates, Gaps and Backlog are Stats' counts of this
	// link alone (since its current session began: a restart of the
	// peer starts them again).
	Resent, Duplicates, Gaps, Backlog uint64
	// Up reports whether the link is up now.
	Up bool
	// RTT is the smoothed round-trip time the kernel measures on the
	// connection this host writes to the peer on (TCP_INFO, Linux only;
	// 0: unknown — no connection, or another system).
	RTT time.Duration
}

// Links returns each current peer's link counts, by peer name.
func (t *Transport) Links() []LinkStats {
	var out []LinkStats
	for _, p := range t.peerList() {
		l := LinkStats{Peer: p.name, SentItems: p.sentItems.Load(), SentBytes: p.sentBytes.Load(),
			ReceivedItems: p.recvItems.Load(), ReceivedBytes: p.recvBytes.Load(), Up: linkState(p.state.Load()) == stUp}
		p.mu.Lock()
		st, conn := p.s.stats, p.out
		p.mu.Unlock()
		l.Resent, l.Duplicates, l.Gaps, l.Backlog = st.resent, st.duplicates, st.gaps, st.backlog
		if conn != nil {
			l.RTT, _ = connRTT(conn) // a connection closed since: unknown
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b LinkStats) int { return strings.Compare(a.Peer, b.Peer) })
	return out
}
