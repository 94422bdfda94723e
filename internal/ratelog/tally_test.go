package ratelog

import (
	"bytes"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Events added at once go out as at most one line per Every (how long the
// adds took bounds how many), the lines' counts and sums add up to what
// was added, and the detail of each is at Debug only.
func TestATallySumsABurstIntoALinePerInterval(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	tally := Tally{Msg: "gaps given up on", Level: slog.LevelWarn, Count: "objects", Sum: "messages"}
	began := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 {
				tally.Add(log, 3, "object", strconv.Itoa(g*1000+i))
			}
		}()
	}
	wg.Wait()
	tally.Flush()
	most := 2 + int(time.Since(began)/Every)
	mu.Lock()
	defer mu.Unlock()
	lines := regexp.MustCompile(`level=WARN msg="gaps given up on" objects=(\d+) messages=(\d+) over=`).FindAllStringSubmatch(buf.String(), -1)
	var objects, messages int
	for _, l := range lines {
		o, _ := strconv.Atoi(l[1])
		m, _ := strconv.Atoi(l[2])
		objects, messages = objects+o, messages+m
	}
	if len(lines) < 1 || len(lines) > most || objects != 1600 || messages != 4800 {
		t.Fatalf("%d lines (want 1 to %d) counting %d objects and %d messages (want 1600 and 4800):\n%s", len(lines), most, objects, messages, buf.String())
	}
	if bytes.Contains(buf.Bytes(), []byte("object=")) {
		t.Fatalf("an event's detail was logged above Debug:\n%s", buf.String())
	}
}

// A burst's line goes out at the end of its interval without a Flush, and
// a Flush with nothing held logs nothing.
func TestATallysLineGoesOutAtTheEndOfTheInterval(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tally := Tally{Msg: "taken over", Level: slog.LevelInfo, Count: "objects"}
	tally.Flush()
	tally.Add(log, 0, "object", "a")
	tally.Add(log, 0, "object", "b")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		s := buf.String()
		mu.Unlock()
		if regexp.MustCompile(`level=INFO msg="taken over" objects=2 over=`).MatchString(s) {
			if c := regexp.MustCompile(`level=DEBUG msg="taken over" object=`).FindAllString(s, -1); len(c) != 2 {
				t.Fatalf("%d lines of detail at Debug, want 2:\n%s", len(c), s)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line a minute after the burst:\n%s", s)
		}
	}
}
