package relocation

import (
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/tracetest"
)

// The pause traces (testdata/pause/*.txt) feed a source's and a target's
// PauseClock what their drivers note — records sent and received, the
// seal, the opening — each at a time of its own host's clock (the two
// clocks need not share an epoch), and show the target's figures in its
// Committed and the source's pause. Commands:
//
//	source send Preflight|Prepare|Cutover at=<duration>
//	source recv PreflightReply at=<duration>
//	source recv Committed at=<duration> [paused=<duration> turnaround=<duration>]
//	source seal at=<duration>
//	source pause at=<duration>
//	target recv Prepare|Cutover at=<duration>
//	target open at=<duration>
//	target send Committed at=<duration>
//
// A Committed the source receives is the last one the target sent, unless
// paused and turnaround say otherwise. Regenerate with -rewrite, as the
// move traces.
func TestPauseTraces(t *testing.T) {
	tracetest.Each(t, "testdata/pause/*.txt", func(t *testing.T, path string) {
		w := &pauseWorld{}
		tracetest.Run(t, path, *rewrite, func(cmd string) []string { return w.exec(t, cmd) })
	})
}

type pauseWorld struct {
	src, tgt  PauseClock
	committed *Committed // the last Committed the target sent
}

func (w *pauseWorld) exec(t *testing.T, cmd string) []string {
	fields := strings.Fields(cmd)
	if len(fields) < 3 {
		t.Fatalf("bad command %q", cmd)
	}
	a := args(fields[2:])
	dur := func(k string) time.Duration {
		d, err := time.ParseDuration(a[k])
		if err != nil {
			t.Fatalf("%q: %s: %v", cmd, k, err)
		}
		return d
	}
	now := int64(dur("at"))
	rec := func(name string, received bool) Record {
		switch name {
		case "Preflight":
			return &Preflight{Move: testMove, Object: testObj}
		case "PreflightReply":
			return &PreflightReply{Move: testMove, OK: true}
		case "Prepare":
			return &Prepare{Move: testMove, Object: testObj}
		case "Cutover":
			return &Cutover{Move: testMove}
		case "Committed":
			c := &Committed{Move: testMove, OwnerGen: 4}
			if received && w.committed != nil {
				*c = *w.committed
			}
			if _, ok := a["paused"]; ok {
				c.Paused, c.Turnaround = dur("paused"), dur("turnaround")
			}
			return c
		}
		t.Fatalf("%q: unknown record %q", cmd, name)
		return nil
	}
	committed := func(c *Committed) string {
		return "Committed paused=" + c.Paused.String() + " turnaround=" + c.Turnaround.String()
	}
	clock := &w.src
	if fields[0] == "target" {
		clock = &w.tgt
	} else if fields[0] != "source" {
		t.Fatalf("unknown command %q", cmd)
	}
	switch fields[1] {
	case "seal":
		clock.Sealed(now)
	case "open":
		clock.Opened(now)
	case "send":
		r := rec(fields[2], false)
		sent := clock.Sent(r, now)
		if c, ok := sent.(*Committed); ok {
			if r.(*Committed).Paused != 0 || r.(*Committed).Turnaround != 0 {
				t.Fatalf("%q: the clock changed the machine's Committed", cmd)
			}
			w.committed = c
			return []string{"send " + committed(c)}
		}
	case "recv":
		r := rec(fields[2], true)
		clock.Received(r, now)
		if c, ok := r.(*Committed); ok {
			return []string{"recv " + committed(c)}
		}
	case "pause":
		p, ok := clock.Pause(now)
		if !ok {
			return []string{"no pause: never sealed"}
		}
		return []string{"pause " + p.String()}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	return nil
}
