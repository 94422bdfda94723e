package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Tally sums events of one kind that come in bursts, one per object (a
// takeover, gaps given up on after a host failure), into one line per
// Every: the first event of a burst starts the interval, and the line at
// its end says how many events there were and the sum of their values. A
// kill that touches 1,500 objects logs a few lines, not 1,500. The
// detail of each event goes to the log at Debug.
//
// Set Msg, Level, Count and Sum before the first Add. Flush logs what is
// held at once; a host calls it when it closes, so that no line waits on
// a timer past it. It is safe for concurrent use.
type Tally struct {
	Msg   string     // the line's message
	Level slog.Level // the line's level
	Count string     // the attribute that counts the events ("objects")
	Sum   string     // the attribute that sums their values ("messages"); "": none

	mu    sync.Mutex
	log   *slog.Logger
	n     int64
	sum   int64
	first time.Time
	timer *time.Timer
}

// Add counts one event of value v, logs its detail (args) at Debug, and
// starts the interval at whose end the line goes out, if none runs.
func (t *Tally) Add(log *slog.Logger, v int64, args ...any) {
	log.Debug(t.Msg, args...)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log = log
	t.n++
	t.sum += v
	if t.timer == nil {
		t.first = time.Now()
		t.timer = time.AfterFunc(Every, t.flush)
	}
}

// Flush logs the events held, if any, at once.
func (t *Tally) Flush() {
	t.mu.Lock()
	if t.timer != nil {
		t.timer.Stop()
	}
	t.mu.Unlock()
	t.flush()
}

// flush logs the events held and starts afresh.
func (t *Tally) flush() {
	t.mu.Lock()
	log, n, sum, first := t.log, t.n, t.sum, t.first
	t.n, t.sum, t.timer = 0, 0, nil
	t.mu.Unlock()
	if n == 0 {
		return
	}
	args := []any{t.Count, n}
	if t.Sum != "" {
		args = append(args, t.Sum, sum)
	}
	args = append(args, "over", time.Since(first).Round(time.Millisecond))
	log.Log(context.Background(), t.Level, t.Msg, args...)
}
