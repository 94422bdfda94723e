package tcp

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/berthrt/berth/internal/tracetest"
	"github.com/berthrt/berth/transport"
)

// The trace tests replay scripts of inputs (testdata/*.txt, one scenario
// each; format: package internal/tracetest) against the session machines
// of two hosts, a and b, and the envelopes in flight between them, and
// compare what the machines output with the expected trace. Regenerate the
// expected traces with
//
//	go test ./transport/tcp -run TestSessionTraces -rewrite
//
// only when you understand the diff.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected traces in testdata")

func TestSessionTraces(t *testing.T) {
	tracetest.Each(t, "testdata/*.txt", runTrace)
}

// traceHost is one host of a trace: its machine and what its handler got.
type traceHost struct {
	name  string
	cfg   *sessionConfig
	s     *session
	last  uint64 // the last item delivered (for "taken")
	epoch uint32
}

type traceWorld struct {
	hosts map[string]*traceHost
	wire  map[string][]Envelope // "ab": from a to b
}

func traceConfig(name string, inc uint64) *sessionConfig {
	return &sessionConfig{local: name, inc: inc, ackEvery: 4, heartbeatTicks: 3, downTicks: 6, resendTicks: 4,
		highItems: 4, highBytes: 1 << 20, maxItems: 6, maxBytes: 1 << 20}
}

func runTrace(t *testing.T, path string) {
	w := &traceWorld{hosts: map[string]*traceHost{}, wire: map[string][]Envelope{}}
	for _, n := range []string{"a", "b"} {
		h := &traceHost{name: n, cfg: traceConfig(n, 1)}
		h.s = newSession(h.cfg)
		w.hosts[n] = h
	}
	tracetest.Run(t, path, *rewrite, func(cmd string) []string { return w.exec(t, cmd) })
}

func (w *traceWorld) other(n string) string {
	if n == "a" {
		return "b"
	}
	return "a"
}

func fmtEnvelope(e *Envelope) string {
	var b strings.Builder
	b.WriteString([...]string{"?", "item", "bye", "hello", "crash", "byeack"}[e.Op])
	if e.Op == opItem || e.Op == opBye {
		fmt.Fprintf(&b, " %d", e.Seq)
	}
	if e.Op == opItem {
		fmt.Fprintf(&b, " %v %q", transport.Kind(e.Kind), e.Data)
	}
	fmt.Fprintf(&b, " ack=%d taken=%d", e.Ack, e.Taken)
	if e.ToInc != 0 {
		fmt.Fprintf(&b, " to=%d", e.ToInc)
	}
	if e.Flags&flagLeaving != 0 {
		b.WriteString(" leaving")
	}
	if e.Flags&flagGap != 0 {
		b.WriteString(" gap")
	}
	return b.String()
}

// apply runs one input of host h and renders its outputs.
func (w *traceWorld) apply(h *traceHost, indent string, f func(o *output)) []string {
	var o output
	f(&o)
	var lines []string
	to := w.other(h.name)
	for _, e := range o.send {
		lines = append(lines, indent+h.name+">"+to+" "+fmtEnvelope(&e))
		w.wire[h.name+to] = append(w.wire[h.name+to], e)
	}
	for _, d := range o.deliver {
		switch d.what {
		case dItem:
			lines = append(lines, fmt.Sprintf("%s%s: deliver %d %v %q", indent, h.name, d.seq, d.item.Kind, d.item.Data))
			h.last, h.epoch = d.seq, d.epoch
		case dReturned:
			lines = append(lines, fmt.Sprintf("%s%s: returned %v %q", indent, h.name, d.item.Kind, d.item.Data))
		case dEvent:
			lines = append(lines, fmt.Sprintf("%s%s: event %v", indent, h.name, d.event))
		}
	}
	return lines
}

func kindOf(t *testing.T, s string) transport.Kind {
	for k := transport.Frame; k <= transport.Reply; k++ {
		if k.String() == s {
			return k
		}
	}
	t.Fatalf("unknown kind %q", s)
	return 0
}

// exec runs one command:
//
//	send <host> <kind> <data>...   the host sends items (one per data)
//	deliver|drop <ab|ba> [n=N]     the first N envelopes in flight (all)
//	dup <ab|ba>                    the first envelope in flight arrives twice
//	swap <ab|ba>                   the first two envelopes in flight swap
//	taken <host>                   the handler took all delivered so far
//	tick <host> [n=N]              N ticks
//	conndown <host>                the host's connection to the other broke
//	restart <host>                 the host's process restarts (new incarnation)
//	hello <host>                   the host says hello (as AddPeer does)
//	run <host> <inc>               the host's membership reports the other's run (AddPeerRun)
//	forge <ab|ba> <inc>            a hello of incarnation inc arrives, as from the first host
//	leave <host> | close <host> graceful|crash | remove <host>
//	state                          both sessions' state
//	backlog <host>                 whether the host's link is at its hard bound
func (w *traceWorld) exec(t *testing.T, cmd string) []string {
	f := strings.Fields(cmd)
	n := -1
	for _, a := range f {
		if v, ok := strings.CutPrefix(a, "n="); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	host := func() *traceHost {
		h := w.hosts[f[1]]
		if h == nil {
			t.Fatalf("bad host in %q", cmd)
		}
		return h
	}
	switch f[0] {
	case "send":
		h := host()
		var lines []string
		for _, d := range f[3:] {
			lines = append(lines, w.apply(h, "", func(o *output) {
				if err := h.s.send(transport.Item{Kind: kindOf(t, f[2]), Data: []byte(d)}, o); err != nil {
					lines = append(lines, fmt.Sprintf("%s: send %s: %v", h.name, d, err))
				}
			})...)
		}
		return lines
	case "deliver", "drop":
		q := w.wire[f[1]]
		if n < 0 || n > len(q) {
			n = len(q)
		}
		batch := q[:n:n]
		w.wire[f[1]] = q[n:]
		to := w.hosts[f[1][1:]]
		var lines []string
		for _, e := range batch {
			if f[0] == "drop" {
				lines = append(lines, "dropped "+f[1][:1]+">"+f[1][1:]+" "+fmtEnvelope(&e))
				continue
			}
			lines = append(lines, "recv "+f[1][:1]+">"+f[1][1:]+" "+fmtEnvelope(&e))
			lines = append(lines, w.apply(to, "  ", func(o *output) { to.s.receive(&e, o) })...)
		}
		return lines
	case "dup":
		q := w.wire[f[1]]
		if len(q) == 0 {
			t.Fatalf("%q: nothing in flight", cmd)
		}
		w.wire[f[1]] = append([]Envelope{q[0]}, q...)
		return []string{"duplicated " + fmtEnvelope(&q[0])}
	case "swap":
		q := w.wire[f[1]]
		if len(q) < 2 {
			t.Fatalf("%q: fewer than two envelopes in flight", cmd)
		}
		q[0], q[1] = q[1], q[0]
		return []string{"swapped " + fmtEnvelope(&q[1]) + " and " + fmtEnvelope(&q[0])}
	case "backlog":
		h := host()
		return []string{fmt.Sprintf("%s: backlogged=%v refused=%d", h.name, h.s.backlogged(), h.s.stats.backlog)}
	case "taken":
		h := host()
		return w.apply(h, "", func(o *output) { h.s.takenThrough(h.epoch, h.last, o) })
	case "tick":
		h := host()
		if n < 0 {
			n = 1
		}
		var lines []string
		for range n {
			lines = append(lines, w.apply(h, "", h.s.tick)...)
		}
		return lines
	case "conndown":
		h := host()
		return w.apply(h, "", h.s.connDown)
	case "restart":
		h := host()
		h.cfg = traceConfig(h.name, h.cfg.inc+1)
		h.s, h.last, h.epoch = newSession(h.cfg), 0, 0
		return w.apply(h, "", func(o *output) { h.s.hello(o) })
	case "hello":
		h := host()
		return w.apply(h, "", func(o *output) { h.s.hello(o) })
	case "run":
		h := host()
		run, _ := strconv.ParseUint(f[2], 10, 64)
		return w.apply(h, "", func(o *output) { h.s.learnRun(run, o) })
	case "forge":
		inc, _ := strconv.ParseUint(f[2], 10, 64)
		to := w.hosts[f[1][1:]]
		e := Envelope{FromInc: inc, Op: opHello}
		return append([]string{"forged " + f[1][:1] + ">" + f[1][1:] + " " + fmtEnvelope(&e)},
			w.apply(to, "  ", func(o *output) { to.s.receive(&e, o) })...)
	case "leave":
		h := host()
		return w.apply(h, "", h.s.leave)
	case "close":
		h := host()
		return w.apply(h, "", func(o *output) { h.s.close(f[2] == "graceful", h.epoch, h.last, o) })
	case "remove":
		h := host()
		return w.apply(h, "", h.s.remove)
	case "state":
		var lines []string
		for _, name := range []string{"a", "b"} {
			s := w.hosts[name].s
			lines = append(lines, fmt.Sprintf("%s: %v out=%d acked=%d peerTaken=%d recvd=%d taken=%d blocked=%v closed=%v lost=%d resent=%d dups=%d gaps=%d stale=%d",
				name, s.state, s.pendingOut(), s.acked, s.peerTaken, s.recvd, s.taken, s.blocked, s.closing && s.closed(),
				s.stats.lost, s.stats.resent, s.stats.duplicates, s.stats.gaps, s.stats.stale))
		}
		return lines
	}
	t.Fatalf("unknown command %q", cmd)
	return nil
}
