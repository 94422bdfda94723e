package actor

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// hostEnv is the value every part of a host is given (by pointer; the
// host's own copy): the configuration, the host's name, its Observer,
// tracer and logger, the payload pool and codec registry, and the
// rate-limited lines. None of it is another part: it is set by NewHost and
// read-only after it (the limiters and tallies are safe for concurrent
// use).
type hostEnv struct {
	cfg      Config
	name     string
	obs      observer // the Config's Observer (a no-op one if none)
	trace    *tracing // the Config's TracerProvider's tracer; nil if none (trace.go)
	log      *slog.Logger
	pool     *payload.Pool
	reg      *payload.Registry
	peerLogs peerLogs // rate limits of the lines peers' input causes (peerlog.go)
	tallies  *tallies // lines that sum bursts of per-object events (peerlog.go)

	// clock is Config.clock: nil for the process's clock (nanotime),
	// which the host's own nanotime then reads at no extra cost.
	// lanes counts the goroutines of the host's serial lanes (a move's, a
	// peer's slow lane, a look-up lane, a check's): the services' group,
	// which Close waits for.
	lanes *sync.WaitGroup

	clock     clock
	clockBase time.Time // the clock's time when the host was made, less a second
}

// nanotime is the host's monotonic clock in nanoseconds: the process's
// (the package's nanotime) unless a test gave the host a clock, then that
// clock's time since the host was made, plus a second (a reading is never
// 0, which some fields take for "never").
func (e *hostEnv) nanotime() int64 {
	if e.clock == nil {
		return nanotime() // inlined: the hot path costs what it did before the clock
	}
	return e.clockNano()
}

// clockNano is nanotime on a test's clock.
func (e *hostEnv) clockNano() int64 { return int64(e.clock.Now().Sub(e.clockBase)) }

// jobQueue is the host-wide application job queue: the permits every
// application message holds from its admission to the end of its turn
// (mailbox.Permits), and the lanes' queued counts (mailbox.Counters).
type jobQueue struct {
	permits  *mailbox.Permits
	counters mailbox.Counters
}

// observer is the Config's Observer, and whether there is one (turns are
// timed only then).
type observer struct {
	Observer
	timed bool
}

var clockBase = time.Now()

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

func itoa(i int) string { return strconv.Itoa(i) }

// minLevel drops records below a level (protoactor logs chattily at Info).
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(a), m.min}
}

func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{m.Handler.WithGroup(g), m.min} }

// wallNano approximates the wall clock in Unix nanoseconds from the
// monotonic clock, which is cheaper to read; it drifts from the wall clock
// only by clock adjustments since the process started, which is precise
// enough for skipping expired work.
func wallNano() int64 { return clockBaseWall + nanotime() }

var clockBaseWall = clockBase.UnixNano()

// wallNanoOf returns t on wallNano's scale: the process's start on the
// wall clock plus t's monotonic distance from it. A step of the wall clock
// since the start (NTP) moves neither t's figure nor wallNano's, so a
// deadline compared with wallNano keeps its length. t must carry a
// monotonic reading (time.Now and what is added to it do).
func wallNanoOf(t time.Time) int64 { return wallNanoOfFrom(t, clockBase, clockBaseWall) }

// wallNanoOfFrom is wallNanoOf for a start base, whose wall clock read
// baseWall.
func wallNanoOfFrom(t, base time.Time, baseWall int64) int64 {
	return baseWall + int64(t.Sub(base))
}

func durationNs(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}

// tracing is a host's tracing (Config.TracerProvider). A host without a
// tracer provider has none (a nil *tracing): its sends and turns check
// that one pointer and do nothing else for tracing.
//
// Owns: the tracer and the host's name attribute; immutable after NewHost.
type tracing struct {
	tracer trace.Tracer
	host   attribute.KeyValue
}
