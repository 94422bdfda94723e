package actor

import (
	"log/slog"

	"github.com/berthrt/berth/internal/ratelog"
)

// Logs that a peer's input causes (a malformed item, a frame that cannot
// be delivered, a relocation record out of place) are rate-limited
// (internal/ratelog): each kind of line passes at most once per
// peerLogEvery; the next one that passes says how many were held back.
// The lines print no item contents.

// peerLogEvery spaces the lines of one kind caused by peers' input.
const peerLogEvery = ratelog.Every

// Events that come one per object in a burst — a host failed and its
// objects are taken over, or a drain or a lapse touches many — are summed
// (ratelog.Tally): one line per peerLogEvery says how many objects and
// messages; each object's detail is at Debug. A host flushes them as it
// closes.
type tallies struct {
	gapsGivenUp   ratelog.Tally // gaps in senders' messages given up on after a host failure (inbox.go)
	droppedLapsed ratelog.Tally // objects another host took over while this host's lease had lapsed (owner.go)
	queueDiscard  ratelog.Tally // moves' temporary queues discarded (mover.go)
	drainRetry    ratelog.Tally // drain moves that failed and try another host (drain.go)
	drainEnded    ratelog.Tally // drained objects no host took: their in-memory state ends (drain.go)
}

// newTallies returns a host's tallies, their lines set.
func newTallies() *tallies {
	return &tallies{
		gapsGivenUp:   ratelog.Tally{Msg: "gaps in senders' messages given up on after a host failure", Level: slog.LevelWarn, Count: "objects", Sum: "messages"},
		droppedLapsed: ratelog.Tally{Msg: "objects another host took over while this host's lease had lapsed are dropped here", Level: slog.LevelInfo, Count: "objects", Sum: "handed_on"},
		queueDiscard:  ratelog.Tally{Msg: "relocation: temporary queues discarded", Level: slog.LevelInfo, Count: "objects", Sum: "messages"},
		drainRetry:    ratelog.Tally{Msg: "drain: moves failed; trying other hosts", Level: slog.LevelInfo, Count: "objects"},
		drainEnded:    ratelog.Tally{Msg: "drain: no host took these objects; they are deactivated and their in-memory state ends", Level: slog.LevelWarn, Count: "objects"},
	}
}

// flush logs what every tally holds.
func (t *tallies) flush() {
	for _, x := range []*ratelog.Tally{&t.gapsGivenUp, &t.droppedLapsed, &t.queueDiscard, &t.drainRetry, &t.drainEnded} {
		x.Flush()
	}
}

// peerLogs are a host's lines caused by peers' input, one limit each.
type peerLogs struct {
	malformed     ratelog.Limiter // items and frames off a link that do not decode
	undeliverable ratelog.Limiter // one-way messages that could not be delivered
	relocation    ratelog.Limiter // relocation records out of place, undecodable frames in moves
	backlog       ratelog.Limiter // messages refused past a peer's budget (Config.PeerInbound)
	link          ratelog.Limiter // items not sent: their link was past its bound
	replyLost     ratelog.Limiter // replies to a host that is not reachable
	stateStore    ratelog.Limiter // state writes that failed and are retried (persist.go)
}
