package actor

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// eventsOf returns h's events of kind about host.
func eventsOf(h *Host, kind EventKind, host string) []Event {
	var out []Event
	for _, e := range h.Events(0) {
		if e.Kind == kind && e.Host == host {
			out = append(out, e)
		}
	}
	return out
}

// countOf sums the counts of h's events of kind about host.
func countOf(h *Host, kind EventKind, host string) int {
	n := 0
	for _, e := range eventsOf(h, kind, host) {
		n += e.Count
	}
	return n
}

func describeEvents(h *Host) string {
	var b strings.Builder
	for _, e := range h.Events(0) {
		fmt.Fprintf(&b, "\n  %d %s %s run=%d count=%d %s", e.Seq, e.Kind, e.Host, e.Run, e.Count, e.Detail)
	}
	return b.String()
}

// A host's event log says what happened to the cluster as it saw it: the
// members that joined; a drain (the drained host's own start and end,
// its peers' "draining" and "left", and the objects each peer received
// from it, counted); a host whose run failed (its own "rejoined", its
// peers' "failed", and the objects they took over from it, counted). A burst
// over many objects is a few counted events, not one per object.
func TestTheEventLogSaysWhoJoinedDrainedLeftAndFailed(t *testing.T) {
	const objects = 40
	n := NewNetwork(nil)
	a := startHost(t, shortLeases(n.With(Config{Name: "a", Logger: quietLogger()})), movableKind(newGates()))
	b := startHost(t, shortLeases(n.With(Config{Name: "b", Logger: quietLogger()})), movableKind(newGates()))
	c := startHost(t, shortLeases(n.With(Config{Name: "c", Logger: quietLogger()})), movableKind(newGates()))
	waitViews(t, a, b, c)
	for _, name := range []string{"b", "c"} {
		if len(eventsOf(a, EventJoined, name)) == 0 {
			t.Fatalf("a's events name no join of %s:%s", name, describeEvents(a))
		}
	}
	for i := range objects {
		if err := Tell(bg, c, Ref{"counter", "c" + strconv.Itoa(i)}, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
		if err := Tell(bg, b, Ref{"counter", "b" + strconv.Itoa(i)}, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the objects to activate", func() bool {
		return c.Stats().OwnersActive == objects && b.Stats().OwnersActive == objects
	})

	// c drains: its objects move to a and b.
	if err := c.Drain(bg); err != nil {
		t.Fatal(err)
	}
	if s := eventsOf(c, EventDrainStarted, "c"); len(s) != 1 || s[0].Count != objects {
		t.Fatalf("c's drain-started events: %+v, want one counting %d objects:%s", s, objects, describeEvents(c))
	}
	if e := eventsOf(c, EventDrainEnded, "c"); len(e) != 1 || e[0].Count != 0 || e[0].Detail != "" {
		t.Fatalf("c's drain-ended events: %+v, want one with no object left and no error", e)
	}
	waitFor(t, "a and b to record c's drain, leave and the objects they received", func() bool {
		return countOf(a, EventMovedIn, "c")+countOf(b, EventMovedIn, "c") == objects &&
			len(eventsOf(a, EventLeft, "c")) == 1 && len(eventsOf(b, EventLeft, "c")) == 1
	})
	if len(eventsOf(a, EventDraining, "c")) != 1 || len(eventsOf(a, EventFailed, "c")) != 0 {
		t.Fatalf("a's events about c: want one draining and no failure:%s", describeEvents(a))
	}
	for _, h := range []*Host{a, b} {
		checkBurstCounted(t, h, EventMovedIn, "c", objects)
	}

	// b's run ends while it owns objects (the membership expires it): a
	// records the failure, b joins again as a new run, dropping them,
	// and a takes them over.
	oldB, onB := b.lease.run(), b.Stats().OwnersActive // its own and some of c's
	n.Membership.Expire("b")
	waitFor(t, "b to join again", func() bool { return len(eventsOf(b, EventRejoined, "b")) == 1 })
	if r := eventsOf(b, EventRejoined, "b")[0]; r.Count != onB || r.Run != b.lease.run() {
		t.Fatalf("b's rejoined event: %+v, want its new run %d, counting the %d objects of the old", r, b.lease.run(), onB)
	}
	waitFor(t, "a to record b's failure and its new run", func() bool {
		return len(eventsOf(a, EventFailed, "b")) == 1 && len(eventsOf(a, EventJoined, "b")) == 2
	})
	if f := eventsOf(a, EventFailed, "b")[0]; f.Run != oldB || f.Detail == "" {
		t.Fatalf("a's failure event of b: %+v, want b's old run %d and how it was seen", f, oldB)
	}
	for i := range objects {
		waitFor(t, "an object of b to answer on a", func() bool {
			_, err := Ask[Get, int](bg, a, Ref{"counter", "b" + strconv.Itoa(i)}, Get{})
			return err == nil
		})
	}
	waitFor(t, "a to count the objects it took over from b", func() bool { return countOf(a, EventTookOver, "b") == objects })
	checkBurstCounted(t, a, EventTookOver, "b", objects)
	var seq uint64
	for _, e := range a.Events(0) {
		if e.Seq != seq+1 {
			t.Fatalf("a's events are not numbered one after another from 1:%s", describeEvents(a))
		}
		seq = e.Seq
	}
	if later := a.Events(seq - 1); len(later) != 1 || later[0].Seq != seq {
		t.Fatalf("a.Events(%d) = %+v, want only the newest", seq-1, later)
	}
}

// checkBurstCounted fails t unless h recorded its burst of kind about host
// (over objects) at most once per eventFlushEvery: no more events than
// the time from the first to the last allows — counted, not listed.
func checkBurstCounted(t *testing.T, h *Host, kind EventKind, host string, objects int) {
	t.Helper()
	es := eventsOf(h, kind, host)
	if len(es) == 0 {
		return
	}
	if max := int(es[len(es)-1].Time.Sub(es[0].Time)/eventFlushEvery) + 1; len(es) > max {
		t.Fatalf("%s recorded %d %s events about %s over %v for %d objects: a burst is counted at most once per %v, not listed:%s",
			h.name, len(es), kind, host, es[len(es)-1].Time.Sub(es[0].Time), objects, eventFlushEvery, describeEvents(h))
	}
}

// The event log keeps its newest eventRing events, numbered on; a burst
// counted between two flushes is one event.
func TestTheEventLogKeepsItsNewestEventsAndCountsABurstOnce(t *testing.T) {
	l := eventLog{self: "h"}
	for i := range eventRing + 100 {
		l.add(EventJoined, "p"+strconv.Itoa(i), uint64(i), 0, "")
	}
	all := l.since(0)
	if len(all) != eventRing || all[0].Seq != 101 || all[len(all)-1].Seq != eventRing+100 {
		t.Fatalf("the ring holds %d events, %d..%d; want %d, 101..%d", len(all), all[0].Seq, all[len(all)-1].Seq, eventRing, eventRing+100)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 {
			t.Fatalf("events out of order at %d: %d after %d", i, all[i].Seq, all[i-1].Seq)
		}
	}
	for range 300 {
		l.count(EventTookOver, "dead", 1)
	}
	l.flush(false)
	l.flush(false) // nothing more
	got := l.since(eventRing + 100)
	if len(got) != 1 || got[0].Kind != EventTookOver || got[0].Host != "dead" || got[0].Count != 300 {
		t.Fatalf("after a burst of 300: %+v, want one took-over event counting 300", got)
	}
	// A flush within eventFlushEvery of the last records nothing; the
	// close's final flush records what is left at once.
	l.count(EventTookOver, "dead", 7)
	l.flush(false)
	if got := l.since(eventRing + 101); len(got) != 0 {
		t.Fatalf("a flush right after one recorded %+v, want nothing before %v", got, eventFlushEvery)
	}
	l.flush(true)
	if got := l.since(eventRing + 101); len(got) != 1 || got[0].Count != 7 {
		t.Fatalf("the final flush recorded %+v, want one took-over event counting 7", got)
	}
}
