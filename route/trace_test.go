package route

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/berthrt/berth/internal/tracetest"
)

// The trace tests replay scripts (testdata/*.txt, one rule or interleaving
// each; format: package internal/tracetest) against a small simulated
// world that uses only the public API of package route. Regenerate the
// expected traces with
//
//	go test ./route -run TestTraces -rewrite
//
// only when you understand the diff, and read every changed trace.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected traces in testdata")

func TestTraces(t *testing.T) {
	tracetest.Each(t, "testdata/*.txt", runTrace)
}

func runTrace(t *testing.T, path string) {
	w := newWorld()
	tracetest.Run(t, path, *rewrite, func(cmd string) []string { return w.exec(t, cmd) })
}

// world is everything the scripts act on: one Order (order commands), one
// Streams (stream commands), a Table per host, and for the interleavings
// an object o that moves between hosts with its Order and Trail, and FIFO
// links between hosts. Time (now) is set by any at=NS argument.
type world struct {
	now int64

	in      *Inbox[string]
	facts   []Fact // the host's failure facts (fail)
	kept    []kept // what a frozen inbox told the driver to keep
	streams *Streams
	failed  map[Hand]bool // host runs the sender knows failed (stream-fail)
	tables  map[string]*Table
	objs    []string // object names used, in order

	// the object o
	hosts    []string
	owner    string
	gen      uint64
	trail    Trail
	senders  map[string]*Streams
	links    map[string][]msg // "from>to"
	linkKeys []string         // in order of first use
	ran      []string
}

// hand parses a host run written host:run.
func hand(s string) Hand {
	host, run, _ := strings.Cut(s, ":")
	n, _ := strconv.ParseUint(run, 10, 64)
	return Hand{Host: host, Run: n}
}

// kept is a message a frozen inbox left to its driver.
type kept struct {
	sender string
	stamp  Stamp
	item   string
}

// msg is a message for o in flight.
type msg struct {
	name   string
	origin string
	stamp  Stamp
	hop    Hop
}

const (
	worldIdle = 1_000_000 // stream idle time in the world: long
	worldTTL  = 1_000_000 // route and follow lifetime in the world
)

var objO = obj("o")

func obj(name string) Object { return Object{Kind: "obj", ID: name} }

func newWorld() *world {
	return &world{in: &Inbox[string]{}, tables: map[string]*Table{}, links: map[string][]msg{}, senders: map[string]*Streams{}}
}

func (w *world) table(host string) *Table {
	t := w.tables[host]
	if t == nil {
		t = &Table{}
		w.tables[host] = t
	}
	return t
}

func (w *world) object(name string) Object {
	for _, n := range w.objs {
		if n == name {
			return obj(name)
		}
	}
	w.objs = append(w.objs, name)
	return obj(name)
}

// parseArgs splits fields into positional arguments and key=value ones.
func parseArgs(fields []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	return pos, kv
}

func (w *world) exec(t *testing.T, cmd string) []string {
	fields := strings.Fields(cmd)
	pos, kv := parseArgs(fields[1:])
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%q: bad number %q", cmd, s)
		}
		return n
	}
	unum := func(s string) uint64 { return uint64(num(s)) }
	need := func(n int) {
		if len(pos) < n {
			t.Fatalf("%q: want %d arguments", cmd, n)
		}
	}
	if at, ok := kv["at"]; ok {
		w.now = num(at)
	}
	var out []string
	emit := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }

	switch fields[0] {
	// Order of one object.
	case "order":
		w.in = &Inbox[string]{}
		if m, ok := kv["max-held"]; ok {
			w.in.Order().MaxHeld = int(num(m))
		}
	case "offer", "again":
		need(4)
		w.offer(pos[0], Stamp{Epoch: unum(pos[1]), Seq: unum(pos[2])}, pos[3], fields[0] == "again", "", emit)
	case "skip":
		need(3)
		w.skip(pos[0], Stamp{Epoch: unum(pos[1]), Seq: unum(pos[2])}, emit)
	case "fail":
		// A failure fact on the host: a host gone at=, covering gaps
		// open then or opening within window=, closing them after wait=.
		w.facts = append(w.facts, Fact{At: w.now, Window: num(kv["window"]), Wait: num(kv["wait"])})
		emit("facts %d", len(w.facts))
	case "takeover":
		w.in.TakenOver(w.now, num(kv["window"]), num(kv["wait"]))
	case "close-gaps":
		emit("closed %d senders", w.in.CloseGaps(w.now, w.facts))
		w.drain("", emit)
	case "oldest-gap":
		if g, ok := w.in.Order().OldestGap(w.now); ok {
			emit("%s waited=%d held=%d missing=%d", g.Sender, g.Waited, g.Held, g.Missing)
		} else {
			emit("no gap")
		}
	case "freeze":
		w.in.Freeze()
		emit("%s", w.in.State())
	case "thaw":
		// The driver opens the inbox and offers what it kept, in order.
		w.in.Thaw()
		emit("%s", w.in.State())
		k := w.kept
		w.kept = nil
		for _, m := range k {
			if strings.HasPrefix(m.item, "skip") {
				w.skip(m.sender, m.stamp, emit)
			} else {
				w.offer(m.sender, m.stamp, m.item, false, "", emit)
			}
		}
	case "shut":
		held := w.in.Shut()
		emit("%s, handed back [%s]", w.in.State(), strings.Join(held, " "))
	case "forget":
		w.ord().Forget(w.now, num(kv["idle"]))
		emit("senders %d", w.ord().Senders())
	case "state":
		snap := w.ord().Snapshot(w.now, frame)
		for _, s := range snap.Senders {
			e, n := w.ord().Expected(s.Sender)
			emit("%s epoch=%d next=%d held=%s", s.Sender, e, n, fmtHeld(s.Held))
		}
		c := w.ord().TakeCounts()
		emit("held %d, counts gaps-closed=%d late=%d skipped=%d repeats=%d", w.in.Held(), c.GapsClosed, c.Late, c.Skipped, c.Repeats)
	case "snapshot-restore":
		var b []byte
		w.in, b = roundTrip(t, w.in, nil, w.now)
		emit("snapshot %d bytes", len(b))
		snap, _ := DecodeSnapshot(b)
		for _, s := range snap.Senders {
			emit("  %s epoch=%d next=%d unsure=%d idle=%d waited=%d held=%s", s.Sender, s.Epoch, s.Next, s.Unsure, s.Idle, s.Waited, fmtHeld(s.Held))
		}

	// Streams of one sending host.
	case "streams":
		w.streams = NewStreams(100, 1, num(kv["idle"]))
	case "stamp":
		need(1)
		st := w.streams.Next(w.object(pos[0]), w.now)
		emit("%s epoch=%d seq=%d", pos[0], st.Epoch, st.Seq)
	case "prune":
		emit("streams %d", w.streams.Prune(w.now))
	case "stamp-to":
		need(1)
		st := w.streams.NextTo(w.object(pos[0]), w.now, hand(kv["to"]), func(h Hand) bool { return w.failed[h] })
		emit("%s epoch=%d seq=%d", pos[0], st.Epoch, st.Seq)
	case "handed":
		need(1)
		w.streams.Handed(w.object(pos[0]), Stamp{Epoch: unum(kv["epoch"]), Seq: unum(kv["seq"])}, hand(kv["to"]))
	case "stream-fail":
		need(1)
		if w.failed == nil {
			w.failed = map[Hand]bool{}
		}
		w.failed[hand(pos[0])] = true

	// Tables and Forward.
	case "learn":
		need(4)
		e := Entry{Host: pos[2], Gen: unum(pos[3]), Expires: w.now + num(kv["ttl"]), Follow: len(pos) > 4 && pos[4] == "follow"}
		if !w.table(pos[0]).Learn(w.object(pos[1]), e, w.now) {
			emit("ignored")
		}
		emit("%s", w.lookup(pos[0], pos[1]))
	case "update":
		need(4)
		if !w.table(pos[0]).Update(w.object(pos[1]), pos[2], unum(pos[3]), w.now) {
			emit("unchanged")
		}
		emit("%s", w.lookup(pos[0], pos[1]))
	case "lookup":
		need(2)
		emit("%s", w.lookup(pos[0], pos[1]))
	case "forget-host":
		need(2)
		w.table(pos[0]).ForgetHost(pos[1])
		for _, o := range w.objs {
			emit("%s", w.lookup(pos[0], o))
		}
	case "forward":
		need(1)
		name := "o"
		if o, ok := kv["obj"]; ok {
			name = o
		}
		e, ok := w.table(pos[0]).Lookup(w.object(name), w.now)
		emit("%s", fmtDecision(Forward(hopArgs(kv, unum), e, ok, pos[0])))
	case "placed":
		emit("%s", fmtDecision(Placed(hopArgs(kv, unum), kv["host"], unum(kv["storegen"]), kv["here"])))

	// The world of one moving object.
	case "world":
		w.hosts = strings.Split(kv["hosts"], ",")
		w.owner, w.gen = kv["owner"], 1
		w.object("o")
		emit("o at %s gen %d", w.owner, w.gen)
	case "send":
		need(2)
		w.known(t, pos[0])
		w.send(pos[0], pos[1], emit)
	case "deliver":
		need(2)
		w.known(t, pos[0], pos[1])
		w.deliver(t, pos[0], pos[1], emit)
	case "move":
		need(1)
		w.known(t, pos[0])
		w.move(t, pos[0], emit)
	case "links":
		n := len(out)
		for _, k := range w.linkKeys {
			if q := w.links[k]; len(q) > 0 {
				var names []string
				for _, m := range q {
					names = append(names, m.name)
				}
				emit("%s: %s", k, strings.Join(names, " "))
			}
		}
		if len(out) == n {
			emit("nothing in flight")
		}
	case "ran":
		emit("ran %s", strings.Join(w.ran, " "))
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	return out
}

// hopArgs reads hops=, gen= and bounces= (each 0 if absent).
// known fails the test on a host the world command did not name.
func (w *world) known(t *testing.T, hosts ...string) {
	for _, h := range hosts {
		if !slices.Contains(w.hosts, h) {
			t.Fatalf("unknown host %q (world hosts=%s)", h, strings.Join(w.hosts, ","))
		}
	}
}

func hopArgs(kv map[string]string, unum func(string) uint64) Hop {
	opt := func(k string) uint64 {
		if v, ok := kv[k]; ok {
			return unum(v)
		}
		return 0
	}
	return Hop{Hops: uint8(opt("hops")), Gen: opt("gen"), Bounces: uint8(opt("bounces"))}
}

func frame(item string) []byte { return []byte(item) }

func fmtHeld(hs []HeldFrame) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("%d:%s", h.Seq, h.Frame)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtDecision(d Decision) string {
	if d.Action == ToHost {
		return fmt.Sprintf("to-host %s gen %d", d.Host, d.Gen)
	}
	return d.Action.String()
}

func (w *world) lookup(host, name string) string {
	e, ok := w.table(host).Lookup(obj(name), w.now)
	if !ok {
		return fmt.Sprintf("%s: %s unknown", host, name)
	}
	kind := ""
	if e.Follow {
		kind = " follow"
	}
	return fmt.Sprintf("%s: %s at %s gen %d until %d%s", host, name, e.Host, e.Gen, e.Expires, kind)
}

func (w *world) ord() *Order[string] { return w.in.Order() }

// offer runs the driver for one arriving message (again: sent again by a
// new run of its sender): Offer, then admit (Admitted), hold, keep
// (frozen), refuse (shut) or drop (a repeat), then drain what became
// ready. who prefixes the lines (the owner host in the world, ""
// otherwise).
func (w *world) offer(sender string, st Stamp, item string, again bool, who string, emit func(string, ...any)) {
	late := w.ord().Check([]byte(sender), st) == Late
	switch step, over := w.in.Offer([]byte(sender), st, false, again, item, w.now); step {
	case StepRepeat:
		emit("%sdrop %s (a repeat)", who, item)
	case StepAdmit:
		tag := ""
		if late {
			tag = " (late)"
		}
		w.ran = append(w.ran, item)
		emit("%sdeliver %s%s", who, item, tag)
		w.in.Admitted([]byte(sender), st, w.now)
	case StepHeld:
		tag := ""
		if over {
			tag = " (over the bound: push back on " + sender + ")"
		}
		emit("%shold %s%s", who, item, tag)
	case StepKeep:
		w.kept = append(w.kept, kept{sender, st, item})
		emit("%skeep %s (frozen)", who, item)
	case StepRefuse:
		emit("%srefuse %s (shut)", who, item)
	default:
		emit("%sstep %v for %s", who, step, item)
	}
	w.drain(who, emit)
}

func (w *world) skip(sender string, st Stamp, emit func(string, ...any)) {
	item := fmt.Sprintf("skip%s.%d", sender, st.Seq)
	v := w.ord().Check([]byte(sender), st)
	switch step, _ := w.in.Offer([]byte(sender), st, true, false, item, w.now); {
	case step == StepKeep:
		w.kept = append(w.kept, kept{sender, st, item})
		emit("keep %s (frozen)", item)
	case step == StepRefuse:
		emit("refuse %s (shut)", item)
	case v == Release:
		emit("skipped %s.%d", sender, st.Seq)
	case v == Hold:
		emit("hold %s", item)
	case v == Late:
		emit("ignored %s (behind)", item)
	}
	w.drain("", emit)
}

// drain takes what became ready; skip notices are dropped.
func (w *world) drain(who string, emit func(string, ...any)) {
	for {
		it, ok := w.in.Next()
		if !ok {
			return
		}
		if strings.HasPrefix(it, "skip") {
			emit("%sdrop %s", who, it)
			continue
		}
		w.ran = append(w.ran, it)
		emit("%sdeliver %s", who, it)
	}
}

// roundTrip moves an Order (and a Trail, if any) through its encoded
// snapshot into fresh ones, at the same time, and checks that the state
// survived the trip.
func roundTrip(t *testing.T, in *Inbox[string], tr *Trail, now int64) (*Inbox[string], []byte) {
	o := in.Order()
	snap := o.Snapshot(now, frame)
	if tr != nil {
		snap.Trail = tr.Snapshot(now)
	}
	b := AppendSnapshot(nil, snap)
	dec, err := DecodeSnapshot(b)
	if err != nil {
		t.Fatalf("decode snapshot: %v", err)
	}
	freshIn := &Inbox[string]{}
	fresh := freshIn.Order()
	fresh.MaxHeld = o.MaxHeld
	fresh.Restore(dec, now, func(_ uint64, f []byte) (string, bool) { return string(f), true })
	if got := fresh.Snapshot(now, frame); !reflect.DeepEqual(got.Senders, snap.Senders) {
		t.Fatalf("order changed in the snapshot round trip:\n got %+v\nwant %+v", got.Senders, snap.Senders)
	}
	if tr != nil {
		var back Trail
		back.Restore(dec.Trail, now)
		if got := back.Snapshot(now); !reflect.DeepEqual(got, snap.Trail) {
			t.Fatalf("trail changed in the snapshot round trip: got %+v want %+v", got, snap.Trail)
		}
		*tr = back
	}
	return freshIn, b
}

func (w *world) queue(from, to string, m msg) {
	k := from + ">" + to
	if _, ok := w.links[k]; !ok {
		w.linkKeys = append(w.linkKeys, k)
	}
	w.links[k] = append(w.links[k], m)
}

// send stamps item at from and routes it: to from itself if it owns o,
// else to from's table entry for o, else to the owner (a store lookup).
func (w *world) send(from, item string, emit func(string, ...any)) {
	s := w.senders[from]
	if s == nil {
		s = NewStreams(100, 1, worldIdle)
		w.senders[from] = s
	}
	m := msg{name: item, origin: from, stamp: s.Next(objO, w.now)}
	to, how := w.owner, "store"
	m.hop.Gen = w.gen
	if from == w.owner {
		how = "local"
	} else if e, ok := w.table(from).Lookup(objO, w.now); ok && e.Host != from {
		to, how, m.hop.Gen = e.Host, "table", e.Gen
	}
	emit("%s sends %s (stamp %d.%d) to %s gen %d (%s)", from, item, m.stamp.Epoch, m.stamp.Seq, to, m.hop.Gen, how)
	if how == "local" {
		w.offer(m.origin, m.stamp, m.name, false, "  "+to+": ", emit)
		return
	}
	w.queue(from, to, m)
}

// deliver takes the first message on from>to; to runs it if it owns o and
// forwards it otherwise.
func (w *world) deliver(t *testing.T, from, to string, emit func(string, ...any)) {
	k := from + ">" + to
	q := w.links[k]
	if len(q) == 0 {
		t.Fatalf("deliver %s: nothing in flight", k)
	}
	m := q[0]
	w.links[k] = q[1:]
	emit("%s receives %s (hops=%d gen=%d bounces=%d)", to, m.name, m.hop.Hops, m.hop.Gen, m.hop.Bounces)
	if to == w.owner {
		w.offer(m.origin, m.stamp, m.name, false, "  "+to+": ", emit)
		return
	}
	e, ok := w.table(to).Lookup(objO, w.now)
	d := Forward(m.hop, e, ok, to)
	if d.Action == Resolve {
		emit("  %s resolves: store says %s gen %d", to, w.owner, w.gen)
		d = Placed(m.hop, w.owner, w.gen, to)
	}
	switch d.Action {
	case ToHost:
		m.hop.Hops++
		m.hop.Gen = d.Gen
		emit("  %s forwards %s to %s (hops=%d gen=%d)", to, m.name, d.Host, m.hop.Hops, m.hop.Gen)
		w.queue(to, d.Host, m)
	case ToOrigin:
		m.hop.Hops = 0
		m.hop.Bounces++
		emit("  %s sends %s back to its origin %s (bounces=%d)", to, m.name, m.origin, m.hop.Bounces)
		w.queue(to, m.origin, m)
	default:
		emit("  %s: %s %s", to, d.Action, m.name)
	}
}

// move moves o atomically from its owner to to: its Order and Trail travel
// in an encoded snapshot; the old owner gets a forwarding route; the trail
// gets the old owner, and every trail host's entry learns the new owner
// (the hint, modelled as immediate).
func (w *world) move(t *testing.T, to string, emit func(string, ...any)) {
	old := w.owner
	var b []byte
	w.in, b = roundTrip(t, w.in, &w.trail, w.now)
	w.owner, w.gen = to, w.gen+1
	emit("o moves %s -> %s gen %d (snapshot %d bytes, %d held)", old, to, w.gen, len(b), w.in.Held())
	w.table(old).Learn(objO, Entry{Host: to, Gen: w.gen, Expires: w.now + worldTTL, Follow: true}, w.now)
	emit("  %s", w.lookup(old, "o"))
	w.trail.Add(old, w.now+worldTTL)
	var trail []string
	for _, h := range w.trail.Live(w.now) {
		trail = append(trail, h.Host)
		if w.table(h.Host).Update(objO, to, w.gen, w.now) {
			emit("  hint %s", w.lookup(h.Host, "o"))
		}
	}
	emit("  trail %s", strings.Join(trail, " "))
}
