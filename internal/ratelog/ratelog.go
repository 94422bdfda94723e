// Package ratelog rate-limits log lines that other hosts' input causes (a
// malformed item, a refused connection, a frame that cannot be
// delivered): a peer that sends garbage flat out must not flood the log,
// nor slow the host down writing it.
//
// A Tally sums a burst of events of one kind, one per object, into a line
// per Every that counts them (Tally's doc).
//
// Invariants: a Limiter lets at most one line through per Every; the next
// line that passes carries, as "suppressed", how many were held back
// since the last one. It never blocks and is safe for concurrent use.
// The callers print no item contents in the lines they pass it.
package ratelog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Every spaces the lines of one Limiter.
const Every = time.Second

// base is the origin of the limiters' clock (monotonic).
var base = time.Now()

// Limiter is one kind of line. The zero value is ready.
type Limiter struct {
	next       atomic.Int64 // time since base from which the next line passes
	suppressed atomic.Int64 // lines held back since the last one passed
}

// Warn logs msg at Warn with args to log, unless a line of this kind
// passed within Every; then it counts it.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	l.Log(log, slog.LevelWarn, msg, args...)
}

// Info is Warn at Info.
func (l *Limiter) Info(log *slog.Logger, msg string, args ...any) {
	l.Log(log, slog.LevelInfo, msg, args...)
}

// Log is Warn at level.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, msg string, args ...any) {
	now := int64(time.Since(base))
	n := l.next.Load()
	if now < n || !l.next.CompareAndSwap(n, now+int64(Every)) {
		l.suppressed.Add(1)
		return
	}
	if s := l.suppressed.Swap(0); s > 0 {
		args = append(args, "suppressed", s)
	}
	log.Log(context.Background(), level, msg, args...)
}

// Reset lets the next line through at once, as if Every had passed (for
// tests).
func (l *Limiter) Reset() { l.next.Store(0) }
