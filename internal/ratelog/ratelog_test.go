package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lines sent at once pass at most one per Every (how long the sends took
// bounds how many), and the next line to pass says how many were held back.
func TestALimiterPassesOneLineAnIntervalAndCountsTheRest(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	var l Limiter
	began := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				l.Warn(log, "bad input", "peer", "x")
			}
		}()
	}
	wg.Wait()
	most := 1 + int(time.Since(began)/Every)
	mu.Lock()
	lines := strings.Count(buf.String(), "bad input")
	mu.Unlock()
	if lines < 1 || lines > most {
		t.Fatalf("%d lines for 1,000 sent in %v; want 1 to %d", lines, time.Since(began), most)
	}
	l.Reset()
	l.Warn(log, "bad input again")
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "bad input again") || !strings.Contains(buf.String(), "suppressed=") {
		t.Fatalf("the line after a reset is missing or does not count the held-back ones:\n%s", buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
