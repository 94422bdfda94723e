package actor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Logs that a peer's input causes (a malformed item, a frame that cannot
// be delivered, a relocation record out of place) are rate-limited: a peer
// that sends garbage flat out must not flood the log, nor slow the host
// down writing it. Each kind of line passes at most once per
// peerLogEvery; the next one that passes says how many were held back.
// The lines print no item contents.

// peerLogEvery spaces the lines of one kind caused by peers' input.
const peerLogEvery = time.Second

// peerLog is one kind of line caused by peers' input.
type peerLog struct {
	next       atomic.Int64 // nanotime from which the next line passes
	suppressed atomic.Int64 // lines held back since the last one passed
}

// warn logs msg at Warn with args, unless a line of this kind passed
// within peerLogEvery; then it counts it.
func (l *peerLog) warn(log *slog.Logger, msg string, args ...any) {
	l.log(log, slog.LevelWarn, msg, args)
}

// info is warn at Info.
func (l *peerLog) info(log *slog.Logger, msg string, args ...any) {
	l.log(log, slog.LevelInfo, msg, args)
}

func (l *peerLog) log(log *slog.Logger, level slog.Level, msg string, args []any) {
	now := nanotime()
	n := l.next.Load()
	if now < n || !l.next.CompareAndSwap(n, now+int64(peerLogEvery)) {
		l.suppressed.Add(1)
		return
	}
	if s := l.suppressed.Swap(0); s > 0 {
		args = append(args, "suppressed", s)
	}
	log.Log(context.Background(), level, msg, args...)
}

// peerLogs are a host's lines caused by peers' input, one limit each.
type peerLogs struct {
	malformed     peerLog // items and frames off a link that do not decode
	undeliverable peerLog // one-way messages that could not be delivered
	relocation    peerLog // relocation records out of place, undecodable frames in moves
}
