package actor

import "github.com/berthrt/berth/internal/ratelog"

// Logs that a peer's input causes (a malformed item, a frame that cannot
// be delivered, a relocation record out of place) are rate-limited
// (internal/ratelog): each kind of line passes at most once per
// peerLogEvery; the next one that passes says how many were held back.
// The lines print no item contents.

// peerLogEvery spaces the lines of one kind caused by peers' input.
const peerLogEvery = ratelog.Every

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
