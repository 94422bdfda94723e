package ratelog_test

import (
	"log/slog"
	"os"

	"github.com/berthrt/berth/internal/ratelog"
)

// One line passes; the next 99 in the same second are counted, and the
// line after the interval says how many.
func ExampleLimiter() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	var l ratelog.Limiter
	for range 100 {
		l.Warn(log, "malformed frame", "peer", "n2")
	}
	l.Reset() // as a second later
	l.Warn(log, "malformed frame", "peer", "n2")
	// Output:
	// level=WARN msg="malformed frame" peer=n2
	// level=WARN msg="malformed frame" peer=n2 suppressed=99
}
